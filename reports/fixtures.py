"""Write run directories through the real RunStore from plain numbers: for tests, docs and demos.

Why here and not in tests/: the reports, `bench check` and the pytest plugin are all tested on run
directories, and users writing their own report plug-ins want the same builder. It uses the store's own
writers (`write_cell`, `write_manifest`), so a run built here is byte-compatible with one from the runner.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.store import CellKey, RunStore
from bench.types import Sample, Usage

# (system, task) -> metric -> one value per seed (None/NaN allowed)
CellValues = Mapping[tuple[str, str], Mapping[str, Sequence[float | None]]]


def write_run(
    run_dir: Path | str,
    values: CellValues,
    *,
    seeds: Sequence[int] | None = None,
    failed: Mapping[tuple[str, str, int], str] | None = None,
    samples: Mapping[tuple[str, str, int], Sequence[Mapping[str, Any]]] | None = None,
    traces: Mapping[tuple[str, str, int], Sequence[Mapping[str, Any]]] | None = None,
    manifest: Mapping[str, Any] | None = None,
    tables: list[dict[str, Any]] | None = None,
    usage: Mapping[tuple[str, str, int], Mapping[str, Any]] | None = None,
) -> Path:
    """Create RUN_DIR with one cell per (system, task, seed) holding the given metric values.

    `failed` maps (system, task, seed) to an error message; those cells get status "failed" and no
    metrics.json, exactly like a cell whose system crashed. `samples` rows are `{"text", "scored"}`.
    `usage` adds keys to a cell's usage.json (cache hits, roles).
    """
    store = RunStore(run_dir)
    failed = dict(failed or {})
    metric_names: list[str] = []
    systems: list[str] = []
    tasks: list[str] = []
    n_seeds = 0
    for (system, task), per_metric in values.items():
        if system not in systems:
            systems.append(system)
        if task not in tasks:
            tasks.append(task)
        for m, vs in per_metric.items():
            if m not in metric_names:
                metric_names.append(m)
            n_seeds = max(n_seeds, len(vs))
    seed_list = list(seeds) if seeds is not None else list(range(n_seeds))
    for (system, task), per_metric in values.items():
        for i, seed in enumerate(seed_list):
            key = CellKey(system, task, seed)
            err = failed.get((system, task, seed))
            record: dict[str, Any] = {
                "hash": f"fixture-{system}-{task}-{seed}",
                "status": "failed" if err else "ok",
                "error": err,
                "timings": {"generate_s": 1.0, "score_s": 0.1},
            }
            metrics = None
            if not err:
                metrics = {m: (vs[i] if i < len(vs) else None) for m, vs in per_metric.items()}
                metrics = {m: (float("nan") if v is None else float(v)) for m, v in metrics.items()}
            rows = (samples or {}).get((system, task, seed))
            sample_objs = (
                [Sample(index=j, text=str(r.get("text", ""))) for j, r in enumerate(rows)] if rows else None
            )
            scored = [dict(r.get("scored") or {}) for r in rows] if rows else None
            trace = list((traces or {}).get((system, task, seed)) or []) or None
            store.write_cell(
                key,
                record=record,
                samples=sample_objs,
                sample_rows=scored,
                trace=trace,
                usage={
                    **Usage(generator_calls=8, seconds=2.0).to_json(),
                    **dict((usage or {}).get((system, task, seed)) or {}),
                },
                metrics=metrics,
            )
    m: dict[str, Any] = {
        "run_id": Path(run_dir).name,
        "suite": {
            "name": "fixture",
            "systems": {s: {"type": "file"} for s in systems},
            "tasks": [{"name": t} for t in tasks],
            "seeds": seed_list,
            "samples": 8,
            "metrics": metric_names,
            "expect": [],
            "tables": tables,
        },
        "profile": "embedded",
        "roles": {},
        "cells": {},
        "git": {"commit": "0" * 40, "dirty": False},
        "created": "2026-01-01T00:00:00Z",
        "finished": "2026-01-01T00:01:00Z",
    }
    for k, v in (manifest or {}).items():
        if k == "suite":
            m["suite"].update(v)
        else:
            m[k] = v
    store.write_manifest(m)
    return Path(run_dir)
