"""What the two evolutionary baselines (PromptBreeder, EvoPrompt) share: units, fitness, reading an
LLM's instruction, and the trace event.

Both evolve the *instruction* of the prompt (the task-prompt of their papers); fields, few-shot examples
and hints stay the generator's own. Fitness is the judge-free reward (systems.optimizers.reward without
the `judge` term) of one batch scored by the natural-language evaluator's metrics against the
references-only evaluation view: the same numbers AoD's scorer uses, minus the LLM judge AoD adds.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any

from bench.types import JSON, RunContext, TaskSpec
from systems.optimizers.base import (
    Agent,
    Budget,
    MeteredGenerator,
    PromptGenerator,
    copy_prompt,
    derived_rng,
    evaluation_view,
    role_temperature,
    template_text,
)
from systems.optimizers.edits import clean_line
from systems.optimizers.evaluator import Evaluation, NaturalLanguageEvaluator
from systems.optimizers.reward import reward, subrewards
from systems.skeleton_prompt import DiffusionPrompt

_LABEL = re.compile(
    r"^(?:instruction mutant|instruction|final prompt|new prompt|prompt|task|output)\s*:\s*", re.I
)
#: Lines about the procedure rather than an instruction ("Cross-over from Step 1 to Step 2:").
_META = re.compile(r":$|\bstep \d|\bprompt \d|cross-?over|\bmutat", re.I)
_CHATTER = re.compile(
    r"^(sure|okay|ok|here|i |i'm|i am|as an ai|certainly|of course|cheers|thank|note)", re.I
)


@dataclass
class Unit:
    """One member of a population: an instruction (plus, for PromptBreeder, its mutation-prompt)."""

    instruction: str
    fitness: float = float("nan")
    mutation_prompt: str = ""
    origin: str = "initial"
    values: dict[str, float] = field(default_factory=dict)
    lineage: list[str] = field(default_factory=list)  # elite ancestors, oldest first (PromptBreeder)


def with_instruction(template: DiffusionPrompt, instruction: str) -> DiffusionPrompt:
    out = copy_prompt(template)
    out.instruction = instruction
    return out


def fitness(
    unit: Unit,
    template: DiffusionPrompt,
    meter: MeteredGenerator,
    view: TaskSpec,
    evaluator: NaturalLanguageEvaluator,
    ctx: RunContext,
) -> Evaluation:
    """Evaluate a unit on one batch (costs `batch_size` generator calls) and set its fitness."""
    samples = meter.evaluate(with_instruction(template, unit.instruction))
    ev = evaluator.evaluate(samples, view, ctx)
    unit.values = ev.values
    unit.fitness = reward(subrewards(ev.values, None))
    return ev


def read_instruction(
    reply: str, original: str, max_ratio: float = 1.5, min_chars: int = 20
) -> tuple[str | None, str]:
    """The instruction in an LLM reply (EvoPrompt's <prompt> tags, a `Prompt:` line, else the first
    non-chatter line), or None with the reason it was rejected."""
    tagged = re.search(r"<prompt>(.*?)(?:</prompt>|$)", reply, re.S | re.I)
    text = tagged.group(1) if tagged else reply
    lines = [clean_line(x) for x in text.splitlines()]
    lines = [_LABEL.sub("", ln) for ln in lines]
    candidates = [
        ln for ln in lines if ln and not _CHATTER.match(ln) and not _META.search(ln) and "{" not in ln
    ]
    if not candidates:
        return None, "reply had no instruction line"
    best = candidates[0]
    limit = int(max_ratio * max(len(original), 40))
    if len(best) > limit:
        cut = best[:limit].rsplit(". ", 1)[0]
        best = cut if len(cut) >= min_chars else best[:limit]
    if len(best) < min_chars or len(best.split()) < 4:
        return None, f"instruction shorter than {min_chars} characters or 4 words"
    return best, ""


def unit_event(
    event: str,
    iteration: int,
    unit: Unit,
    meter: MeteredGenerator,
    template: DiffusionPrompt,
    **extra: object,
) -> JSON:
    return {
        "event": event,
        "iteration": iteration,
        "reward": unit.fitness,
        "metrics": {k: (None if math.isnan(v) else v) for k, v in unit.values.items()},
        "prompt": template_text(with_instruction(template, unit.instruction)),
        "origin": unit.origin,
        "generator_calls": meter.spent,
        **extra,
    }


@dataclass
class EvolutionRun:
    """What every evolutionary optimizer sets up before its loop (PromptBreeder, EvoPrompt)."""

    view: TaskSpec
    meter: MeteredGenerator
    agent: Agent
    rng: random.Random
    template: DiffusionPrompt
    original: str
    n_init: int
    trace: list[JSON]


def start_evolution(
    name: str,
    optimizer: Any,
    generator: PromptGenerator,
    spec: TaskSpec,
    seed: int,
    ctx: RunContext,
    budget: Budget,
) -> EvolutionRun:
    """Evaluation view of the references, metered generator, optimizer agent, seeded RNG and the
    initial population size (leaving at least one evaluation for evolution when the budget allows)."""
    agent = Agent(
        ctx,
        "optimizer",
        seed,
        role_temperature(ctx, "optimizer", optimizer.temperature),
        optimizer.max_tokens,
    )
    template = generator.initial_prompt(spec)
    n_init = max(
        1, min(optimizer.population, budget.evaluations - 1 if budget.evaluations > 2 else budget.evaluations)
    )
    return EvolutionRun(
        view=evaluation_view(spec, optimizer.validation_fraction),
        meter=MeteredGenerator(generator, budget, spec, seed, ctx),
        agent=agent,
        rng=derived_rng(seed, name),
        template=template,
        original=template.instruction,
        n_init=n_init,
        trace=[{"event": f"{name}_start", "budget": budget.generator_calls, "population": n_init}],
    )
