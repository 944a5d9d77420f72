"""`diffusion-lm`: Diffusion-LM (Li et al. 2022) trained on each task's references, sampled unconditionally.

The model comes from the profile's `diffusion_lm` role (embedded and paper: the `diffusion_lm` backend,
trained per task at different scales; see docs/systems-diffusion.md). Diffusion-LM has no prompt: each
sample is one draw from the learned distribution over the references' serialised JSON, denoised with the
clamping trick over a respaced schedule.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.types import GenerationResult, RunContext, Sample, SampleStatus, TaskSpec, Usage
from systems.params import validate_params


class DiffusionLMSystemParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str = Field("diffusion_lm", description="profile role that serves the trained Diffusion-LM")
    steps: int | None = Field(None, ge=1, description="sampling steps (respaced from T; unset = backend's)")
    clamp: bool | None = Field(None, description="clamping trick (unset = backend default, on)")


class DiffusionLMSystem:
    name = "diffusion-lm"

    def __init__(self, params: dict | None = None) -> None:
        self.params = validate_params(DiffusionLMSystemParams, params, self.name)

    @property
    def role(self) -> str:
        return self.params.role

    def plan_calls(self, n_samples: int) -> dict[str, int]:
        """One draw per sample (for `--dry-run`)."""
        return {self.params.role: n_samples}

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        backend = ctx.backend(self.params.role, task=spec)  # type: ignore[call-arg]
        if not hasattr(backend, "sample_texts"):
            raise BenchError(f"the {self.params.role!r} backend is not a Diffusion-LM")
        usage = Usage()
        t0 = time.perf_counter()
        try:
            rows = backend.sample_texts(n, seed, steps=self.params.steps, clamp=self.params.clamp)
        except BenchError:
            raise
        except Exception as exc:  # a harness failure, never a model failure
            err = f"{type(exc).__name__}: {exc}"
            samples = [Sample(i, "", "error", err, SampleStatus.BACKEND_ERROR) for i in range(n)]
            return GenerationResult(samples, [{"event": "diffusion_lm_sample", "error": err}], usage)
        samples = []
        for i, (text, reason, tokens_out, nfe) in enumerate(rows):
            samples.append(Sample(i, text, reason, meta={"nfe": nfe}))
            usage.add_call(0, tokens_out, False, nfe)
        usage.seconds = time.perf_counter() - t0
        trace = [
            {
                "event": "diffusion_lm_sample",
                "steps": rows[0][3] if rows else 0,
                "clamp": backend.params.clamp if self.params.clamp is None else self.params.clamp,
                "train_seconds": backend.meta.get("train_seconds"),
                "loaded_from_cache": backend.loaded_from_cache,
                "n_train": backend.meta.get("n_train"),
                "n_dropped": backend.meta.get("n_dropped"),
                "final_loss": (backend.train_log or [{}])[-1].get("loss"),
            }
        ]
        return GenerationResult(samples=samples, trace=trace, usage=usage)
