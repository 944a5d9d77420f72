"""Agents of Diffusion: a prompt-optimizer agent and a judge cluster steering a frozen generator.

One iteration (the paper's outer loop, on the best prompt so far):
1. the policy samples an edit kind (systems.optimizers.policy),
2. the optimizer agent (LLM) reads the prompt, the judge cluster's critique of its last batch and a
   short history, and writes an edit of that kind; the edit operator parses and bounds it, and falls
   back to a template edit (recorded in the trace) when the reply is junk,
3. the generator samples a batch with the edited prompt (common random numbers across iterations),
4. the judge cluster assesses the batch: the LLM judge answers the rubric and schema questions, the
   natural-language evaluator turns metrics into sentences, the scorer makes the reward and subrewards,
5. the policy takes a clipped REINFORCE step on the edit's improvement; the better prompt is kept.

Feedback modes: `verbal` (the paper's AoD: the agent sees only sentences), `scalar` (ablation: the agent
sees only the reward number). `static` (ablation, no RL) returns the agent's first proposal unevaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from bench.types import JSON, RunContext, Sample, TaskSpec, Usage
from systems.optimizers.base import (
    Agent,
    Budget,
    MeteredGenerator,
    OptimizationResult,
    PromptGenerator,
    derived_rng,
    evaluation_view,
    role_temperature,
    template_text,
)
from systems.optimizers.edits import (
    EDIT_KINDS,
    EditBounds,
    PromptEdit,
    applicable_kinds,
    apply_edit,
    edit_from_reply,
    hint_fields,
    template_edit,
)
from systems.optimizers.evaluator import Evaluation, NaturalLanguageEvaluator
from systems.optimizers.judge import Judge, Verdict, judge_sentences, schema_questions, summarize
from systems.optimizers.policy import EditPolicy
from systems.optimizers.reward import reward, subrewards
from systems.skeleton_prompt import DiffusionPrompt

OPTIMIZER_SYSTEM = (
    "You improve prompts for a data generator. Reply with exactly one line in the requested form."
)


@dataclass(frozen=True)
class AoDConfig:
    """Knobs of the loop (the System's params fill these)."""

    feedback: Literal["verbal", "scalar"] = "verbal"
    static: bool = False
    judge_limit: int | None = None  # samples per batch the judge reads (None = all)
    schema_questions: bool = True
    with_similarity: bool = True
    with_perplexity: bool = True
    validation_fraction: float = 0.25
    optimizer_temperature: float = 0.7
    optimizer_max_tokens: int = 48
    judge_temperature: float = 0.2
    judge_max_tokens: int = 6
    policy_lr: float = 0.5
    policy_clip: float = 0.2
    policy_epochs: int = 4
    bounds: EditBounds = field(default_factory=EditBounds)


@dataclass
class Assessment:
    """The judge cluster's view of one prompt's batch."""

    prompt: DiffusionPrompt
    evaluation: Evaluation
    verdicts: list[Verdict]
    subrewards: dict[str, float]
    reward: float
    sentences: list[str]
    questions: list[str]


class AoDOptimizer:
    """The AoD loop as a `PromptOptimizer`."""

    name = "aod"

    def __init__(self, config: AoDConfig | None = None) -> None:
        self.config = config or AoDConfig()

    # ------------------------------------------------------------------ the judge cluster
    def questions(self, spec: TaskSpec) -> list[str]:
        return list(spec.rubric) + (schema_questions(spec) if self.config.schema_questions else [])

    def assess(
        self,
        prompt: DiffusionPrompt,
        samples: list[Sample],
        view: TaskSpec,
        judge: Judge,
        evaluator: NaturalLanguageEvaluator,
        ctx: RunContext,
        previous: Assessment | None,
    ) -> Assessment:
        evaluation = evaluator.evaluate(samples, view, ctx, previous.evaluation.values if previous else None)
        verdicts = judge.judge(samples, self.config.judge_limit)
        judged = verdicts or []
        yes = sum(v.yes_share for v in judged) / len(judged) if judged else None
        parts = subrewards(evaluation.values, yes)
        sentences = evaluation.sentences + judge_sentences(judge.questions, verdicts)
        return Assessment(prompt, evaluation, verdicts, parts, reward(parts), sentences, judge.questions)

    # ------------------------------------------------------------------ the optimizer agent
    def request(
        self, kind: str, spec: TaskSpec, best: Assessment, history: list[str], index: int, original: str
    ) -> str:
        name = spec.name.split("/")[-1].replace("_", " ")
        lines = [
            f"You improve a prompt that makes a small model write {name} records as JSON.",
            "Current prompt:",
            template_text(best.prompt),
            "",
        ]
        if self.config.feedback == "scalar":
            lines.append(f"Score of its last outputs: {best.reward:.3f} (0 = worst, 1 = best).")
        else:
            lines.append("Feedback on its last outputs:")
            lines += [f"- {s}" for s in best.sentences]
        if history:
            lines += ["", "Earlier edits:"] + [f"- {h}" for h in history[-3:]]
        lines.append("")
        if kind == "add_note":
            lines.append("Write ONE short new line for the prompt that fixes the biggest problem.")
            lines.append("Answer in the form: NOTE: <line>")
        elif kind == "replace_note":
            lines.append(f'Rewrite this line of the prompt so it works better: "{best.prompt.notes[index]}"')
            lines.append("Answer in the form: NOTE: <line>")
        elif kind == "set_hint":
            fields = ", ".join(sorted(hint_fields(spec))[:16])
            lines.append(f"Choose ONE field and a value every record should use. Fields: {fields}.")
            lines.append("Answer in the form: HINT: <field> = <value>")
        else:
            limit = int(self.config.bounds.max_ratio * max(len(original), 40))
            lines.append(
                f"Rewrite the instruction (the first line) so the model does better, in under {limit} characters."
            )
            lines.append("Answer in the form: INSTRUCTION: <text>")
        return "\n".join(lines)

    def propose(
        self,
        kind: str,
        spec: TaskSpec,
        best: Assessment,
        history: list[str],
        agent: Agent,
        rng,  # noqa: ANN001 - random.Random
        original: str,
    ) -> tuple[PromptEdit | None, JSON]:
        """An edit of `kind` and how it was obtained (agent / fallback / rule), for the trace."""
        prompt = best.prompt
        bounds = self.config.bounds
        info: JSON = {"edit_kind": kind}
        misses = [q for q, share in summarize(self.questions(spec), best.verdicts).items() if share < 1.0]
        schema_problem = next((s for s in best.sentences if s.startswith("Most common schema problem")), None)
        if kind == "remove_hint":
            info["edit_source"] = "rule"
            return template_edit(kind, prompt, spec, rng, misses, schema_problem), info
        index = rng.randrange(len(prompt.notes)) if kind == "replace_note" and prompt.notes else -1
        reply = agent.ask(self.request(kind, spec, best, history, index, original), system=OPTIMIZER_SYSTEM)
        edit, more = edit_from_reply(
            kind, reply, spec, prompt, index, rng, misses, schema_problem, bounds, original
        )
        info.update(more)
        return edit, info

    # ------------------------------------------------------------------ the loop
    def optimize(
        self, generator: PromptGenerator, spec: TaskSpec, seed: int, ctx: RunContext, budget: Budget
    ) -> OptimizationResult:
        cfg = self.config
        view = evaluation_view(spec, cfg.validation_fraction)
        meter = MeteredGenerator(generator, budget, spec, seed, ctx)
        agent = Agent(
            ctx,
            "optimizer",
            seed,
            role_temperature(ctx, "optimizer", cfg.optimizer_temperature),
            cfg.optimizer_max_tokens,
        )
        judge_agent = Agent(
            ctx, "judge", seed, role_temperature(ctx, "judge", cfg.judge_temperature), cfg.judge_max_tokens
        )
        judge = Judge.for_task(judge_agent, self.questions(spec), spec)
        evaluator = NaturalLanguageEvaluator(cfg.with_similarity, cfg.with_perplexity)
        policy = EditPolicy(EDIT_KINDS, lr=cfg.policy_lr, clip=cfg.policy_clip, epochs=cfg.policy_epochs)
        rng = derived_rng(seed, "aod-policy")
        trace: list[JSON] = [
            {
                "event": "aod_start",
                "budget": budget.generator_calls,
                "batch_size": budget.batch_size,
                "feedback": cfg.feedback,
                "static": cfg.static,
                "questions": judge.questions,
                "validation_records": len(view.holdout),
            }
        ]
        prompt = generator.initial_prompt(spec)
        original = prompt.instruction
        best = self.assess(prompt, meter.evaluate(prompt), view, judge, evaluator, ctx, None)
        trace.append(self._event(0, best, best, meter, {"edit_source": "initial"}, None, True))
        history: list[str] = []
        if cfg.static:
            kind, _ = policy.sample(rng, applicable_kinds(best.prompt, cfg.bounds))
            edit, info = self.propose(kind, spec, best, history, agent, rng, original)
            final = apply_edit(best.prompt, edit) if edit else best.prompt
            trace.append(
                {
                    "event": "aod_static_proposal",
                    "edit": edit.to_json() if edit else None,
                    "prompt": template_text(final),
                    **info,
                }
            )
            return self._result(final, trace, meter, agent, judge_agent, best.reward)
        for iteration in range(1, meter.remaining_evaluations + 1):
            allowed = applicable_kinds(best.prompt, cfg.bounds)
            kind, p_old = policy.sample(rng, allowed)
            edit, info = self.propose(kind, spec, best, history, agent, rng, original)
            child = apply_edit(best.prompt, edit) if edit else best.prompt
            assessed = self.assess(child, meter.evaluate(child), view, judge, evaluator, ctx, best)
            update = policy.update(kind, assessed.reward - best.reward, p_old, allowed)
            accepted = assessed.reward > best.reward
            history.append(
                f"{edit.describe() if edit else 'no edit'}: {'kept' if accepted else 'discarded'}"
                + (f" (score {assessed.reward:.3f})" if cfg.feedback == "scalar" else "")
            )
            trace.append(self._event(iteration, assessed, best, meter, info, edit, accepted, update))
            if accepted:
                best = assessed
        return self._result(best.prompt, trace, meter, agent, judge_agent, best.reward)

    @staticmethod
    def _event(
        iteration: int,
        a: Assessment,
        parent: Assessment,
        meter: MeteredGenerator,
        info: JSON,
        edit: PromptEdit | None,
        accepted: bool,
        update: JSON | None = None,
    ) -> JSON:
        return {
            "event": "aod_iteration",
            "iteration": iteration,
            "reward": a.reward,
            "parent_reward": parent.reward,
            "accepted": accepted,
            "subrewards": a.subrewards,
            "metrics": {k: (None if math.isnan(v) else v) for k, v in a.evaluation.values.items()},
            "prompt": template_text(a.prompt),
            "edit": edit.to_json() if edit else None,
            **info,
            "judge": summarize(a.questions, a.verdicts) if a.verdicts else {},
            "judge_answers": [v.answers for v in a.verdicts],
            "sentences": a.sentences,
            "policy": update,
            "generator_calls": meter.spent,
        }

    @staticmethod
    def _result(
        prompt: DiffusionPrompt,
        trace: list[JSON],
        meter: MeteredGenerator,
        agent: Agent,
        judge: Agent,
        best: float,
    ) -> OptimizationResult:
        usage = Usage().add(meter.usage).add(agent.usage).add(judge.usage)
        return OptimizationResult(prompt, trace, usage, best)
