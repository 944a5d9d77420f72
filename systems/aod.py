"""Prompt-optimization systems: `aod` and its ablations (`aod-static`, `aod-scalar`, `aod-norl`),
`promptbreeder`, `evoprompt` (GA) and `evoprompt-de` (differential evolution).

Each wraps one `PromptOptimizer` (systems/optimizers) around a frozen generator (`llada` by default, the
profile's `dlm` role; `ar` for autoregressive generators): optimize the prompt under a generator-call
budget that is the same for every optimizer, then generate the cell's n samples with the best prompt
and the run seed (so an unedited prompt reproduces the plain generator's samples exactly). The returned
trace is the optimizer's trace plus one `final` event; usage adds optimization and final generation.

AoD's judge also reads the final samples (when `judge_final`), leaving its verdicts in
`Sample.meta["judge"]` so `tsr_judge` is defined for AoD cells.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bench.types import GenerationResult, RunContext, TaskSpec, Usage
from systems.optimizers.acceptance import AOD_MIN_GAIN, AOD_SECOND_ALPHA
from systems.optimizers.base import (
    Agent,
    Budget,
    OptimizationResult,
    PromptGenerator,
    PromptOptimizer,
    add_generator_usage,
    make_generator,
    role_temperature,
    steer_params,
    template_text,
)
from systems.params import validate_params


class OptimizerParams(BaseModel):
    """Settings every prompt-optimization system shares."""

    model_config = ConfigDict(extra="forbid")

    generator: Literal["llada", "ar"] = Field(
        "llada", description="frozen generator to steer (llada: the dlm role)"
    )
    generator_params: dict[str, Any] = Field(
        default_factory=dict, description="params of that generator system"
    )
    budget: int = Field(32, ge=1, description="generator calls spent optimizing (same for every optimizer)")
    batch_size: int = Field(4, ge=1, description="samples per prompt evaluation")
    validation_fraction: float = Field(
        0.25, gt=0, lt=1, description="share of references used as the similarity target"
    )
    with_similarity: bool = Field(True, description="evaluator computes similarity (needs the embedder)")
    optimizer_temperature: float = Field(
        0.7, ge=0, description="optimizer agent temperature unless its preset sets one"
    )


class AoDParams(OptimizerParams):
    """Settings of `aod` and its ablations."""

    feedback: Literal["verbal", "scalar"] = Field("verbal", description="what the optimizer agent sees")
    static: bool = Field(False, description="no RL: keep the agent's first proposal unevaluated")
    judge_limit: int | None = Field(None, ge=1, description="samples per batch the judge reads (None = all)")
    judge_final: bool = Field(True, description="judge the final samples (sets Sample.meta['judge'])")
    schema_questions: bool = Field(True, description="judge also asks schema-conformance questions")
    with_perplexity: bool = Field(True, description="evaluator computes perplexity (needs the scorer)")
    optimizer_max_tokens: int = Field(48, ge=8, description="longest optimizer reply")
    judge_temperature: float = Field(
        0.2, ge=0, description="judge temperature unless its preset sets one (paper: 0.2)"
    )
    policy_lr: float = Field(0.5, gt=0, description="policy step size")
    policy_clip: float = Field(0.2, gt=0, lt=1, description="PPO clip range epsilon")
    policy_epochs: int = Field(4, ge=1, description="gradient steps per update")
    policy_frozen: bool = Field(
        False, description="policy over edit kinds never updated: uniform (aod-norl), or policy_prior if set"
    )
    policy_reward: Literal["paired", "realized"] = Field(
        "paired",
        description="what the edit policy learns from: the edit's paired reward difference D, kept or not "
        "(paired), or the improvement the round made to the incumbent, D if kept else 0 (realized)",
    )
    policy_prior: dict[str, float] | None = Field(
        None,
        description="starting probabilities of the edit kinds, learned across other cells of the task "
        "(`python -m benchmarks.aod.policy_prior`); with policy_frozen the policy stays there",
    )
    constrained: bool = Field(True, description="optimizer replies decoded under a JSON grammar")
    acceptance: Literal["swap", "swap-conservative", "greater"] = Field(
        "swap",
        description="keep an edit: randomized paired swap test on fresh samples (level exactly alpha), "
        "its plain p-value (level at most alpha), or plain 'reward is higher'",
    )
    alpha: float = Field(0.1, gt=0, lt=1, description="swap test level: rate of keeping a do-nothing edit")
    min_gain: float = Field(
        AOD_MIN_GAIN,
        ge=0,
        description="least paired reward gain an accepted edit must show (null-calibrated)",
    )
    second_alpha: float = Field(
        AOD_SECOND_ALPHA,
        ge=0,
        lt=1,
        description="the part of alpha spent on a second look: a candidate the first look nearly kept is "
        "evaluated again with the incumbent on a second fresh batch and the pooled pairs are tested at "
        "this level, the first look at alpha minus it (0: one look, the rule before 2026-12-05's last "
        "change; acceptance.AOD_SECOND_ALPHA)",
    )
    edit_mode: Literal["agent", "noop-note", "noop-resample"] = Field(
        "agent", description="who writes edits (noop-*: do-nothing edits, to measure false acceptance)"
    )
    max_hints: int = Field(
        5,
        ge=1,
        le=12,
        description="most hint lines (fixed, pooled and joint) a prompt may carry; at most what the "
        "generator follows (the embedded DLM follows 5 since mdlm-10; 3 before 2026-12-05)",
    )
    max_joint: int = Field(
        1, ge=0, le=4, description="most joint pools (`vary_together` edits) a prompt may carry"
    )
    joint_union: bool = Field(
        True,
        description="`vary_together` may also draw the union of the failed checks' fields as one pool "
        "(within max_hints): one edit for a lever that otherwise takes two (off before 2026-12-05)",
    )
    joint_new_rows: bool = Field(
        True,
        description="a joint pool's rows are passing reference rows with their clock fields shifted by "
        "whole hours (the same journey at another hour; every row re-checked, none a reference's): the "
        "pool fixes the checks without copying reference rows (`new_rows.consistent_rows`); off: the "
        "references' rows, as before 2026-12-05",
    )
    agent_values: bool = Field(
        True,
        description="a `vary_hint` pool on a free field of words (dish names, questions: values the data "
        "cannot make) takes the optimizer agent's new values; off: the references' own values, as "
        "before 2026-12-05",
    )

    @field_validator("policy_prior")
    @classmethod
    def _prior_names_every_kind(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        from systems.optimizers.edits import EDIT_KINDS
        from systems.optimizers.policy import check_prior

        if v is not None:
            check_prior(v, EDIT_KINDS)
        return v

    @model_validator(mode="after")
    def _second_look_within_alpha(self) -> AoDParams:
        if self.second_alpha >= self.alpha:
            raise ValueError(
                f"second_alpha ({self.second_alpha}) must be below alpha ({self.alpha}): the two looks "
                "share alpha (0 turns the second look off)"
            )
        return self


class EvolutionParams(OptimizerParams):
    """Settings of `promptbreeder` and `evoprompt`."""

    population: int = Field(4, ge=1, description="population size")
    with_perplexity: bool = Field(False, description="evaluator computes perplexity (not in their fitness)")


class PromptOptimizationSystem(ABC):
    """Optimize, then generate the cell with the best prompt."""

    name = "prompt-optimization"
    params_model: type[OptimizerParams] = OptimizerParams

    def __init__(self, params: dict | None = None) -> None:
        self.params = validate_params(self.params_model, params, self.name)
        self.generator: PromptGenerator = make_generator(self.params.generator, self.params.generator_params)

    def budget(self) -> Budget:
        return Budget(self.params.budget, self.params.batch_size)

    @property
    def roles(self) -> tuple[str, ...]:
        """The profile roles this system may call: its generator's, the agents', the embedder (diversity
        and PromptBreeder's EDA). Preflight checks only these, so a model it never loads (DiffLM's, say)
        cannot block it."""
        inner = self.generator.system  # type: ignore[attr-defined]
        own = getattr(inner, "role", None) or getattr(inner.params, "role", "generator")
        return (str(own), "optimizer", "judge", "embedder")

    @abstractmethod
    def optimizer(self) -> PromptOptimizer:
        """The optimizer this system runs (each concrete system names one)."""

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        t0 = time.perf_counter()
        opt: OptimizationResult = self.optimizer().optimize(self.generator, spec, seed, ctx, self.budget())
        final = self.generator.generate(spec, opt.prompt, n, seed, ctx)
        usage = Usage().add(opt.usage)
        add_generator_usage(usage, final.usage, n)
        extra = self.after_final(final, spec, seed, ctx)
        usage.add(extra)
        usage.seconds = time.perf_counter() - t0
        trace = list(opt.trace)
        trace.append(
            {
                "event": "final",
                "system": self.name,
                "generator": self.generator.name,
                "prompt": template_text(opt.prompt),
                "prompt_params": steer_params(opt.prompt),
                "best_reward": opt.best_reward,
                "n": n,
                "optimization_generator_calls": opt.usage.generator_calls,
                "judged": bool(extra.agent_calls) or any("judge" in s.meta for s in final.samples),
            }
        )
        return GenerationResult(samples=final.samples, trace=trace, usage=usage)

    def after_final(self, final: GenerationResult, spec: TaskSpec, seed: int, ctx: RunContext) -> Usage:
        """Hook for work on the final samples (AoD's judge); returns its usage."""
        return Usage()


class AoDSystem(PromptOptimizationSystem):
    """`aod`: Agents of Diffusion with verbal feedback (the paper's system)."""

    name = "aod"
    params_model = AoDParams
    defaults: dict[str, Any] = {}

    def __init__(self, params: dict | None = None) -> None:
        super().__init__({**self.defaults, **(params or {})})

    def optimizer(self) -> PromptOptimizer:
        from systems.optimizers.aod import AoDConfig, AoDOptimizer
        from systems.optimizers.edits import EditBounds

        p = self.params
        return AoDOptimizer(
            AoDConfig(
                feedback=p.feedback,
                static=p.static,
                judge_limit=p.judge_limit,
                schema_questions=p.schema_questions,
                with_similarity=p.with_similarity,
                with_perplexity=p.with_perplexity,
                validation_fraction=p.validation_fraction,
                optimizer_temperature=p.optimizer_temperature,
                optimizer_max_tokens=p.optimizer_max_tokens,
                judge_temperature=p.judge_temperature,
                policy_lr=p.policy_lr,
                policy_clip=p.policy_clip,
                policy_epochs=p.policy_epochs,
                policy_frozen=p.policy_frozen,
                policy_reward=p.policy_reward,
                policy_prior=tuple(p.policy_prior.items()) if p.policy_prior else None,
                constrained=p.constrained,
                acceptance=p.acceptance,
                alpha=p.alpha,
                min_gain=p.min_gain,
                second_alpha=p.second_alpha,
                edit_mode=p.edit_mode,
                bounds=replace(
                    EditBounds(),
                    max_hints=p.max_hints,
                    max_joint=p.max_joint,
                    joint_union=p.joint_union,
                    joint_new_rows=p.joint_new_rows,
                    agent_values=p.agent_values,
                ),
            )
        )

    def after_final(self, final: GenerationResult, spec: TaskSpec, seed: int, ctx: RunContext) -> Usage:
        if not self.params.judge_final:
            return Usage()
        from systems.optimizers.judge import Judge

        p = self.params
        agent = Agent(ctx, "judge", seed, role_temperature(ctx, "judge", p.judge_temperature), 6)
        judge = Judge.for_task(agent, self.optimizer().questions(spec), spec)  # type: ignore[attr-defined]
        for sample, verdict in zip(final.samples, judge.judge(final.samples), strict=True):
            sample.meta["judge"] = verdict.verdicts
            sample.meta["judge_unanswered"] = sum(a is None for a in verdict.answers)
            sample.meta["judge_sources"] = verdict.sources  # "code" / "llm" per question
        return agent.usage


class AoDStaticSystem(AoDSystem):
    """`aod-static`: no search. One evaluation of the initial prompt gives the agent its feedback; the
    agent's first proposal becomes the fixed prompt, unevaluated (no selection, no RL, budget unused)."""

    name = "aod-static"
    defaults = {"static": True}


class AoDScalarSystem(AoDSystem):
    """`aod-scalar`: the optimizer agent sees the scalar reward instead of verbal feedback."""

    name = "aod-scalar"
    defaults = {"feedback": "scalar"}


class AoDNoRLSystem(AoDSystem):
    """`aod-norl`: the same loop, budget and acceptance test, with a frozen uniform policy over edit
    kinds (isolates what the policy's learning adds)."""

    name = "aod-norl"
    defaults = {"policy_frozen": True}


class PromptBreederSystem(PromptOptimizationSystem):
    """`promptbreeder`: PromptBreeder steering the same frozen generator with the same budget."""

    name = "promptbreeder"
    params_model = EvolutionParams

    def optimizer(self) -> PromptOptimizer:
        from systems.optimizers.promptbreeder import PromptBreederOptimizer

        p = self.params
        return PromptBreederOptimizer(
            population=p.population,
            temperature=p.optimizer_temperature,
            with_similarity=p.with_similarity,
            with_perplexity=p.with_perplexity,
            validation_fraction=p.validation_fraction,
        )


class EvoPromptSystem(PromptOptimizationSystem):
    """`evoprompt`: EvoPrompt (GA) steering the same frozen generator with the same budget."""

    name = "evoprompt"
    params_model = EvolutionParams
    variant = "ga"

    def optimizer(self) -> PromptOptimizer:
        from systems.optimizers.evoprompt import EvoPromptOptimizer

        p = self.params
        return EvoPromptOptimizer(
            variant=self.variant,
            population=p.population,
            temperature=p.optimizer_temperature,
            with_similarity=p.with_similarity,
            with_perplexity=p.with_perplexity,
            validation_fraction=p.validation_fraction,
        )


class EvoPromptDESystem(EvoPromptSystem):
    """`evoprompt-de`: EvoPrompt's differential-evolution variant, same generator and budget."""

    name = "evoprompt-de"
    variant = "de"
