"""Agents of Diffusion: a prompt-optimizer agent and a judge cluster steering a frozen generator.

One round (the paper's outer loop, on the incumbent prompt):
1. the incumbent is re-evaluated on a *fresh* batch (a new evaluation seed every round), and the judge
   cluster assesses it: the LLM judge answers the rubric and schema questions, the natural-language
   evaluator turns metrics into sentences, the scorer makes the reward and subrewards;
2. the policy samples an edit kind (systems.optimizers.policy; frozen uniform in `aod-norl`);
3. the optimizer agent (LLM) reads the prompt, that critique and a short history, and writes an edit
   of that kind, as JSON decoded under a grammar (systems.optimizers.edits.reply_schema); the edit
   operator bounds it and falls back to a template edit (recorded in the trace) when it is unusable.
   Two kinds are rules, not agent replies: `remove_hint`, and `vary_together`, which draws the fields
   a failing code check reads together from passing references, for the group that can turn the most
   of the batch's records into successes (edits.together_template: a small DLM cannot do arithmetic
   across fields; the references can supply consistent values; with `joint_union` the union of the
   failed checks' fields is one of the groups; with `joint_new_rows` the rows are those references'
   rows shifted by whole hours, so the records do not copy reference rows, `new_rows`);
4. the candidate prompt is evaluated on the same fresh seed and sample indices, and assessed;
5. the candidate replaces the incumbent only if a paired swap test says it is better beyond chance
   and the paired gain exceeds `min_gain` (systems.optimizers.acceptance: the randomized test keeps an
   exact null with probability alpha; the margin, AOD_MIN_GAIN, refuses a do-nothing note's small gains).
   A candidate the test nearly kept gets a second look: the incumbent and the candidate on a second
   fresh batch, all pairs tested together, alpha shared between the looks (AOD_SECOND_ALPHA);
6. the policy takes a clipped REINFORCE step on the paired reward difference.

A round costs two batches, four with a second look. A budget with an odd number of evaluations spends
the last one on a final fresh check of the incumbent, so every optimizer spends exactly the same
generator budget.

Feedback modes: `verbal` (the paper's AoD: the agent sees only sentences), `scalar` (ablation: the agent
sees only the reward number). `static` (ablation, no search) returns the agent's first proposal
unevaluated. `edit_mode` `noop-note` / `noop-resample` replace the agent by do-nothing edits, to measure
how often the acceptance rule keeps an edit that changes nothing (docs/systems-aod.md).
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Literal

from bench.types import JSON, RunContext, Sample, TaskSpec, Usage
from systems.optimizers.acceptance import (
    AOD_MIN_GAIN,
    AOD_SECOND_ALPHA,
    AOD_SECOND_LOOK_GATE,
    AcceptanceRule,
    SwapTest,
    paired_swap_test,
)
from systems.optimizers.base import (
    Agent,
    Budget,
    MeteredGenerator,
    OptimizationResult,
    PromptGenerator,
    derived_rng,
    derived_seed,
    evaluation_view,
    prompt_pools,
    role_temperature,
    template_text,
)
from systems.optimizers.edits import (
    EDIT_KINDS,
    EditBounds,
    PromptEdit,
    agent_writes_values,
    applicable_kinds,
    apply_edit,
    check_edit,
    edit_from_reply,
    hint_fields,
    reference_values,
    reply_format,
    reply_schema,
    template_edit,
    together_template,
    variable_fields,
)
from systems.optimizers.evaluator import Evaluation, NaturalLanguageEvaluator
from systems.optimizers.judge import Judge, Verdict, judge_sentences, schema_questions, summarize
from systems.optimizers.paired import PairedReward
from systems.optimizers.policy import EditPolicy
from systems.optimizers.reward import reward, subrewards
from systems.skeleton_prompt import DiffusionPrompt

OPTIMIZER_SYSTEM = (
    "You improve prompts for a data generator. Reply with exactly one line in the requested form."
)

#: Notes that ask for nothing: the `noop-note` edits (their effect on quality should be nil).
NULL_NOTES = (
    "This line is only a separator.",
    "Nothing else to add here.",
    "The notes end with this line.",
    "This sentence is just filler text.",
    "No further remarks for now.",
    "This is one more line of text.",
)


#: Backends that decode under a JSON-schema grammar (hf has none: its replies go unconstrained).
GRAMMAR_BACKENDS = ("llama_cpp", "openai")


def supports_grammar(ctx: RunContext, role: str) -> bool:
    """Whether the role's backend takes `json_schema` requests (else the line parser reads replies)."""
    try:
        return ctx.model_spec(role).get("backend") in GRAMMAR_BACKENDS  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a context without model specs: ask unconstrained
        return False


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
    policy_frozen: bool = False  # aod-norl: uniform over the applicable kinds, never updated
    policy_reward: Literal["paired", "realized"] = "paired"  # see `policy_reward`
    policy_prior: tuple[tuple[str, float], ...] | None = None  # starting edit-kind probabilities
    constrained: bool = True  # the optimizer's reply is decoded under reply_schema's grammar
    acceptance: Literal["swap", "swap-conservative", "greater"] = "swap"
    alpha: float = 0.1
    min_gain: float = AOD_MIN_GAIN
    second_alpha: float = AOD_SECOND_ALPHA  # a second look at a nearly kept candidate (0: one look)
    second_gate: float = AOD_SECOND_LOOK_GATE  # first-look p-value at most this earns the second look
    edit_mode: Literal["agent", "noop-note", "noop-resample"] = "agent"
    bounds: EditBounds = field(default_factory=EditBounds)


def policy_reward(kind: Literal["paired", "realized"], difference: float, accepted: bool) -> float:
    """The number the edit policy learns from after a round.

    `paired` is the candidate's paired reward difference D whether or not it was kept. `realized` is the
    step reward of the paper's episodic MDP, whose state is the incumbent prompt: R(s_t+1) - R(s_t), which
    is D when the edit was kept and 0 when it was discarded (the state did not change).

    Why both: under `paired`, most edits lower the reward (D < 0) and are discarded, so the baseline
    (an average of D) goes negative and an edit that changes nothing (D = 0) has a positive advantage. At
    30 rounds on multiwoz/train the learned policy then moved towards `rewrite_instruction`, whose edits
    often leave the DLM's records exactly unchanged (docs/systems-aod.md, "The RL ablation at 30
    rounds"): it learned to spend rounds doing nothing. Under `realized` a discarded edit is worth 0
    whatever it would have done, so only kinds whose edits are kept gain probability.
    """
    if kind == "realized":
        return difference if accepted else 0.0
    return difference


def failed_checks(row: JSON) -> set[str]:
    """The code checks one scored sample failed (its `check:<name>` reasons of `tsr`)."""
    from metrics.rubrics import failed_names

    return set(failed_names(row.get("tsr_failures") or []))


def check_failures(rows: list[JSON]) -> dict[str, int]:
    """Check name -> records of the batch that failed it."""
    out: dict[str, int] = {}
    for row in rows:
        for name in sorted(failed_checks(row)):
            out[name] = out.get(name, 0) + 1
    return out


def failing_of(a: Assessment) -> list[set[str]]:
    """Each record's failed code checks in an assessed batch."""
    return [failed_checks(row) for row in a.evaluation.rows]


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
    samples: list[Sample] = field(default_factory=list)


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
        return Assessment(
            prompt, evaluation, verdicts, parts, reward(parts), sentences, judge.questions, samples
        )

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
        structured = self.config.constrained
        if kind == "add_note":
            lines.append("Write ONE short new line for the prompt that fixes the biggest problem.")
            lines.append(reply_format(kind) if structured else "Answer in the form: NOTE: <line>")
        elif kind == "replace_note":
            lines.append(f'Rewrite this line of the prompt so it works better: "{best.prompt.notes[index]}"')
            lines.append(reply_format(kind) if structured else "Answer in the form: NOTE: <line>")
        elif kind == "set_hint":
            fields = ", ".join(sorted(hint_fields(spec))[:16])
            lines.append(f"Choose ONE field and a value every record should use. Fields: {fields}.")
            lines.append(reply_format(kind) if structured else "Answer in the form: HINT: <field> = <value>")
        elif kind == "vary_hint":
            pooled = prompt_pools(best.prompt)
            names = sorted(f for f in variable_fields(spec) if f not in pooled)[:16]
            lines.append(
                "Choose ONE field whose value should differ from record to record, using new values "
                f"that are not in the examples. Fields: {', '.join(names)}."
            )
            lines.append(reply_format(kind) if structured else "Answer in the form: FIELD: <field>")
            wordy = [f for f in names if agent_writes_values(spec, f, self.config.bounds)]
            for f in wordy[:2] if structured else []:
                examples = ", ".join(f'"{v[:40]}"' for v in reference_values(spec, f)[:3])
                lines.append(
                    f"For {f}, also list 2 to 6 new values of the same kind as {examples}, none of them: "
                    f'{{"field": "{f}", "values": ["<new value>", "<new value>"]}}'
                )
        else:
            limit = int(self.config.bounds.max_ratio * max(len(original), 40))
            lines.append(
                f"Rewrite the instruction (the first line) so the model does better, in under {limit} characters."
            )
            lines.append(reply_format(kind) if structured else "Answer in the form: INSTRUCTION: <text>")
        return "\n".join(lines)

    def propose(
        self,
        kind: str,
        spec: TaskSpec,
        best: Assessment,
        history: list[str],
        agent: Agent,
        rng: random.Random,
        original: str,
    ) -> tuple[PromptEdit | None, JSON]:
        """An edit of `kind` and how it was obtained (agent / fallback / rule / noop), for the trace."""
        prompt = best.prompt
        bounds = self.config.bounds
        info: JSON = {"edit_kind": kind}
        mode = self.config.edit_mode
        if mode != "agent":
            return self.null_edit(prompt, rng), {"edit_kind": kind, "edit_source": mode}
        misses = [q for q, share in summarize(self.questions(spec), best.verdicts).items() if share < 1.0]
        schema_problem = next((s for s in best.sentences if s.startswith("Most common schema problem")), None)
        if kind == "remove_hint":
            info["edit_source"] = "rule"
            return template_edit(kind, prompt, spec, rng, misses, schema_problem), info
        if kind == "vary_together":  # the judge cluster's code checks pick the target, the data the rows
            edit = together_template(prompt, spec, rng, failing_of(best), bounds)
            info.update(
                {
                    "edit_source": "rule",
                    "target_check": edit.text,
                    "check_failures": check_failures(best.evaluation.rows),
                }
            )
            reason = check_edit(edit, prompt, spec, bounds, original)
            if reason is not None:
                info.update({"edit_source": "none", "fallback_reason": reason})
                return None, info
            return edit, info
        index = rng.randrange(len(prompt.notes)) if kind == "replace_note" and prompt.notes else -1
        constrained = self.config.constrained and supports_grammar(agent.ctx, agent.role)
        schema = reply_schema(kind, spec, prompt, bounds, original) if constrained else None
        max_tokens = self.config.optimizer_max_tokens
        if schema is not None:
            from systems.backends.grammar import build_grammar, max_bytes

            max_tokens = max(max_tokens, min(int(max_bytes(build_grammar(schema))) + 2, 160))
        reply = agent.ask(
            self.request(kind, spec, best, history, index, original),
            system=OPTIMIZER_SYSTEM,
            max_tokens=max_tokens,
            json_schema=schema,
        )
        edit, more = edit_from_reply(
            kind, reply, spec, prompt, index, rng, misses, schema_problem, bounds, original
        )
        info.update(more)
        info["constrained"] = schema is not None
        return edit, info

    def null_edit(self, prompt: DiffusionPrompt, rng: random.Random) -> PromptEdit | None:
        """A do-nothing edit: a content-free note (`noop-note`) or none at all (`noop-resample`)."""
        if self.config.edit_mode == "noop-resample":
            return None
        pool = [n for n in NULL_NOTES if n not in prompt.notes]
        text = rng.choice(pool)
        if len(prompt.notes) >= self.config.bounds.max_notes:
            return PromptEdit("replace_note", text=text, index=rng.randrange(len(prompt.notes)))
        return PromptEdit("add_note", text=text)

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
        policy = EditPolicy(
            EDIT_KINDS,
            lr=cfg.policy_lr,
            clip=cfg.policy_clip,
            epochs=cfg.policy_epochs,
            prior=dict(cfg.policy_prior) if cfg.policy_prior else None,
        )
        rule = AcceptanceRule(cfg.acceptance, cfg.alpha, cfg.min_gain, cfg.second_alpha, cfg.second_gate)
        paired = PairedReward(view, ctx, cfg.with_similarity)
        rng = derived_rng(seed, "aod-policy")
        trace: list[JSON] = [
            {
                "event": "aod_start",
                "budget": budget.generator_calls,
                "batch_size": budget.batch_size,
                "feedback": cfg.feedback,
                "static": cfg.static,
                "policy_frozen": cfg.policy_frozen,
                "policy_reward": cfg.policy_reward,
                "policy_prior": dict(cfg.policy_prior) if cfg.policy_prior else None,
                "edit_mode": cfg.edit_mode,
                "acceptance": {
                    "test": cfg.acceptance,
                    "alpha": cfg.alpha,
                    "min_gain": cfg.min_gain,
                    "second_alpha": cfg.second_alpha,
                    "second_gate": rule.gate,
                },
                "bounds": asdict(cfg.bounds),
                "questions": judge.questions,
                "validation_records": len(view.holdout),
            }
        ]
        incumbent = generator.initial_prompt(spec)
        original = incumbent.instruction
        history: list[str] = []
        n_eval = 0

        def candidate_seed(eval_seed: int) -> int:
            """The candidate's seed on a look: the incumbent's (paired), or under `noop-resample` the same
            prompt on independent noise, the exact null of the test."""
            return derived_seed(eval_seed, "resample") if cfg.edit_mode == "noop-resample" else eval_seed

        def evaluate(prompt: DiffusionPrompt, eval_seed: int, previous: Assessment | None) -> Assessment:
            return self.assess(
                prompt, meter.evaluate(prompt, eval_seed), view, judge, evaluator, ctx, previous
            )

        if cfg.static:
            first = evaluate(incumbent, meter.round_seed(0), None)
            trace.append(self._event(0, 0, "incumbent", first, meter, {"edit_source": "initial"}))
            kind, _ = policy.sample(rng, applicable_kinds(first.prompt, cfg.bounds, spec, failing_of(first)))
            edit, info = self.propose(kind, spec, first, history, agent, rng, original)
            final = apply_edit(first.prompt, edit) if edit else first.prompt
            trace.append(
                {
                    "event": "aod_static_proposal",
                    "edit": edit.to_json() if edit else None,
                    "prompt": template_text(final),
                    **info,
                }
            )
            return self._result(final, trace, meter, agent, judge_agent, first.reward)
        best_reward = float("nan")
        round_index = 0
        while meter.remaining_evaluations >= 2:
            round_index += 1
            round_seed = meter.round_seed(round_index)
            current = evaluate(incumbent, round_seed, None)
            trace.append(
                self._event(
                    n_eval,
                    round_index,
                    "incumbent",
                    current,
                    meter,
                    {"edit_source": "initial" if round_index == 1 else "incumbent"},
                )
            )
            n_eval += 1
            allowed = applicable_kinds(current.prompt, cfg.bounds, spec, failing_of(current))
            # frozen (aod-norl): the starting policy throughout, uniform unless a prior is given
            kind, p_old = policy.sample(rng, allowed)
            edit, info = self.propose(kind, spec, current, history, agent, rng, original)
            child = apply_edit(current.prompt, edit) if edit else current.prompt
            assessed = evaluate(child, candidate_seed(round_seed), current)
            candidate_index = n_eval
            n_eval += 1
            test = self.paired_test(paired, [assessed], [current], round_seed)
            u = derived_rng(round_seed, "acceptance-u").random()
            accepted = rule.decide(test, test.observed, u)
            looks: JSON = {}
            if not accepted and rule.second_look(test, test.observed, u) and meter.remaining_evaluations >= 2:
                # the first look nearly kept it: the incumbent and the candidate on a second fresh
                # batch, and all pairs of both batches tested together (acceptance.AOD_SECOND_ALPHA)
                look_seed = derived_seed(round_seed, "second-look")
                again = evaluate(current.prompt, look_seed, None)
                trace.append(
                    self._event(
                        n_eval,
                        round_index,
                        "incumbent_second_look",
                        again,
                        meter,
                        {"edit_source": "incumbent"},
                    )
                )
                n_eval += 1
                again_child = evaluate(child, candidate_seed(look_seed), again)
                trace.append(
                    self._event(
                        n_eval,
                        round_index,
                        "candidate_second_look",
                        again_child,
                        meter,
                        {"edit_source": info.get("edit_source")},
                        edit,
                        None,
                        None,
                        again,
                    )
                )
                n_eval += 1
                looks = {
                    "first_look": {
                        "paired_difference": test.observed,
                        "p_value": test.p_value,
                        "p_randomized": test.randomized_p(u),
                    }
                }
                test = self.paired_test(paired, [assessed, again_child], [current, again], look_seed)
                u = derived_rng(look_seed, "acceptance-u").random()
                accepted = rule.decide_pooled(test, test.observed, u)
            if cfg.policy_frozen:
                update: JSON = {"kind": kind, "frozen": True, "probs": policy.probs(allowed)}
            else:
                update = policy.update(
                    kind, policy_reward(cfg.policy_reward, test.observed, accepted), p_old, allowed
                )
            history.append(
                f"{edit.describe() if edit else 'no edit'}: {'kept' if accepted else 'discarded'}"
                + (f" (score {assessed.reward:.3f})" if cfg.feedback == "scalar" else "")
            )
            info.update(
                {
                    "paired_difference": test.observed,
                    "p_value": test.p_value,
                    "p_randomized": test.randomized_p(u),
                    "swap_patterns": test.patterns,
                    "greater": test.observed > 0,
                    **looks,
                }
            )
            trace.append(
                self._event(
                    candidate_index,
                    round_index,
                    "candidate",
                    assessed,
                    meter,
                    info,
                    edit,
                    accepted,
                    update,
                    current,
                )
            )
            best_reward = current.reward
            if accepted:
                incumbent = child
                best_reward = assessed.reward
        if meter.remaining_evaluations == 1:  # an odd evaluation left: a last fresh look at the incumbent
            check = evaluate(incumbent, meter.round_seed(round_index + 1), None)
            trace.append(
                self._event(
                    n_eval, round_index + 1, "final_check", check, meter, {"edit_source": "incumbent"}
                )
            )
            best_reward = check.reward
        return self._result(incumbent, trace, meter, agent, judge_agent, best_reward)

    @staticmethod
    def paired_test(
        paired: PairedReward, candidate: list[Assessment], incumbent: list[Assessment], seed: int
    ) -> SwapTest:
        """The swap test over the pairs of one or more batch pairs (candidate[i] against incumbent[i],
        sample by sample; a second look pools both rounds' pairs into one batch per side)."""
        a = [m for c in candidate for m in paired.members(c.samples, c.verdicts)]
        b = [m for i in incumbent for m in paired.members(i.samples, i.verdicts)]
        return paired_swap_test(a, b, paired.difference, seed=seed)

    @staticmethod
    def _event(
        iteration: int,
        round_index: int,
        role: str,
        a: Assessment,
        meter: MeteredGenerator,
        info: JSON,
        edit: PromptEdit | None = None,
        accepted: bool | None = None,
        update: JSON | None = None,
        parent: Assessment | None = None,
    ) -> JSON:
        return {
            "event": "aod_iteration",
            "iteration": iteration,
            "round": round_index,
            "role": role,
            "reward": a.reward,
            "parent_reward": parent.reward if parent else None,
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
        trace.append(
            {
                "event": "aod_usage",
                "optimizer_calls": agent.usage.agent_calls,
                "judge_calls": judge.usage.agent_calls,
                "generator_calls": meter.spent,
            }
        )
        return OptimizationResult(prompt, trace, usage, best)
