"""PromptBreeder (Fernando et al., 2023): self-referential evolution of task-prompts and mutation-prompts.

A population of units (task-prompt = the instruction, plus a mutation-prompt) evolves by binary
tournaments: two units are drawn, the fitter one's mutant replaces the other. Mutation operators, drawn
uniformly (the paper's classes, at this scale):
- zero-order direct: a new task-prompt from the problem description and a thinking style,
- first-order direct: the mutation-prompt applied to the winner's task-prompt,
- hypermutation: first rewrite the mutation-prompt, then apply it (the mutation-prompt is inherited),
- Lamarckian: infer an instruction from a good output (a record the winner's batch produced),
- prompt crossover: after mutating, with probability 0.1 the task-prompt is replaced by another unit's
  (fitness-proportionate).
Each evaluation costs one batch of generator calls; the initial population and the tournaments together
spend exactly the budget. A reply the parser cannot use is replaced by a template mutation (thinking
style + instruction) and the trace says so.
"""

from __future__ import annotations

import json
import random

from bench.types import JSON, RunContext, TaskSpec, Usage
from systems.optimizers.base import (
    Agent,
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

THINKING_STYLES = (
    "Let's think step by step.",
    "Focus on what a real record of this kind looks like.",
    "Make the request more specific.",
    "Simplify the request to its essentials.",
    "Think about what could go wrong and prevent it.",
    "Ask for variety and realism.",
)
MUTATION_PROMPTS = (
    "Rephrase the instruction so that it is clearer.",
    "Make the instruction shorter and more direct.",
    "Improve the instruction so the answers are more varied.",
    "Change the instruction so the answers follow the format exactly.",
    "Add one helpful detail to the instruction.",
)


class PromptBreederOptimizer:
    name = "promptbreeder"

    def __init__(
        self,
        population: int = 4,
        temperature: float = 0.7,
        max_tokens: int = 64,
        crossover_rate: float = 0.1,
        with_similarity: bool = True,
        with_perplexity: bool = False,
        validation_fraction: float = 0.25,
    ) -> None:
        self.population = population
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.crossover_rate = crossover_rate
        self.evaluator = NaturalLanguageEvaluator(with_similarity, with_perplexity)
        self.validation_fraction = validation_fraction

    # ------------------------------------------------------------------ mutation operators
    def _ask(self, agent: Agent, text: str, original: str) -> tuple[str | None, JSON]:
        reply = agent.ask(text)
        instruction, why = read_instruction(reply, original)
        return instruction, {
            "agent_reply": reply,
            **({"fallback_reason": why} if instruction is None else {}),
        }

    def zero_order(self, agent: Agent, spec: TaskSpec, rng: random.Random) -> tuple[str | None, JSON]:
        style = rng.choice(THINKING_STYLES)
        text = f"{style} Write an instruction for this task.\nTask: {spec.instruction}\nInstruction:"
        return self._ask(agent, text, spec.instruction)

    def first_order(self, agent: Agent, unit: Unit, original: str) -> tuple[str | None, JSON]:
        text = f"{unit.mutation_prompt}\nINSTRUCTION: {unit.instruction}\nINSTRUCTION MUTANT:"
        return self._ask(agent, text, original)

    def hypermutate(self, agent: Agent, unit: Unit, rng: random.Random, original: str) -> tuple[str, JSON]:
        style = rng.choice(THINKING_STYLES)
        reply = agent.ask(
            f"{style} Improve this way of changing an instruction:\n{unit.mutation_prompt}\nImproved:"
        )
        improved, _ = read_instruction(reply, unit.mutation_prompt, max_ratio=2.0, min_chars=12)
        return improved or unit.mutation_prompt, {
            "mutation_prompt_reply": reply,
            "mutation_prompt_kept": improved is None,
        }

    def lamarckian(self, agent: Agent, record: JSON | None, original: str) -> tuple[str | None, JSON]:
        if record is None:
            return None, {"fallback_reason": "no parsed record to learn from"}
        text = (
            "Here is a correct output:\n"
            + json.dumps(record, ensure_ascii=False)[:400]
            + "\nWrite the instruction that was given to produce outputs like this.\nInstruction:"
        )
        return self._ask(agent, text, original)

    # ------------------------------------------------------------------ the loop
    def optimize(
        self, generator: PromptGenerator, spec: TaskSpec, seed: int, ctx: RunContext, budget: Budget
    ) -> OptimizationResult:
        run = start_evolution("promptbreeder", self, generator, spec, seed, ctx, budget)
        view, meter, agent, rng = run.view, run.meter, run.agent, run.rng
        template, original, n_init, trace = run.template, run.original, run.n_init, run.trace
        pop: list[Unit] = []
        best_records: dict[int, JSON | None] = {}
        for i in range(n_init):
            info: JSON = {}
            if i == 0:
                instruction = original
            else:
                instruction, info = self.zero_order(agent, spec, rng)
                if instruction is None:
                    instruction = f"{rng.choice(THINKING_STYLES)} {original}"
                    info["mutation_source"] = "fallback"
            unit = Unit(
                instruction,
                mutation_prompt=rng.choice(MUTATION_PROMPTS),
                origin="initial" if i == 0 else "zero_order",
            )
            best_records[id(unit)] = self._good_record(
                fitness(unit, template, meter, view, self.evaluator, ctx)
            )
            pop.append(unit)
            trace.append(unit_event("promptbreeder_unit", len(trace) - 1, unit, meter, template, **info))
        iteration = len(pop)
        while meter.remaining_evaluations > 0:
            a, b = rng.sample(range(len(pop)), 2) if len(pop) > 1 else (0, 0)
            win, lose = (a, b) if pop[a].fitness >= pop[b].fitness else (b, a)
            winner = pop[win]
            op = rng.choice(("zero_order", "first_order", "hypermutation", "lamarckian"))
            mutation_prompt = winner.mutation_prompt
            info = {"operator": op}
            if op == "zero_order":
                instruction, more = self.zero_order(agent, spec, rng)
            elif op == "first_order":
                instruction, more = self.first_order(agent, winner, original)
            elif op == "hypermutation":
                mutation_prompt, hyper = self.hypermutate(agent, winner, rng, original)
                info.update(hyper)
                instruction, more = self.first_order(
                    agent, Unit(winner.instruction, mutation_prompt=mutation_prompt), original
                )
            else:
                instruction, more = self.lamarckian(agent, best_records.get(id(winner)), original)
            info.update(more)
            if instruction is None:
                instruction = f"{rng.choice(THINKING_STYLES)} {winner.instruction}"[
                    : int(1.5 * max(len(original), 40))
                ]
                info["mutation_source"] = "fallback"
            else:
                info["mutation_source"] = "agent"
            if len(pop) > 1 and rng.random() < self.crossover_rate:
                weights = [max(u.fitness, 1e-6) for u in pop]
                instruction = rng.choices(pop, weights=weights)[0].instruction
                info["crossover"] = True
            child = Unit(instruction, mutation_prompt=mutation_prompt, origin=op)
            best_records[id(child)] = self._good_record(
                fitness(child, template, meter, view, self.evaluator, ctx)
            )
            info.update(replaced=lose if len(pop) > 1 else None, winner_fitness=winner.fitness)
            if len(pop) > 1:
                pop[lose] = child
            elif child.fitness > winner.fitness:
                pop[0] = child
            trace.append(unit_event("promptbreeder_unit", iteration, child, meter, template, **info))
            iteration += 1
        best = max(pop, key=lambda u: u.fitness)
        trace.append(
            {"event": "promptbreeder_best", "instruction": best.instruction, "fitness": best.fitness}
        )
        usage = Usage().add(meter.usage).add(agent.usage)
        return OptimizationResult(with_instruction(template, best.instruction), trace, usage, best.fitness)

    @staticmethod
    def _good_record(ev: object) -> JSON | None:
        """The first schema-valid record of a batch (Lamarckian operator's "working out")."""
        for row in getattr(ev, "rows", []):
            if row.get("record") is not None and not row.get("schema_errors"):
                return row["record"]
        return None
