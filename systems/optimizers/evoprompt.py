"""EvoPrompt (Guo et al., 2024), genetic-algorithm variant: an LLM acts as crossover and mutation operator.

Population of instructions; each step draws two parents by roulette wheel on fitness, asks the LLM to
cross them over and mutate the result (the paper's two-step request, answer between <prompt> tags),
evaluates the child on one batch, and keeps the best `population` of parents and child (a steady-state
form of the paper's per-generation top-N selection, so a small budget still runs several steps). The
initial population is the task instruction plus LLM paraphrases of it. A reply without a usable
instruction is replaced by a template crossover (first sentence of one parent, the rest of the other),
recorded in the trace. The differential-evolution variant is not built.
"""

from __future__ import annotations

import random
import re

from bench.types import JSON, RunContext, TaskSpec, Usage
from systems.optimizers.base import (
    Budget,
    OptimizationResult,
    PromptGenerator,
)
from systems.optimizers.evaluator import NaturalLanguageEvaluator
from systems.optimizers.evolution import (
    Unit,
    fitness,
    read_instruction,
    start_evolution,
    unit_event,
    with_instruction,
)

GA_TEMPLATE = (
    "Please follow the instruction step-by-step to generate a better prompt.\n"
    "1. Cross over the following prompts and generate a new prompt:\n"
    "Prompt 1: {a}\nPrompt 2: {b}\n"
    "2. Mutate the prompt generated in Step 1 and generate a final prompt bracketed with <prompt> and </prompt>."
)
PARAPHRASE_TEMPLATE = "Generate a variation of the following instruction while keeping the semantic meaning.\nInput: {a}\nOutput:"


def template_crossover(a: str, b: str) -> str:
    """First sentence of `a`, the remaining sentences of `b` (the fallback when the LLM's reply is junk)."""
    sa = re.split(r"(?<=[.!?])\s+", a.strip())
    sb = re.split(r"(?<=[.!?])\s+", b.strip())
    return " ".join([sa[0]] + sb[1:]) if len(sb) > 1 else f"{sa[0]} {sb[0]}" if sa[0] != sb[0] else a


def roulette(pop: list[Unit], rng: random.Random, k: int = 2) -> list[Unit]:
    """`k` distinct parents drawn with probability proportional to fitness (uniform when all are 0)."""
    chosen: list[Unit] = []
    pool = list(pop)
    while pool and len(chosen) < k:
        weights = [max(u.fitness, 0.0) + 1e-6 for u in pool]
        pick = rng.choices(range(len(pool)), weights=weights)[0]
        chosen.append(pool.pop(pick))
    return chosen


class EvoPromptOptimizer:
    name = "evoprompt"

    def __init__(
        self,
        population: int = 4,
        temperature: float = 0.7,
        max_tokens: int = 80,
        with_similarity: bool = True,
        with_perplexity: bool = False,
        validation_fraction: float = 0.25,
    ) -> None:
        self.population = population
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.evaluator = NaturalLanguageEvaluator(with_similarity, with_perplexity)
        self.validation_fraction = validation_fraction

    def optimize(
        self, generator: PromptGenerator, spec: TaskSpec, seed: int, ctx: RunContext, budget: Budget
    ) -> OptimizationResult:
        run = start_evolution("evoprompt", self, generator, spec, seed, ctx, budget)
        view, meter, agent, rng = run.view, run.meter, run.agent, run.rng
        template, original, n_init, trace = run.template, run.original, run.n_init, run.trace
        pop: list[Unit] = []
        for i in range(n_init):
            info: JSON = {}
            instruction = original
            if i:
                reply = agent.ask(PARAPHRASE_TEMPLATE.format(a=original))
                instruction, why = read_instruction(reply, original)
                info = {"agent_reply": reply, "operator": "paraphrase", "mutation_source": "agent"}
                if instruction is None:
                    instruction = template_crossover(original, pop[-1].instruction if pop else original)
                    info.update(mutation_source="fallback", fallback_reason=why)
            unit = Unit(instruction, origin="initial" if i == 0 else "paraphrase")
            fitness(unit, template, meter, view, self.evaluator, ctx)
            pop.append(unit)
            trace.append(unit_event("evoprompt_unit", i, unit, meter, template, **info))
        iteration = len(pop)
        while meter.remaining_evaluations > 0:
            parents = roulette(pop, rng)
            a = parents[0].instruction
            b = parents[1].instruction if len(parents) > 1 else parents[0].instruction
            reply = agent.ask(GA_TEMPLATE.format(a=a, b=b))
            instruction, why = read_instruction(reply, original)
            info = {"operator": "ga", "agent_reply": reply, "parents": [a, b], "mutation_source": "agent"}
            if instruction is None:
                instruction = template_crossover(a, b)
                info.update(mutation_source="fallback", fallback_reason=why)
            child = Unit(instruction, origin="ga")
            fitness(child, template, meter, view, self.evaluator, ctx)
            pop = sorted(pop + [child], key=lambda u: -u.fitness)[: self.population]
            info["survived"] = any(u is child for u in pop)
            trace.append(unit_event("evoprompt_unit", iteration, child, meter, template, **info))
            iteration += 1
        best = max(pop, key=lambda u: u.fitness)
        trace.append({"event": "evoprompt_best", "instruction": best.instruction, "fitness": best.fitness})
        usage = Usage().add(meter.usage).add(agent.usage)
        return OptimizationResult(with_instruction(template, best.instruction), trace, usage, best.fitness)
