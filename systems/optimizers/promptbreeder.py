"""PromptBreeder (Fernando et al., 2023): self-referential evolution of task-prompts and mutation-prompts.

A unit is a task-prompt (the instruction) plus a mutation-prompt. Initial task-prompts come from the
LLM given a mutation-prompt, a thinking style and the problem description (the task instruction); the
first unit keeps the task instruction itself, so the search starts from the plain generator. Binary
tournaments: two units are drawn, the fitter one's mutant replaces the other. The mutation operator is
drawn uniformly from the paper's classes (context shuffling of few-shot examples does not apply: the
generator draws its own examples):

- direct, zero-order: the problem description followed by "A list of 100 hints:"; the first hint is
  the new task-prompt;
- direct, first-order: the unit's mutation-prompt applied to its task-prompt
  ("<mutation-prompt> INSTRUCTION: <task-prompt> INSTRUCTION MUTANT:");
- estimation of distribution (EDA): a numbered list of the population's task-prompts, filtered so no
  two listed entries have embedding cosine above 0.95 and shown without fitness, continued by the LLM;
- EDA rank and index: the same filtered list sorted by *ascending* fitness, introduced by the
  mutation-prompt and the (deliberately misdirecting) heading that it is in descending order of score;
- lineage based: the chronological list of the unit's elite ancestors (ancestors that were the best of
  the population when they bred), under the heading "GENOTYPES FOUND IN ASCENDING ORDER OF QUALITY";
- zero-order hypermutation: a new mutation-prompt from the problem description and a random thinking
  style, then applied first-order to the task-prompt;
- first-order hypermutation: "Please summarize and improve the following instruction:" applied to the
  mutation-prompt, the result applied first-order to the task-prompt;
- Lamarckian ("working out" to task-prompt): a schema-valid record of the unit's batch shown as a
  friend's correct working out, and the LLM asked what the instruction was;
- prompt crossover: after mutation, with probability 0.1 the task-prompt is replaced by another unit's,
  drawn fitness-proportionately.

Each evaluation costs one batch of generator calls; the initial population and the tournaments together
spend exactly the budget. A reply the parser cannot use is replaced by a template mutation (thinking
style + instruction) and the trace says so. Thinking styles and mutation-prompts are short lists of
our own.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import Counter

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
OPERATORS = (
    "zero_order",
    "first_order",
    "eda",
    "eda_rank_index",
    "lineage",
    "zero_order_hyper",
    "first_order_hyper",
    "lamarckian",
)
HYPER_PROMPT = "Please summarize and improve the following instruction:"
LINEAGE_HEADING = "GENOTYPES FOUND IN ASCENDING ORDER OF QUALITY"
RANK_HEADING = "A List of Responses in descending order of score."
EDA_SIMILARITY = 0.95


# ------------------------------------------------------------------------------ operator prompts
def zero_order_request(problem: str) -> str:
    return f"{problem}\nA list of 100 hints:\n1."


def first_order_request(mutation_prompt: str, task_prompt: str) -> str:
    return f"{mutation_prompt}\nINSTRUCTION: {task_prompt}\nINSTRUCTION MUTANT:"


def init_request(mutation_prompt: str, thinking_style: str, problem: str) -> str:
    return f"{mutation_prompt} {thinking_style}\nINSTRUCTION: {problem}\nINSTRUCTION MUTANT:"


def numbered(items: list[str]) -> str:
    return "\n".join(f"{k}. {x}" for k, x in enumerate(items, 1)) + f"\n{len(items) + 1}."


def eda_request(listed: list[str]) -> str:
    """EDA mutation: the filtered population, no fitness, to be continued."""
    return "Continue this list of instructions with one new instruction.\n" + numbered(listed)


def rank_index_request(mutation_prompt: str, ascending: list[str]) -> str:
    """EDA rank and index: entries in ascending fitness order, introduced as descending (misdirection)."""
    return f"INSTRUCTION: {mutation_prompt}\n{RANK_HEADING}\n" + numbered(ascending)


def lineage_request(elites: list[str]) -> str:
    """Lineage mutation: the unit's elite ancestors, oldest first."""
    return f"{LINEAGE_HEADING}\n" + numbered(elites)


def zero_order_hyper_request(problem: str, thinking_style: str) -> str:
    return f"{problem} {thinking_style}\nWrite one instruction for how to improve such a prompt:"


def first_order_hyper_request(mutation_prompt: str) -> str:
    return f"{HYPER_PROMPT} {mutation_prompt}"


def lamarckian_request(record: JSON) -> str:
    return (
        "I gave a friend an instruction and some advice. Here are the correct examples of his workings out:\n"
        + json.dumps(record, ensure_ascii=False)[:400]
        + "\nThe instruction was:"
    )


# --------------------------------------------------------------------------------- EDA filtering
def _bag(text: str) -> Counter[str]:
    return Counter(re.findall(r"[a-z0-9]+", text.lower()))


def lexical_vectors(texts: list[str]) -> list[dict[str, float]]:
    """Unit-length bag-of-words vectors (the filter's stand-in when no embedder is available)."""
    out = []
    for t in texts:
        bag = _bag(t)
        norm = math.sqrt(sum(v * v for v in bag.values())) or 1.0
        out.append({k: v / norm for k, v in bag.items()})
    return out


def _cos(a: object, b: object) -> float:
    if isinstance(a, dict) and isinstance(b, dict):
        return sum(v * b.get(k, 0.0) for k, v in a.items())
    return float(sum(x * y for x, y in zip(a, b, strict=True)))  # type: ignore[call-overload]


def filter_similar(texts: list[str], vectors: list, threshold: float = EDA_SIMILARITY) -> list[int]:
    """Indices of `texts` to list: an entry is dropped when its cosine to an already listed entry
    exceeds `threshold` (PromptBreeder's EDA filter; vectors are unit length)."""
    kept: list[int] = []
    for i in range(len(texts)):
        if all(_cos(vectors[i], vectors[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


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

    # ------------------------------------------------------------------ helpers
    def _ask(self, agent: Agent, text: str, original: str) -> tuple[str | None, JSON]:
        reply = agent.ask(text)
        instruction, why = read_instruction(reply, original)
        return instruction, {
            "agent_reply": reply,
            **({"fallback_reason": why} if instruction is None else {}),
        }

    def _mutation_prompt(self, agent: Agent, request: str, old: str) -> tuple[str, JSON]:
        reply = agent.ask(request)
        new, _ = read_instruction(reply, old, max_ratio=2.0, min_chars=12)
        return new or old, {"mutation_prompt_reply": reply, "mutation_prompt_kept": new is None}

    @staticmethod
    def vectors(ctx: RunContext, texts: list[str]) -> tuple[list, str]:
        """Embeddings for the EDA filter: the profile's embedder (the paper used BERT), else bag of words."""
        try:
            return [list(map(float, v)) for v in ctx.embedder().encode(texts)], "embedder"  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - no embedder in this profile: the lexical stand-in
            return lexical_vectors(texts), "lexical"

    # ------------------------------------------------------------------ one mutation
    def mutate(
        self,
        op: str,
        winner: Unit,
        pop: list[Unit],
        agent: Agent,
        spec: TaskSpec,
        rng: random.Random,
        original: str,
        ctx: RunContext,
        record: JSON | None,
    ) -> tuple[str | None, str, JSON]:
        """(new task-prompt or None, the child's mutation-prompt, trace info) for operator `op`."""
        problem = spec.instruction
        mp = winner.mutation_prompt
        info: JSON = {}
        if op == "zero_order":
            instruction, more = self._ask(agent, zero_order_request(problem), original)
        elif op == "first_order":
            instruction, more = self._ask(agent, first_order_request(mp, winner.instruction), original)
        elif op in ("eda", "eda_rank_index"):
            members = sorted(pop, key=lambda u: u.fitness) if op == "eda_rank_index" else list(pop)
            if op == "eda":
                rng.shuffle(members)
            texts = [u.instruction for u in members]
            vecs, how = self.vectors(ctx, texts)
            listed = [texts[i] for i in filter_similar(texts, vecs)]
            info.update(listed=listed, filter=how)
            request = eda_request(listed) if op == "eda" else rank_index_request(mp, listed)
            instruction, more = self._ask(agent, request, original)
        elif op == "lineage":
            elites = winner.lineage + (
                [winner.instruction] if winner.instruction not in winner.lineage else []
            )
            info["lineage"] = elites
            instruction, more = self._ask(agent, lineage_request(elites), original)
        elif op in ("zero_order_hyper", "first_order_hyper"):
            request = (
                zero_order_hyper_request(problem, rng.choice(THINKING_STYLES))
                if op == "zero_order_hyper"
                else first_order_hyper_request(mp)
            )
            mp, hyper = self._mutation_prompt(agent, request, mp)
            info.update(hyper)
            instruction, more = self._ask(agent, first_order_request(mp, winner.instruction), original)
        elif op == "lamarckian":
            if record is None:
                instruction, more = None, {"fallback_reason": "no schema-valid record to learn from"}
            else:
                instruction, more = self._ask(agent, lamarckian_request(record), original)
        else:
            raise ValueError(f"unknown PromptBreeder operator {op!r}")
        info.update(more)
        return instruction, mp, info

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
            mutation_prompt = rng.choice(MUTATION_PROMPTS)
            if i == 0:
                instruction: str | None = original
            else:
                style = rng.choice(THINKING_STYLES)
                instruction, info = self._ask(agent, init_request(mutation_prompt, style, original), original)
                info["thinking_style"] = style
                if instruction is None:
                    instruction = f"{style} {original}"
                    info["mutation_source"] = "fallback"
                else:
                    info["mutation_source"] = "agent"
            unit = Unit(instruction, mutation_prompt=mutation_prompt, origin="initial" if i == 0 else "init")
            best_records[id(unit)] = self._good_record(
                fitness(unit, template, meter, view, self.evaluator, ctx)
            )
            pop.append(unit)
            trace.append(unit_event("promptbreeder_unit", i, unit, meter, template, **info))
        iteration = len(pop)
        while meter.remaining_evaluations > 0:
            a, b = rng.sample(range(len(pop)), 2) if len(pop) > 1 else (0, 0)
            win, lose = (a, b) if pop[a].fitness >= pop[b].fitness else (b, a)
            winner = pop[win]
            op = rng.choice(OPERATORS)
            instruction, mutation_prompt, more = self.mutate(
                op, winner, pop, agent, spec, rng, original, ctx, best_records.get(id(winner))
            )
            info = {"operator": op, **more}
            if instruction is None:
                instruction = f"{rng.choice(THINKING_STYLES)} {winner.instruction}"[
                    : int(1.5 * max(len(original), 40))
                ]
                info["mutation_source"] = "fallback"
                info.setdefault("fallback_reason", "reply had no instruction line")
            else:
                info["mutation_source"] = "agent"
            if len(pop) > 1 and rng.random() < self.crossover_rate:
                weights = [max(u.fitness, 1e-6) for u in pop]
                instruction = rng.choices(pop, weights=weights)[0].instruction
                info["crossover"] = True
            elite = winner is max(pop, key=lambda u: u.fitness)
            child = Unit(
                instruction,
                mutation_prompt=mutation_prompt,
                origin=op,
                lineage=winner.lineage + ([winner.instruction] if elite else []),
            )
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
        """The first schema-valid record of a batch (the Lamarckian operator's "working out")."""
        for row in getattr(ev, "rows", []):
            if row.get("record") is not None and not row.get("schema_errors"):
                return row["record"]
        return None
