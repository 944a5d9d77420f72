"""EvoPrompt (Guo et al., 2023/2024): an LLM acts as the evolutionary operators on instructions.

Both variants start from the task instruction plus LLM paraphrases of it and evaluate each prompt on
one batch (the same generator budget as every other optimizer).

GA variant: each step draws two parents by roulette wheel on fitness, asks the LLM to cross them over
and mutate the result (the paper's two-step request, answer between <prompt> tags), evaluates the child,
and keeps the best `population` of parents and child (a steady-state form of the paper's per-generation
top-N selection, so a small budget still runs several steps). Fallback: a template crossover (first
sentence of one parent, the rest of the other).

DE variant (the paper's Algorithm 2): the population is visited in turn; for the current prompt p_i
(the "basic prompt") two distinct donors p_r1, p_r2 (both != p_i) are drawn uniformly and p_best is the
fittest prompt. The LLM realises the DE step v = p_best + F (p_r1 - p_r2) followed by crossover with p_i
in one request of four steps: 1. identify the parts in which the donors differ, 2. mutate those parts,
3. combine them with p_best (replacing parts of it), 4. cross the result over with p_i, answer between
<prompt> tags. The trial replaces p_i only if it is fitter (DE's greedy one-to-one selection).
Fallback: the same four steps on sentences (`template_de`).

Every fallback is recorded in the trace (`mutation_source: fallback`, `fallback_reason`).
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
    EvolutionRun,
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
DE_TEMPLATE = (
    "Please follow the instruction step-by-step to generate a better prompt.\n"
    "1. Identify the different parts between Prompt 1 and Prompt 2:\n"
    "Prompt 1: {r1}\nPrompt 2: {r2}\n"
    "2. Randomly mutate the different parts.\n"
    "3. Combine the different parts with Prompt 3, selectively replace it with the mutated parts from "
    "Step 2, and generate a new prompt.\n"
    "Prompt 3: {best}\n"
    "4. Cross over the prompt from Step 3 with the following basic prompt and generate a final prompt "
    "bracketed with <prompt> and </prompt>:\n"
    "Basic Prompt: {base}"
)
PARAPHRASE_TEMPLATE = "Generate a variation of the following instruction while keeping the semantic meaning.\nInput: {a}\nOutput:"


def template_crossover(a: str, b: str) -> str:
    """First sentence of `a`, the remaining sentences of `b` (the fallback when the LLM's reply is junk)."""
    sa = re.split(r"(?<=[.!?])\s+", a.strip())
    sb = re.split(r"(?<=[.!?])\s+", b.strip())
    return " ".join([sa[0]] + sb[1:]) if len(sb) > 1 else f"{sa[0]} {sb[0]}" if sa[0] != sb[0] else a


def sentences(text: str) -> list[str]:
    return [x for x in re.split(r"(?<=[.!?])\s+", text.strip()) if x]


def de_request(r1: str, r2: str, best: str, base: str) -> str:
    """The DE step as one LLM request: donors' difference, mutation, combination with the best,
    crossover with the basic prompt (Guo et al. 2023, the DE template's four steps)."""
    return DE_TEMPLATE.format(r1=r1, r2=r2, best=best, base=base)


def de_donors(n: int, i: int, rng: random.Random) -> tuple[int, int]:
    """Two distinct donor indices, both different from the target `i` (when the population allows)."""
    others = [j for j in range(n) if j != i] or [i]
    if len(others) == 1:
        return others[0], others[0]
    a, b = rng.sample(others, 2)
    return a, b


def template_de(r1: str, r2: str, best: str, base: str, rng: random.Random) -> str:
    """The DE step on sentences (fallback): the sentences in which the donors differ, one of them put
    in place of a sentence of the best prompt, then uniform crossover with the basic prompt."""
    s1, s2 = sentences(r1), sentences(r2)
    diff = [x for x in s1 if x not in s2] + [x for x in s2 if x not in s1]
    mutant = sentences(best) or [best]
    if diff:
        pick = rng.choice(diff)
        if pick not in mutant:
            mutant[rng.randrange(len(mutant))] = pick
    base_s = sentences(base) or [base]
    out = [
        (mutant[k] if k < len(mutant) else base_s[k])
        if (k >= len(base_s) or (k < len(mutant) and rng.random() < 0.5))
        else base_s[k]
        for k in range(max(len(mutant), len(base_s)))
    ]
    seen: list[str] = []
    for x in out:
        if x not in seen:
            seen.append(x)
    return " ".join(seen)


def de_select(pop: list[Unit], i: int, trial: Unit) -> bool:
    """DE's one-to-one greedy selection: the trial replaces p_i only if strictly fitter."""
    if trial.fitness > pop[i].fitness:
        pop[i] = trial
        return True
    return False


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
        variant: str = "ga",
        temperature: float = 0.7,
        max_tokens: int = 80,
        with_similarity: bool = True,
        with_perplexity: bool = False,
        validation_fraction: float = 0.25,
    ) -> None:
        if variant not in ("ga", "de"):
            raise ValueError(f"unknown EvoPrompt variant {variant!r} (ga or de)")
        self.variant = variant
        self.name = "evoprompt" if variant == "ga" else "evoprompt-de"
        self.population = population
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.evaluator = NaturalLanguageEvaluator(with_similarity, with_perplexity)
        self.validation_fraction = validation_fraction

    def optimize(
        self, generator: PromptGenerator, spec: TaskSpec, seed: int, ctx: RunContext, budget: Budget
    ) -> OptimizationResult:
        run = start_evolution(self.name, self, generator, spec, seed, ctx, budget)
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
        if self.variant == "de":
            return self._de(pop, iteration, run, ctx)
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

    def _de(self, pop: list[Unit], iteration: int, run: EvolutionRun, ctx: RunContext) -> OptimizationResult:
        view, meter, agent, rng = run.view, run.meter, run.agent, run.rng
        template, original, trace = run.template, run.original, run.trace
        target = 0
        while meter.remaining_evaluations > 0:
            i = target % len(pop)
            target += 1
            r1, r2 = de_donors(len(pop), i, rng)
            best = max(pop, key=lambda u: u.fitness)
            base = pop[i]
            reply = agent.ask(
                de_request(pop[r1].instruction, pop[r2].instruction, best.instruction, base.instruction)
            )
            instruction, why = read_instruction(reply, original)
            info: JSON = {
                "operator": "de",
                "agent_reply": reply,
                "target": i,
                "donors": [r1, r2],
                "best": best.instruction,
                "mutation_source": "agent",
            }
            if instruction is None:
                instruction = template_de(
                    pop[r1].instruction, pop[r2].instruction, best.instruction, base.instruction, rng
                )
                info.update(mutation_source="fallback", fallback_reason=why)
            trial = Unit(instruction, origin="de")
            fitness(trial, template, meter, view, self.evaluator, ctx)
            info["replaced_target"] = de_select(pop, i, trial)
            info["target_fitness"] = base.fitness
            trace.append(unit_event("evoprompt_unit", iteration, trial, meter, template, **info))
            iteration += 1
        best = max(pop, key=lambda u: u.fitness)
        trace.append({"event": "evoprompt_best", "instruction": best.instruction, "fitness": best.fitness})
        usage = Usage().add(meter.usage).add(agent.usage)
        return OptimizationResult(with_instruction(template, best.instruction), trace, usage, best.fitness)
