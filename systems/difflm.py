"""`difflm`: DiffLM (Zhou et al. 2024): VAE latents + EDM latent diffusion + a frozen LM decoder.

The model comes from the profile's `difflm` role (embedded: SmolLM2-135M as the frozen decoder; paper:
Mistral-7B-Instruct). Sampling follows DiffLM's "check column" option: a sample is drawn again (a new
latent and new decoding noise) until its record parses, has the schema's keys and in-range categorical
values. Upstream loops without a bound; here at most `max_attempts` draws are made per sample, and every
draw counts as one generator call in `usage` and in the sample's `gen_attempts`, because a validity rate
is only fair next to the number of draws it took. A sample that never passes keeps its last draw and is
scored as what it is.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.types import GenerationResult, RunContext, Sample, SampleStatus, TaskSpec, Usage
from systems.backends.difflm.check import check_record
from systems.params import validate_params


class DiffLMSystemParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str = Field("difflm", description="profile role that serves the trained DiffLM")
    max_attempts: int = Field(4, ge=1, description="draws per sample at most (upstream: unbounded)")
    check: bool = Field(True, description="resample until the record passes the check (DiffLM's option)")
    temperature: float = Field(0.5, ge=0, description="decoding temperature of the frozen LM (paper: 0.5)")
    heun_steps: int | None = Field(None, ge=1, description="Heun steps (unset: 50, paper)")
    max_new_tokens: int | None = Field(None, ge=1, description="unset: from the references' lengths")


class DiffLMSystem:
    name = "difflm"

    def __init__(self, params: dict | None = None) -> None:
        self.params = validate_params(DiffLMSystemParams, params, self.name)

    @property
    def role(self) -> str:
        return self.params.role

    def plan_calls(self, n_samples: int) -> dict[str, int]:
        """The most draws a cell can make (for `--dry-run`): every sample may use all its attempts."""
        return {self.params.role: n_samples * (self.params.max_attempts if self.params.check else 1)}

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        p = self.params
        backend = ctx.backend(p.role, task=spec)  # type: ignore[call-arg]
        if not hasattr(backend, "draw"):
            raise BenchError(f"the {p.role!r} backend is not a DiffLM")
        usage = Usage()
        t0 = time.perf_counter()
        last: dict[int, tuple] = {}
        attempts = dict.fromkeys(range(n), 0)
        reasons: dict[str, int] = {}
        todo = list(range(n))
        rounds = p.max_attempts if p.check else 1
        try:
            for attempt in range(rounds):
                if not todo:
                    break
                recs, evals = backend.draw(
                    seed,
                    [(i, attempt) for i in todo],
                    temperature=p.temperature,
                    heun_steps=p.heun_steps,
                    max_new_tokens=p.max_new_tokens,
                )
                still = []
                for i, rec in zip(todo, recs, strict=True):
                    attempts[i] += 1
                    usage.add_call(backend.prompt_tokens, rec.tokens_out, False, evals)
                    problem = check_record(rec.text, spec.schema) if p.check else None
                    last[i] = (rec, problem, evals)
                    if problem is not None:
                        kind = problem.split(":")[0]
                        reasons[kind] = reasons.get(kind, 0) + 1
                        still.append(i)
                todo = still
        except BenchError:
            raise
        except Exception as exc:  # a harness failure, never a model failure
            err = f"{type(exc).__name__}: {exc}"
            samples = [Sample(i, "", "error", err, SampleStatus.BACKEND_ERROR) for i in range(n)]
            return GenerationResult(samples, [{"event": "difflm_sample", "error": err}], usage)
        samples = []
        for i in range(n):
            rec, problem, evals = last[i]
            meta = {"gen_attempts": attempts[i], "passed_check": problem is None, "nfe": evals}
            samples.append(Sample(i, rec.text, rec.finish_reason, meta=meta))
        usage.seconds = time.perf_counter() - t0
        trace = [
            {
                "event": "difflm_sample",
                "max_attempts": rounds,
                "attempts": sum(attempts.values()),
                "passed_check": sum(1 for i in range(n) if last[i][1] is None),
                "rejections": reasons,
                "train_seconds": backend.meta.get("train_seconds"),
                "loaded_from_cache": backend.loaded_from_cache,
            }
        ]
        return GenerationResult(samples=samples, trace=trace, usage=usage)
