"""The Ray executor: every cell is one Ray task, on a local cluster or on the one RAY_ADDRESS names.

Why cells as tasks: cells are independent and idempotent (bench.cells), so a cluster runs them in any
order and the run store on a filesystem every node sees (docs/scaling.md) collects them exactly as the
local pool does; results do not depend on the executor. What Ray adds and this module handles:
- resources: a cell asks for what its models need (`resources_for`): one CPU by default, and the GPUs,
  CPUs or custom resources a model preset declares under `resources:` (systems/catalog.yaml). A cell
  whose request no node of the cluster can ever satisfy is failed at once with the reason, instead of
  waiting forever in Ray's queue;
- failures: a worker that dies (killed, out of memory, segfault) becomes a failed cell naming Ray's
  error; tasks are not retried (`max_retries=0`), since a retried cell would mean a model ran twice;
- the per-cell timeout: a cell past `timeout_s` is cancelled (`force=True` kills its worker) and failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

from bench.cells import CellJob, CellOutcome, execute_cell, record_failure
from bench.errors import BenchError

OnDone = Callable[[CellOutcome], None]
RESOURCE_KEYS = ("num_cpus", "num_gpus")


def resources_for(job: CellJob) -> dict[str, Any]:
    """The Ray resource request of one cell: the largest request of any model role the system's profile
    resolves (a preset's `resources: {num_gpus: 1}`, `num_cpus`, or custom names), at least one CPU."""
    want: dict[str, float] = {"num_cpus": 1.0, "num_gpus": 0.0}
    custom: dict[str, float] = {}
    for spec in (job.roles or {}).values():
        res = spec.get("resources") if isinstance(spec, dict) else None
        if not isinstance(res, dict):
            continue
        for key, value in res.items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise BenchError(f"model {spec.get('name')!r}: resources.{key} must be a number >= 0")
            if key in RESOURCE_KEYS:
                want[key] = max(want[key], float(value))
            else:
                custom[key] = max(custom.get(key, 0.0), float(value))
    out: dict[str, Any] = {k: v for k, v in want.items() if v or k == "num_cpus"}
    if custom:
        out["resources"] = custom
    return out


def _infeasible(request: dict[str, Any], nodes: list[dict[str, float]]) -> str | None:
    """Why no alive node could ever run this request (None when one could)."""
    names = {"num_cpus": "CPU", "num_gpus": "GPU"}
    needs = {names[k]: float(v) for k, v in request.items() if k in names and v}
    needs.update(request.get("resources") or {})
    for node in nodes:
        if all(float(node.get(name, 0.0)) >= amount for name, amount in needs.items()):
            return None
    wanted = ", ".join(f"{v:g} {k}" for k, v in needs.items())
    best = {k: max((float(n.get(k, 0.0)) for n in nodes), default=0.0) for k in needs}
    have = ", ".join(f"{v:g} {k}" for k, v in best.items())
    return f"needs {wanted} on one node; the largest node of the Ray cluster has {have}"


def _alive_nodes(ray: Any) -> list[dict[str, float]]:
    return [dict(n.get("Resources") or {}) for n in ray.nodes() if n.get("Alive")]


def _connect(workers: int) -> Any:
    try:
        import ray
    except ImportError as exc:
        raise BenchError("--executor ray needs the ray extra: pip install 'aod-bench[ray]'") from exc
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        # BENCH_RAY_NODE_IP pins the driver's node address (tests and single machines: 127.0.0.1), so a
        # local cluster is reached over loopback only
        node_ip = os.environ.get("BENCH_RAY_NODE_IP")
        extra = {"_node_ip_address": node_ip} if node_ip else {}
        if address:
            ray.init(address=address, log_to_driver=False, **extra)
        else:
            ray.init(num_cpus=workers or None, include_dashboard=False, log_to_driver=False, **extra)
    return ray


def run_ray(jobs: Iterable[CellJob], on_done: OnDone, workers: int) -> None:
    """Run every job as a Ray task; `ray.init()` joins RAY_ADDRESS when set, else starts a local cluster."""
    ray = _connect(workers)
    remote = ray.remote(max_retries=0)(execute_cell)
    nodes = _alive_nodes(ray)
    pending: dict[Any, tuple[CellJob, float]] = {}
    for job in jobs:
        request = resources_for(job)
        why = _infeasible(request, nodes)
        if why:
            on_done(record_failure(job, f"ray: cell not scheduled: {why}", 0.0))
            continue
        pending[remote.options(**request).remote(job)] = (job, time.monotonic())
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
        now = time.monotonic()
        for ref in done:
            job, started = pending.pop(ref)
            try:
                on_done(ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - the worker died or the task raised
                on_done(record_failure(job, f"ray task failed: {_ray_reason(exc)}", now - started))
        for ref, (job, started) in list(pending.items()):
            if job.timeout_s is not None and now - started > job.timeout_s:
                ray.cancel(ref, force=True)
                pending.pop(ref)
                on_done(record_failure(job, f"timeout after {job.timeout_s:g}s", now - started))


def _ray_reason(exc: BaseException) -> str:
    """Ray's error in one line: its type and first line (the full text repeats the stack)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:500]
