"""Cells: one (system, task, seed) unit of work, its versioned hash, and how one is executed.

`execute_cell` is what a worker process runs: build the task, the system and the context, generate,
score, and write the cell into the run store (metrics.json last). It never raises for a model's or a
backend's failure: the cell is recorded as failed with its reason and the run goes on.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import __version__
from bench.hashing import stable_hash
from bench.store import CellKey, DiskFullError, RunStore
from bench.types import JSON, GenerationResult, TaskSpec

# Bump when the meaning of a cell hash changes (what goes into it, or how a cell is produced).
# 2: `ar` max_tokens defaults to the task-derived limit (systems/gen_limits.py).
# 3: the system's params with their defaults filled in enter the hash (`resolved_system_params`), and
#    the embedded DLM's training steps follow record length and reference count (2026-12-05).
CELL_HASH_VERSION = 3


def cell_hash(
    system: JSON,
    roles: JSON,
    task: JSON,
    fingerprint: str,
    seed: int,
    samples: int,
    resolved: JSON | None = None,
) -> str:
    """Identity of a cell's outputs. Transport knobs (workers, timeouts, executor, cache) stay out.
    `resolved`: the system's params with defaults filled in (`resolved_system_params`)."""
    return stable_hash(
        {
            "v": CELL_HASH_VERSION,
            "code": __version__,
            "system": system,
            "resolved": resolved,
            "roles": {r: _identity_of(spec) for r, spec in roles.items()},
            "task": task,
            "data": fingerprint,
            "seed": seed,
            "samples": samples,
        },
        32,
    )


def resolved_system_params(system: JSON) -> JSON | None:
    """The system's params with every default filled in, for the cell hash; None when the system has no
    params model or cannot be built here (its cells then fail with their own error, as before).

    Why: a suite that leaves a knob at its default reads the same when the default changes. Without
    this, `--resume` of a run made before AoD's `max_hints` went from 3 to 5 would keep the finished
    cells and add new ones under the new default: one row made by two different systems.
    """
    from pydantic import BaseModel

    from bench.registry import SYSTEMS

    try:
        params = SYSTEMS.get(system["type"])(dict(system.get("params") or {})).params
    except Exception:  # an unknown type or bad params: the cell reports it; the plan goes on
        return None
    if not isinstance(params, BaseModel):
        return None
    # a params model's HASH_OPT_IN fields enter only when set off their inert value (as the embedded
    # DLM's OPT_IN_KNOBS do in its cache key), so adding a knob does not re-run every finished cell
    inert = getattr(type(params), "HASH_OPT_IN", {})
    return {k: v for k, v in params.model_dump(mode="json").items() if not (k in inert and v == inert[k])}


#: Keys of a resolved model spec that say where a cell runs, not what it produces.
PLACEMENT_KEYS = ("resources",)


def _identity_of(spec: Any) -> Any:
    """A model spec without its placement keys: a GPU request must not change a cell's identity."""
    if isinstance(spec, dict):
        return {k: v for k, v in spec.items() if k not in PLACEMENT_KEYS}
    return spec


@dataclass
class CellJob:
    """Everything a worker needs to run one cell; plain data so it pickles across processes."""

    key: CellKey
    hash: str
    system: JSON  # {"type", "params"}
    roles: JSON  # role -> resolved model spec
    profile: str
    task: JSON  # TaskConfig dump
    samples: int
    metrics: list[str]
    run_dir: str
    cache_dir: str
    use_cache: bool = True
    data_dir: str | None = None
    timeout_s: float | None = None


@dataclass
class CellOutcome:
    key: CellKey
    status: str  # ok | failed | skipped | aborted (the store could not be written: the run stops)
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    n_samples: int = 0
    seconds: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0


# ------------------------------------------------------------------------------- per-process caches
_TASKS: dict[str, TaskSpec] = {}
_CACHES: dict[str, Any] = {}


def load_task_cached(task: JSON, data_dir: str | None) -> TaskSpec:
    from bench.tasks import load_task

    key = stable_hash({"task": task, "data_dir": data_dir})
    if key not in _TASKS:
        _TASKS[key] = load_task(
            task["name"],
            n_references=task.get("n_references"),
            n_holdout=task.get("n_holdout"),
            split_seed=task.get("split_seed", 0),
            data_dir=data_dir,
            options=task.get("options") or {},
        )
    return _TASKS[key]


def _call_cache(cache_dir: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from bench.cache import CallCache

    if cache_dir not in _CACHES:
        _CACHES[cache_dir] = CallCache(Path(cache_dir) / "calls.sqlite")
    return _CACHES[cache_dir]


def efficiency_metrics(result: GenerationResult, seconds: float) -> dict[str, float]:
    u = result.usage
    n = len(result.samples)
    return {
        "seconds": seconds,
        "records_per_s": (n / seconds) if seconds > 0 else math.nan,
        "generator_calls": float(u.generator_calls),
        "agent_calls": float(u.agent_calls),
        "judge_calls": float(u.judge_calls),
        "tokens_in": float(u.tokens_in),
        "tokens_out": float(u.tokens_out),
        "nfe": float(u.nfe),
        "cost_usd": float(u.cost_usd),
    }


def build_context(job: CellJob) -> Any:
    from bench.context import BenchContext
    from bench.profiles import Profile

    profile = Profile(job.profile, "", job.roles)
    return BenchContext(profile, Path(job.cache_dir), _call_cache(job.cache_dir, job.use_cache))


def execute_cell(job: CellJob) -> CellOutcome:
    """Run one cell to completion and persist it. Exceptions become a failed cell with a reason."""
    from bench.registry import SYSTEMS

    store = RunStore(job.run_dir)
    started = time.time()
    t0 = time.perf_counter()
    record: JSON = {"hash": job.hash, "status": "running", "started": started, "key": asdict(job.key)}
    ctx = None
    hits0 = misses0 = 0
    try:
        spec = load_task_cached(job.task, job.data_dir)
        system = SYSTEMS.get(job.system["type"])(job.system.get("params") or {})
        ctx = build_context(job)
        hits0, misses0 = ctx.cache_counts()
        result = system.generate(spec, job.samples, job.key.seed, ctx)
        gen_seconds = time.perf_counter() - t0
        generation_roles = list(ctx.roles_used)  # before scoring adds the embedder/scorer roles
        from metrics.scoring import score_cell

        score = score_cell(result.samples, spec, job.metrics, ctx)
        values = dict(score.values)
        values.update(efficiency_metrics(result, gen_seconds))
        hits, misses = ctx.cache_counts()
        usage = result.usage.to_json()
        usage.update(cache_hits=hits - hits0, cache_misses=misses - misses0, roles=generation_roles)
        record.update(
            status="ok",
            finished=time.time(),
            seconds=time.perf_counter() - t0,
            generation_seconds=gen_seconds,
            n_samples=len(result.samples),
            scoring=score.info,
        )
        store.write_cell(
            job.key,
            record=record,
            samples=result.samples,
            sample_rows=score.rows,
            trace=result.trace,
            usage=usage,
            metrics=values,
        )
        return CellOutcome(
            job.key,
            "ok",
            values,
            None,
            len(result.samples),
            record["seconds"],
            hits - hits0,
            misses - misses0,
        )
    except DiskFullError as exc:  # not the cell's fault: stop the run, leave the cell unfinished
        return CellOutcome(job.key, "aborted", {}, str(exc), 0, time.perf_counter() - t0)
    except Exception as exc:  # a failed cell is data, not a crash of the run
        reason = f"{type(exc).__name__}: {exc}"
        record.update(
            status="failed",
            error=reason,
            traceback=traceback.format_exc(limit=8),
            finished=time.time(),
            seconds=time.perf_counter() - t0,
        )
        try:
            store.write_cell(job.key, record=record)
        except OSError as write_exc:  # DiskFullError is a BenchError, not an OSError
            return CellOutcome(job.key, "aborted", {}, f"cannot write {store.cell_dir(job.key)}: {write_exc}")
        except DiskFullError as full:
            return CellOutcome(job.key, "aborted", {}, str(full), 0, record["seconds"])
        return CellOutcome(job.key, "failed", {}, reason, 0, record["seconds"])


def record_failure(job: CellJob, reason: str, seconds: float) -> CellOutcome:
    """Used by the executor when a worker timed out or died: the cell is marked failed on disk."""
    RunStore(job.run_dir).write_cell(
        job.key,
        record={
            "hash": job.hash,
            "status": "failed",
            "error": reason,
            "seconds": seconds,
            "finished": time.time(),
            "key": asdict(job.key),
        },
    )
    return CellOutcome(job.key, "failed", {}, reason, 0, seconds)
