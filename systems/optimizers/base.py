"""The one-verb optimizer interface, the generators it steers, and the shared bookkeeping.

`PromptOptimizer.optimize(generator, spec, seed, ctx, budget) -> OptimizationResult` is the whole contract
(like DSPy's `compile`): an optimizer gets a generator that turns an editable prompt (`DiffusionPrompt`)
into samples, spends at most `budget.generator_calls` generator calls, and returns its best prompt, a
trace whose iteration events carry integer `iteration` and numeric `reward`, and its usage.

Two things keep comparisons honest:
- `MeteredGenerator` counts every prompt sent to the generator (cache hit or not) and refuses calls past
  the budget, so AoD, PromptBreeder and EvoPrompt spend exactly the same generator budget.
- `evaluation_view(spec)` is the only task an optimizer scores against: it is built from
  `spec.references` alone (memorization against all references, similarity against a validation
  slice of them) and never reads `spec.holdout`, which belongs to the final metrics.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Protocol

from bench.errors import BenchError
from bench.hashing import stable_hash
from bench.types import (
    JSON,
    GenerationRequest,
    GenerationResult,
    RunContext,
    Sample,
    SamplingParams,
    TaskSpec,
    Usage,
)
from systems.skeleton_prompt import DiffusionPrompt, render_prompt


# ------------------------------------------------------------------------------------------ budget
@dataclass(frozen=True)
class Budget:
    """Generator calls an optimizer may spend while optimizing (the final n samples are not counted).

    `batch_size` is how many samples one prompt evaluation costs, so `evaluations` prompts can be tried.
    """

    generator_calls: int
    batch_size: int = 4

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.generator_calls < self.batch_size:
            raise BenchError(
                f"optimizer budget of {self.generator_calls} generator calls cannot pay for one "
                f"evaluation batch of {self.batch_size}"
            )

    @property
    def evaluations(self) -> int:
        return self.generator_calls // self.batch_size


class BudgetExceeded(BenchError):
    """An optimizer asked for more generator calls than its budget (a bug in the optimizer)."""


def derived_seed(seed: int, salt: str) -> int:
    """A 31-bit seed per purpose, so optimizer streams never collide with the final generation's."""
    return int(stable_hash({"seed": seed, "salt": salt}, 8), 16) & 0x7FFFFFFF


def derived_rng(seed: int, salt: str) -> random.Random:
    return random.Random(derived_seed(seed, salt))


# --------------------------------------------------------------------------------------- generators
class PromptGenerator(Protocol):
    """A frozen generator an optimizer can steer: it turns one editable prompt into n samples.

    The prompt is a template (instruction, notes, fields, hints); the generator adds its own per-sample
    few-shot examples, drawn from `spec.references` by (seed, sample index).
    """

    name: str

    def initial_prompt(self, spec: TaskSpec) -> DiffusionPrompt: ...

    def generate(
        self, spec: TaskSpec, prompt: DiffusionPrompt, n: int, seed: int, ctx: RunContext
    ) -> GenerationResult: ...


@dataclass
class SteerPrompt(DiffusionPrompt):
    """An editable prompt plus distributional hints: `hint_pools` lists (field, values) pairs, and each
    sample gets one value per pooled field (llada's `hint_pools`), so a hint can spread a field's
    values instead of pinning one value in every record."""

    hint_pools: list[tuple[str, list[str]]] = field(default_factory=list)
    #: joint pools (llada's `joint_pools`): (fields, rows); each sample takes one row for all the fields
    joint_pools: list[tuple[tuple[str, ...], list[tuple[str, ...]]]] = field(default_factory=list)


def prompt_pools(prompt: DiffusionPrompt) -> dict[str, list[str]]:
    return {f: list(v) for f, v in getattr(prompt, "hint_pools", [])}


def prompt_joint(prompt: DiffusionPrompt) -> list[tuple[tuple[str, ...], list[tuple[str, ...]]]]:
    return [(tuple(f), [tuple(r) for r in rows]) for f, rows in getattr(prompt, "joint_pools", [])]


def joint_line(fields: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """How a joint pool reads in traces and agent prompts (the generator draws one row per record)."""
    return f"{', '.join(fields)}: taken together from one of {len(rows)} real records (a different one per record)"


def pool_line(field_name: str, values: list[str]) -> str:
    """How a distributional hint reads in traces and agent prompts (the generator draws one value)."""
    return f"{field_name}: one of {', '.join(values)} (a different one per record)"


def template_text(prompt: DiffusionPrompt) -> str:
    """The editable part of a prompt as text (no examples): what traces record and agents read."""
    text = render_prompt(
        DiffusionPrompt(prompt.instruction, list(prompt.notes), [], list(prompt.fields), list(prompt.hints))
    )
    pools = [pool_line(f, v) for f, v in prompt_pools(prompt).items()]
    pools += [joint_line(f, rows) for f, rows in prompt_joint(prompt)]
    return "\n".join([text, *pools]) if pools else text


def copy_prompt(prompt: DiffusionPrompt) -> SteerPrompt:
    return SteerPrompt(
        prompt.instruction,
        list(prompt.notes),
        list(prompt.examples),
        list(prompt.fields),
        list(prompt.hints),
        [(f, list(v)) for f, v in prompt_pools(prompt).items()],
        prompt_joint(prompt),
    )


def steer_params(prompt: DiffusionPrompt) -> JSON:
    """The prompt as `llada` params (the steering contract: instruction, notes, hints, pools), so an
    optimized prompt can be run again by plain `llada` (benchmarks/aod/replay.py).

    The field list is not an edit target, so `with_fields` (llada's default) covers it; few-shot
    examples are drawn per sample by the generator, as `llada` draws them."""
    return {
        "instruction": prompt.instruction,
        "notes": list(prompt.notes),
        "hints": dict(prompt.hints),
        "hint_pools": prompt_pools(prompt),
        "joint_pools": [
            {"fields": list(f), "rows": [list(r) for r in rows]} for f, rows in prompt_joint(prompt)
        ],
    }


class MeteredGenerator:
    """Fronts a generator with the budget: every evaluation costs `batch_size` generator calls.

    Evaluations use common random numbers: every candidate prompt is sampled with the same evaluation
    seed and sample indices (hence the same few-shot examples and sampler noise), so two prompts'
    rewards differ because of the prompts, not because of luck. That seed is derived from the run seed
    and differs from the final generation's seed.
    """

    def __init__(
        self, generator: PromptGenerator, budget: Budget, spec: TaskSpec, seed: int, ctx: RunContext
    ):
        self.generator = generator
        self.budget = budget
        self.spec = spec
        self.ctx = ctx
        self.eval_seed = derived_seed(seed, "optimizer-evaluation")
        self.spent = 0
        self.usage = Usage()

    @property
    def remaining_evaluations(self) -> int:
        return (self.budget.generator_calls - self.spent) // self.budget.batch_size

    def round_seed(self, round_index: int) -> int:
        """The evaluation seed of round `round_index` (AoD draws fresh samples every round)."""
        return derived_seed(self.eval_seed, f"round-{round_index}")

    def evaluate(self, prompt: DiffusionPrompt, seed: int | None = None) -> list[Sample]:
        """One batch with `prompt` on the evaluation seed (or `seed`: a round's fresh seed)."""
        k = self.budget.batch_size
        if self.spent + k > self.budget.generator_calls:
            raise BudgetExceeded(
                f"optimizer asked for {k} more generator calls with {self.budget.generator_calls - self.spent} left"
            )
        use = self.eval_seed if seed is None else seed
        result = self.generator.generate(self.spec, prompt, k, use, self.ctx)
        self.spent += k
        add_generator_usage(self.usage, result.usage, k)
        return result.samples


def add_generator_usage(total: Usage, part: Usage, calls: int) -> None:
    """Add a generation's usage, counting `calls` generator calls whether or not the cache answered.

    Generators disagree on whether a cache hit is a call (`ar` counts misses only, `llada` counts all);
    the budget is about prompts sent, so the count here is the number of prompts.
    """
    counted = Usage(**{**part.to_json(), "generator_calls": calls})
    total.add(counted)


class DiffusionPromptGenerator:
    """`llada` as a steerable generator: the template replaces llada's instruction/notes/fields/hints,
    the few-shot examples stay llada's own per-sample draw, so an unedited template is exactly `llada`."""

    name = "llada"

    def __init__(self, params: JSON | None = None) -> None:
        from systems.llada import LLaDASystem

        self.system = LLaDASystem(params)

    def initial_prompt(self, spec: TaskSpec) -> DiffusionPrompt:
        parts = copy_prompt(self.system.prompt_parts(spec, 0, 0))
        parts.examples = []
        p = self.system.params
        parts.hints = list(p.hints.items())
        parts.hint_pools = [(f, list(v)) for f, v in p.hint_pools.items() if v]
        parts.joint_pools = [(tuple(j.fields), [tuple(r) for r in j.rows]) for j in p.joint_pools]
        return parts

    def generate(
        self, spec: TaskSpec, prompt: DiffusionPrompt, n: int, seed: int, ctx: RunContext
    ) -> GenerationResult:
        from systems.llada import with_pool_hints

        pools = prompt_pools(prompt)
        texts = []
        for i in range(n):
            parts = copy_prompt(prompt)
            parts.examples = self.system.prompt_parts(spec, seed, i).examples
            parts.hints = with_pool_hints(list(prompt.hints), pools, seed, i, prompt_joint(prompt))
            texts.append(render_prompt(parts))
        return self.system.generate_from_prompts(spec, texts, seed, ctx)


class ARPromptGenerator:
    """`ar` as a steerable generator: notes and hints become lines of the instruction; schema and
    few-shot examples are `ar`'s own, so an unedited template is exactly `ar`."""

    name = "ar"

    def __init__(self, params: JSON | None = None) -> None:
        from systems.ar import ARSystem

        self.system = ARSystem(params)

    def initial_prompt(self, spec: TaskSpec) -> DiffusionPrompt:
        return DiffusionPrompt(instruction=spec.instruction)

    def generate(
        self, spec: TaskSpec, prompt: DiffusionPrompt, n: int, seed: int, ctx: RunContext
    ) -> GenerationResult:
        return self.system.generate(ar_spec(spec, prompt), n, seed, ctx)


def ar_spec(spec: TaskSpec, prompt: DiffusionPrompt) -> TaskSpec:
    """The task with the prompt's instruction, notes and hints as its instruction (for `ar`).

    A shallow copy: `holdout` is passed along untouched, never read.
    """
    from dataclasses import replace

    lines = [prompt.instruction.strip()] if prompt.instruction.strip() else []
    lines += [note.strip() for note in prompt.notes if note.strip()]
    if prompt.hints:
        lines.append("Use these values: " + "; ".join(f"{k} = {v}" for k, v in prompt.hints))
    for f, values in prompt_pools(prompt).items():
        # ar writes one prompt for all samples, so a pool is stated, not drawn per sample
        lines.append(f"For {f}, use one of: {', '.join(values)}, a different one each time.")
    for fields, rows in prompt_joint(prompt):
        shown = "; ".join(" / ".join(r) for r in rows[:8])
        lines.append(f"Take {', '.join(fields)} together from one of: {shown}, a different one each time.")
    return replace(spec, instruction="\n".join(lines))


GENERATORS = {"llada": DiffusionPromptGenerator, "ar": ARPromptGenerator}


def make_generator(kind: str, params: JSON | None = None) -> PromptGenerator:
    if kind not in GENERATORS:
        raise BenchError(
            f"unknown generator {kind!r} for a prompt optimizer; choose from {sorted(GENERATORS)}"
        )
    return GENERATORS[kind](params)


# ------------------------------------------------------------------------------------ evaluation view
def evaluation_view(spec: TaskSpec, validation_fraction: float = 0.25) -> TaskSpec:
    """The task as an optimizer may score it, from `spec.references` only.

    Memorization metrics (field overlap, novelty, exact copies) compare against all references, as the
    final metrics do; similarity compares against a fixed validation slice of the references (chosen by
    `spec.split_seed`, not the run seed), standing in for the holdout the optimizer must never see.
    """
    refs = list(spec.references)
    order = list(range(len(refs)))
    random.Random(derived_seed(spec.split_seed, "optimizer-validation")).shuffle(order)
    n_val = max(1, round(len(refs) * validation_fraction)) if refs else 0
    validation = tuple(refs[i] for i in sorted(order[:n_val]))
    return TaskSpec(
        name=spec.name,
        instruction=spec.instruction,
        schema=spec.schema,
        references=tuple(refs),
        holdout=validation,
        rubric=spec.rubric,
        fingerprint=f"{spec.fingerprint}:optimizer-view",
        split_seed=spec.split_seed,
    )


# ------------------------------------------------------------------------------------------- agents
@dataclass
class Agent:
    """An LLM in an agent role (optimizer, judge) with its own seeded call stream and usage.

    Calls are seeded by (run seed, role) and indexed by `key` (a content hash) when given, else by a
    running counter, so the same run makes the same requests in the same order.
    """

    ctx: RunContext
    role: str
    seed: int
    temperature: float
    max_tokens: int
    usage: Usage = field(default_factory=Usage)
    calls: int = 0

    def ask(
        self,
        user: str,
        key: object | None = None,
        system: str | None = None,
        max_tokens: int | None = None,
        json_schema: JSON | None = None,
    ) -> str:
        """The agent's reply to `user` ("" on a backend error).

        `json_schema` asks for a reply constrained to that schema (a GBNF grammar on llama.cpp); a
        backend without constrained decoding ignores it, so callers still parse the reply defensively.
        """
        backend = self.ctx.backend(self.role)
        index = int(stable_hash(key, 8), 16) & 0x7FFFFFFF if key is not None else self.calls
        params = SamplingParams(
            temperature=self.temperature, max_tokens=max_tokens or self.max_tokens, json_schema=json_schema
        )
        request = GenerationRequest.chat(
            user, params, derived_seed(self.seed, self.role), index, system=system
        )
        t0 = time.perf_counter()
        completion = backend.generate([request])[0]
        self.calls += 1
        self.usage.add_call(
            completion.tokens_in,
            completion.tokens_out,
            completion.cached,
            cost_usd=completion.cost_usd,
            agent=True,
        )
        if self.role == "judge":
            self.usage.judge_calls += 1
        self.usage.seconds += time.perf_counter() - t0
        return "" if completion.error else completion.text


def role_temperature(ctx: RunContext, role: str, default: float) -> float:
    """The role preset's paper temperature (catalog `sampling:`), else the optimizer's default."""
    try:
        sampling = ctx.model_spec(role).get("sampling") or {}
    except BenchError:
        return default
    return float(sampling.get("temperature", default))


# ------------------------------------------------------------------------------------------ results
@dataclass
class OptimizationResult:
    """The best prompt found, the per-iteration trace, and what it cost (generator + agents)."""

    prompt: DiffusionPrompt
    trace: list[JSON]
    usage: Usage
    best_reward: float = float("nan")


class PromptOptimizer(Protocol):
    """The one verb every prompt optimizer implements."""

    name: str

    def optimize(
        self, generator: PromptGenerator, spec: TaskSpec, seed: int, ctx: RunContext, budget: Budget
    ) -> OptimizationResult: ...
