"""Prompt construction shared by the autoregressive systems (and editable by prompt optimizers).

A generation prompt is built from parts (instruction, schema, few-shot references, closing request) so
that optimizers such as AoD can edit the text while the harness keeps the schema and examples honest.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from bench.hashing import stable_hash
from bench.types import JSON, TaskSpec

DEFAULT_CLOSING = (
    "Write one new, realistic record that is different from the examples. Answer with the JSON object only."
)


def compact(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def sample_rng(seed: int, sample_index: int, salt: str = "") -> random.Random:
    """A private RNG per (seed, sample) so that few-shot choice never depends on call order."""
    return random.Random(int(stable_hash({"seed": seed, "i": sample_index, "salt": salt}, 12), 16))


@dataclass(frozen=True)
class PromptParts:
    instruction: str
    schema: JSON
    examples: tuple[JSON, ...]
    closing: str = DEFAULT_CLOSING

    def render(self) -> str:
        lines = [
            self.instruction.strip(),
            "",
            "The record must be one JSON object valid against this JSON Schema:",
        ]
        lines.append(compact(self.schema))
        if self.examples:
            lines += ["", "Examples of valid records:"]
            lines += [compact(r) for r in self.examples]
        lines += ["", self.closing]
        return "\n".join(lines)


def choose_examples(
    references: tuple[JSON, ...] | list[JSON], rng: random.Random, k: int, char_budget: int = 2400
) -> tuple[tuple[JSON, ...], list[int]]:
    """Pick up to k references at random, dropping any that would push the prompt past char_budget."""
    if k <= 0 or not references:
        return (), []
    order = rng.sample(range(len(references)), min(k, len(references)))
    chosen, idx, used = [], [], 0
    for i in order:
        size = len(compact(references[i]))
        if used + size > char_budget:  # even the first: a huge example would crowd out the context
            continue
        chosen.append(references[i])
        idx.append(i)
        used += size
    return tuple(chosen), idx


def build_generation_prompt(spec: TaskSpec, rng: random.Random, k_shots: int, char_budget: int = 2400) -> str:
    examples, _ = choose_examples(spec.references, rng, k_shots, char_budget)
    return PromptParts(spec.instruction, spec.schema, examples).render()
