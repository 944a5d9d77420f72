"""`ar`: direct autoregressive generation, one record per call (the paper's static AR baselines).

Prompt = task instruction + JSON Schema + k few-shot references drawn per sample from the run seed.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from pydantic import ConfigDict, Field

from bench.types import (
    Completion,
    GenerationRequest,
    GenerationResult,
    RunContext,
    Sample,
    SampleStatus,
    SamplingParams,
    TaskSpec,
    Usage,
)
from systems.agent_loop import AgentLoopParams, Messages, is_multi_turn, run_agent_loop
from systems.gen_limits import RETRY_FACTOR, task_max_tokens
from systems.item_grammar import item_meta
from systems.params import validate_params
from systems.prompting import PromptParts, choose_examples, sample_rng


class ARParams(AgentLoopParams):
    """Decoding and prompting settings of the `ar` system (and the agent loop's, on multi-turn tasks)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float = Field(0.7, ge=0.0, description="sampling temperature (0 = greedy)")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    top_k: int = Field(0, ge=0, description="top-k sampling (0 = off)")
    num_beams: int = Field(1, ge=1, description="beam width (backends that support beam search)")
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="maximum new tokens per record (None: from the task's references, "
        "systems/gen_limits.py; a sample gets twice that default: at once where the backend stops at the "
        "record, else as one retry of a cut-off sample)",
    )
    repeat_penalty: float = Field(1.0, gt=0.0, description="llama.cpp repetition penalty")
    stop_at_record: bool = Field(
        True,
        description="end generation at the first complete record (backends that can stop mid-generation: "
        "llama_cpp, hf); false generates to the model's own stop or max_tokens",
    )
    k_shots: int = Field(3, ge=0, description="few-shot references shown per call")
    char_budget: int = Field(2400, ge=0, description="max characters of few-shot examples in a prompt")
    system_prompt: str | None = Field(None, description="optional system message")
    batch_size: int = Field(8, ge=1, description="requests sent to the backend at once")


SAMPLING_KNOBS = ("temperature", "top_p", "top_k", "max_tokens", "num_beams", "repeat_penalty")


class ARSystem:
    role = "generator"
    grammar = False

    def __init__(self, params: dict | None = None):
        self.params: ARParams = validate_params(ARParams, params, "ar")

    def sampling(self, spec: TaskSpec, preset: dict | None = None) -> SamplingParams:
        """Decoding settings: the model preset's paper settings (`sampling:` in the catalog) apply
        unless the suite set the same knob explicitly in the system's params."""
        p = self.params
        merged = {k: getattr(p, k) for k in SAMPLING_KNOBS}
        for k, v in (preset or {}).items():
            if k in SAMPLING_KNOBS and k not in p.model_fields_set:
                merged[k] = v
        if merged.get("max_tokens") is None:
            merged["max_tokens"] = task_max_tokens(spec)
        return SamplingParams(
            **merged,
            json_schema=spec.schema if self.grammar else None,
            stop_at_record=p.stop_at_record and not self.grammar,
        )

    def limit_is_default(self, preset: dict | None = None) -> bool:
        """True when max_tokens comes from the task (neither the suite nor the preset set it)."""
        return self.params.max_tokens is None and (preset or {}).get("max_tokens") is None

    def build_requests(
        self, spec: TaskSpec, n: int, seed: int, preset: dict | None = None
    ) -> tuple[list[GenerationRequest], list[list[int]]]:
        params = self.sampling(spec, preset) if not spec.items else None
        requests, shots = [], []
        for i in range(n):
            rng = sample_rng(seed, i, "few-shot")
            examples, idx = choose_examples(
                spec.references, rng, self.params.k_shots, self.params.char_budget
            )
            item = spec.for_sample(i)  # a per-item task: this sample's own schema and instruction
            prompt = PromptParts(item.instruction, item.schema, examples).render()
            params = params if not spec.items else self.sampling(item, preset)
            requests.append(GenerationRequest.chat(prompt, params, seed, i, system=self.params.system_prompt))
            shots.append(idx)
        return requests, shots

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        if is_multi_turn(spec):  # BFCL multi-turn: one episode of the agent loop per sample
            policy = ChatPolicy(self, ctx.backend(self.role), spec, ctx.model_spec(self.role).get("sampling"))
            return run_agent_loop(spec, n, seed, policy, self.params.loop_limits(), type(self).__name__)
        backend = ctx.backend(self.role)
        requests, shots = self.build_requests(spec, n, seed, ctx.model_spec(self.role).get("sampling"))
        usage = Usage()
        samples: list[Sample] = []
        t0 = time.perf_counter()
        bs = self.params.batch_size
        preset = ctx.model_spec(self.role).get("sampling")
        retry = self.limit_is_default(preset) and not self.grammar
        # A backend that stops at the record generates what the retry would, at once: a completed record
        # ends its generation either way, and a run-on sample draws the same tokens (same seed and index)
        # up to twice the limit, without paying for the first attempt (docs/systems-ar.md).
        direct = retry and self.params.stop_at_record and getattr(backend, "stops_at_record", False) is True
        if direct:
            requests = [
                replace(r, params=replace(r.params, max_tokens=r.params.max_tokens * RETRY_FACTOR))
                for r in requests
            ]
            retry = False
        retried = 0
        for start in range(0, n, bs):
            batch = requests[start : start + bs]
            completions = backend.generate(batch)
            for comp in completions:
                usage.add_call(comp.tokens_in, comp.tokens_out, comp.cached, cost_usd=comp.cost_usd)
            limits = [
                {"max_tokens": r.params.max_tokens, "source": "task" if retry or direct else "set"}
                | ({"policy": "twice the task limit, stopped at the record"} if direct else {})
                for r in batch
            ]
            if retry:  # a cut-off at our own default limit is never charged: once more at twice the limit
                cut = [j for j, c in enumerate(completions) if _cut_before_a_record(c)]
                again = [
                    replace(
                        batch[j],
                        params=replace(batch[j].params, max_tokens=batch[j].params.max_tokens * RETRY_FACTOR),
                    )
                    for j in cut
                ]
                for j, req, comp in zip(cut, again, backend.generate(again) if again else [], strict=True):
                    usage.add_call(comp.tokens_in, comp.tokens_out, comp.cached, cost_usd=comp.cost_usd)
                    completions[j] = comp
                    limits[j]["retried_at"] = req.params.max_tokens
                retried += len(cut)
            for req, comp, limit in zip(batch, completions, limits, strict=True):
                i = req.sample_index
                samples.append(
                    Sample(
                        index=i,
                        text=comp.text,
                        finish_reason=comp.finish_reason,
                        error=comp.error,
                        status=SampleStatus.BACKEND_ERROR if comp.error else None,
                        meta={
                            "shots": shots[i],
                            "cached": comp.cached,
                            "limit": limit,
                            **item_meta(spec, i, comp),
                        },
                    )
                )
        usage.seconds = time.perf_counter() - t0
        trace = [
            {
                "event": "generate",
                "model": backend.identity(),
                "n": n,
                "seed": seed,
                "max_tokens": requests[0].params.max_tokens if requests else None,
                "max_tokens_source": "task" if retry or direct else "set",
                "limit_policy": "direct" if direct else ("retry" if retry else "set"),
                "retried_at_twice_the_limit": retried,
            }
        ]
        return GenerationResult(samples=samples, trace=trace, usage=usage)


def _cut_before_a_record(comp: Completion) -> bool:
    """Stopped by the token limit before any complete JSON object: what the retry is for. Models often
    finish a record and then ramble on until the limit; that record is already whole (and extracted)."""
    if comp.error or comp.finish_reason != "length":
        return False
    from metrics.extract import extract_record

    return extract_record(comp.text, comp.finish_reason).record is None


class ChatPolicy:
    """The agent loop's policy for a chat backend: the conversation as chat turns, one reply per round.

    Decoding settings are the system's own for one step: the task is the item with its step call schema
    and, as references, the steps of the task's reference episodes (so the default token limit fits a
    step, and `ar-grammar` compiles the step schema into its grammar)."""

    def __init__(self, system: ARSystem, backend: Any, spec: TaskSpec, preset: dict | None):
        self.system, self.backend, self.preset = system, backend, preset
        self.steps = tuple(step for ep in spec.references for turn in ep.get("turns", []) for step in turn)
        self._params: dict[str, SamplingParams] = {}

    def sampling(self, item: TaskSpec) -> SamplingParams:
        key = str(item.meta.get("item_id"))
        if key not in self._params:
            step = replace(item, schema=item.meta["call_schema"], references=self.steps or item.references)
            self._params[key] = self.system.sampling(step, self.preset)
        return self._params[key]

    def reply(
        self, item: TaskSpec, messages: Messages, seed: int, sample_index: int, round_index: int
    ) -> Completion:
        request = GenerationRequest(messages, self.sampling(item), seed, sample_index)
        return self.backend.generate([request])[0]
