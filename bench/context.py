"""The runner's RunContext: builds backends from profile specs, shares them, and fronts them with the cache.

Backend objects are kept per process keyed by their resolved spec (and the task fingerprint for per-task
models such as the embedded diffusion LM), so every cell a worker runs reuses one loaded model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.cache import CachedBackend, CallCache
from bench.errors import BenchError
from bench.hashing import stable_hash
from bench.profiles import Profile
from bench.registry import BACKENDS
from bench.types import JSON, Embedder, LogProbScorer, TaskSpec

_BACKENDS: dict[str, Any] = {}
_LOCK = threading.Lock()


@dataclass
class BackendEnv:
    """What a backend's `from_spec` may use besides its spec."""

    cache_dir: Path
    task: TaskSpec | None = None
    seed: int = 0


def default_cache_dir() -> Path:
    import os

    return Path(os.environ.get("BENCH_CACHE_DIR", Path.home() / ".cache" / "aod-bench"))


def build_backend(spec: JSON, cache_dir: Path, task: TaskSpec | None = None) -> Any:
    """Create (or reuse) the backend object for a resolved model spec."""
    per_task = bool(spec.get("per_task"))
    if per_task and task is None:
        raise BenchError(f"model {spec.get('name')!r} is trained per task and needs a task")
    key = stable_hash({"spec": spec, "task": task.fingerprint + task.name if per_task and task else None})
    with _LOCK:
        if key in _BACKENDS:
            return _BACKENDS[key]
    cls = BACKENDS.get(str(spec.get("backend")))
    env = BackendEnv(cache_dir=cache_dir, task=task if per_task else None)
    if per_task and task is not None:  # per-task models may train here: never silent (bench/progress.py)
        from bench.progress import stage

        with stage(f"preparing {spec.get('name')} for {task.name}", unit="model"):
            backend = cls.from_spec(spec, env)
    else:
        backend = cls.from_spec(spec, env)
    with _LOCK:
        _BACKENDS.setdefault(key, backend)
        return _BACKENDS[key]


@dataclass
class BenchContext:
    """RunContext + MetricResources for one system (its profile already has the system's overrides)."""

    profile: Profile
    cache_dir: Path
    call_cache: CallCache | None = None
    _cached: dict[str, CachedBackend] = field(default_factory=dict, repr=False)
    roles_used: list[str] = field(default_factory=list)  # roles asked for, in order (reports show these)

    @property
    def profile_name(self) -> str:
        return self.profile.name

    def model_spec(self, role: str) -> JSON:
        if role not in self.roles_used:
            self.roles_used.append(role)
        return self.profile.spec(role)

    def backend(self, role: str, task: TaskSpec | None = None) -> CachedBackend:
        spec = self.model_spec(role)
        raw = build_backend(spec, self.cache_dir, task)
        key = stable_hash({"role": role, "backend": id(raw)})
        if key not in self._cached:
            self._cached[key] = CachedBackend(raw, self.call_cache)
        return self._cached[key]

    def embedder(self) -> Embedder:
        return build_backend(self.model_spec("embedder"), self.cache_dir)

    def scorer(self) -> LogProbScorer:
        return build_backend(self.model_spec("scorer"), self.cache_dir)

    def progress(self, name: str, total: int | None = None, unit: str = "step") -> Any:
        """A progress stage for long set-up work (bench/progress.py): `with ctx.progress(...) as st:`."""
        from bench.progress import stage

        return stage(name, total, unit)

    def cache_counts(self) -> tuple[int, int]:
        if self.call_cache is None:
            return (0, 0)
        return (self.call_cache.hits, self.call_cache.misses)
