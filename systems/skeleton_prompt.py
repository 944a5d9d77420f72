"""Natural-language prompts for diffusion generation, rendered from editable parts.

The embedded DLM is trained on prompts of exactly this shape (with parts randomly present or absent),
so what a prompt says steers what it generates; AoD's optimizer edits the parts or the rendered text.
Layout, one item per line: instruction, free notes, examples, `Fields: a, b, c`, then `field: value`
hints. The embedded DLM reads every line as a sentence vector and, as tokens, all lines but the first
(the instruction) and the examples (the last 64, so notes and hints, which come last, stay in view;
systems/backends/mdlm/conditioning.py).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.types import JSON, TaskSpec


@dataclass
class DiffusionPrompt:
    """The pieces of a generation prompt; every piece is optional."""

    instruction: str = ""
    notes: list[str] = field(default_factory=list)
    examples: list[JSON] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)
    hints: list[tuple[str, str]] = field(default_factory=list)


def render_prompt(parts: DiffusionPrompt) -> str:
    """The prompt text the DLM sees (deterministic in `parts`)."""
    lines: list[str] = []
    if parts.instruction.strip():
        lines.append(parts.instruction.strip())
    lines.extend(n.strip() for n in parts.notes if n.strip())
    lines.extend("Example: " + json.dumps(e, ensure_ascii=False) for e in parts.examples)
    if parts.fields:
        lines.append("Fields: " + ", ".join(parts.fields))
    lines.extend(f"{k}: {hint_value(v)}" for k, v in parts.hints)
    return "\n".join(lines)


def leaf_items(record: Any, path: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every scalar leaf; list items use `[]` like the metrics' paths."""
    if isinstance(record, dict):
        return [it for k, v in record.items() for it in leaf_items(v, f"{path}.{k}" if path else k)]
    if isinstance(record, list):
        return [it for v in record for it in leaf_items(v, f"{path}[]")]
    return [(path, record)]


def hint_text(value: Any) -> str:
    """A hint's value as given in DiffusionPrompt.hints (strings as they are, others in JSON)."""
    return value if isinstance(value, str) else json.dumps(value)


def hint_value(text: str) -> str:
    """How a hint value is written: JSON-quoted, so its tokens are the ones the value has in the record.

    `day: "monday"` tokenizes `monday` exactly as `"day": "monday"` does, which lets a small DLM learn to
    copy hinted values; numbers and literals (`12`, `true`, `null`) are written bare.
    """
    try:
        v = json.loads(text)
        if not isinstance(v, (dict, list, str)):
            return text
    except json.JSONDecodeError:
        pass
    return json.dumps(text, ensure_ascii=False)


def top_fields(spec: TaskSpec) -> list[str]:
    return list(spec.schema.get("properties", {}))


def default_parts(spec: TaskSpec, examples: Sequence[JSON] = (), with_fields: bool = True) -> DiffusionPrompt:
    """The `llada` system's prompt: task instruction, few-shot references, the field list."""
    return DiffusionPrompt(
        instruction=spec.instruction,
        examples=list(examples),
        fields=top_fields(spec) if with_fields else [],
    )


GENERIC_INSTRUCTIONS = (
    "Generate one new {name} record as JSON.",
    "Write a JSON record.",
    "Create a realistic {name} entry in JSON format.",
    "",
)


def value_pools(references: Sequence[JSON], max_hint_chars: int = 40) -> dict[str, list[Any]]:
    """Distinct values of every object-path leaf (no `[]` paths) across the references, for hint swaps."""
    pools: dict[str, dict[str, Any]] = {}
    for r in references:
        for p, v in leaf_items(r):
            if v is not None and "[]" not in p and len(hint_text(v)) <= max_hint_chars:
                pools.setdefault(p, {})[json.dumps(v, sort_keys=True)] = v
    return {p: list(vs.values()) for p, vs in pools.items() if len(vs) > 1}


def set_path(record: JSON, path: str, value: Any) -> None:
    """Set the leaf at dotted object `path` (as `leaf_items` writes it, without `[]`) in place."""
    *heads, last = path.split(".")
    node = record
    for k in heads:
        node = node[k]
    node[last] = value


def training_example(
    spec: TaskSpec,
    target: JSON,
    rng: random.Random,
    pools: Mapping[str, Sequence[Any]] | None = None,
    swap: float = 0.0,
    n_examples: int | None = None,
    max_hints: int = 3,
) -> tuple[DiffusionPrompt, JSON]:
    """A training prompt and the record it asks for.

    With probability `swap` per hint, the hinted field gets another reference's value (from `pools`) in
    both the hint and the record. Without swaps a hint only ever states what the references already make
    likely (routes fix durations and prices), so copying it is worth little over guessing; a swapped
    hint is the only evidence for its value. Measured on MultiWOZ `day`: neither swaps nor the hint-token
    weight alone made the model follow hints, the two together did (docs/systems-diffusion.md).
    """
    parts = training_parts(spec, target, rng, n_examples=n_examples, max_hints=max_hints)
    if not swap or not pools or not parts.hints:
        return parts, target
    record = copy.deepcopy(target)
    for i, (p, _) in enumerate(parts.hints):
        if p in pools and rng.random() < swap:
            v = rng.choice(pools[p])
            set_path(record, p, v)
            parts.hints[i] = (p, hint_text(v))
    return parts, record


HINT_COUNTS = (0, 0, 0, 1, 1, 2, 3)
"""How many hint lines a training prompt carries, drawn uniformly from this tuple (at most 3)."""


def hint_counts(max_hints: int = 3) -> tuple[int, ...]:
    """The tuple the number of a training prompt's hint lines is drawn from: HINT_COUNTS, plus one entry
    for each count from 4 to `max_hints`. AoD's joint pool writes five lines (`max_hints` 5), more than
    the default DLM ever saw, and the records it writes under them break the more the more lines there
    are (docs/systems-aod.md, "Hint lines the DLM never saw"). At 3 the tuple is HINT_COUNTS itself, so
    the draws, and the models trained before the knob, are unchanged."""
    return HINT_COUNTS + tuple(range(4, max_hints + 1))


def training_parts(
    spec: TaskSpec,
    target: JSON,
    rng: random.Random,
    max_hint_chars: int = 40,
    n_examples: int | None = None,
    max_hints: int = 3,
) -> DiffusionPrompt:
    """A randomly varied prompt whose hints are true of `target` (what the DLM learns to follow).

    `n_examples`: how many few-shot references (other than `target`) the prompt shows; None draws one
    in 15% of prompts (the training of code versions up to mdlm-6). `max_hints`: the most hint lines a
    prompt carries (hint_counts).
    """
    r = rng.random()
    if r < 0.5:
        instruction = spec.instruction
    else:
        instruction = rng.choice(GENERIC_INSTRUCTIONS).format(name=spec.name.split("/")[-1])
    parts = DiffusionPrompt(instruction=instruction)
    if rng.random() < 0.7:
        parts.fields = top_fields(spec)
    leaves = [(p, v) for p, v in leaf_items(target) if v is not None and len(hint_text(v)) <= max_hint_chars]
    n_hints = rng.choice(hint_counts(max_hints))
    for p, v in rng.sample(leaves, min(n_hints, len(leaves))):
        parts.hints.append((p, hint_text(v)))
    if n_examples is None:
        n_examples = 1 if rng.random() < 0.15 else 0
    others = [
        r for r in rng.sample(spec.references, min(len(spec.references), n_examples + 1)) if r is not target
    ]
    parts.examples = others[:n_examples]
    return parts
