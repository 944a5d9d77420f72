"""Benchmark: the harness's own cost per cell, by executor, and the share of a model cell spent outside the
model.

Run from the repository root (BENCH_DATA_DIR set; `pip install -e '.[ray]'` for the Ray rows):

    nice .venv/bin/python -m benchmarks.scale.bench_scale --cells 500 --out benchmarks/scale/results.json
    nice .venv/bin/python -m benchmarks.scale.bench_scale --model-run runs/quickstart-<stamp>

Overhead: a suite of `--cells` cells of the model-free `file` system (10 systems x demo/booking x
cells/10 seeds, 4 samples each, parse_rate/schema_valid/tsr), so a cell's time is the harness's: plan,
load the task, read four lines, score, write five files atomically, report. Each executor runs the same
suite into a fresh run directory: local with 1 worker process (the named baseline), local with 2, and
Ray on a local cluster it starts (2 CPUs). Reported: wall seconds, ms per cell, and each ratio to the
baseline, all from the same invocation.

Model share (`--model-run RUN_DIR`): for each finished cell of a run with a real model, 1 - (the
system's generation seconds, `usage.json` "seconds") / (the cell's total seconds, `cell.json`): the
share of the cell spent in set-up, prompting, scoring and writing, the number to drive toward zero.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def write_suite(root: Path, cells: int) -> Path:
    from bench.cells import load_task_cached

    spec = load_task_cached({"name": "demo/booking", "n_references": 8, "n_holdout": 8}, None)
    gens = root / "gens.jsonl"
    gens.write_text("".join(json.dumps({"record": r}) + "\n" for r in spec.holdout[:4]), encoding="utf-8")
    n_sys = 10
    seeds = max(1, cells // n_sys)
    systems = ", ".join(f"f{i}: {{type: file, params: {{path: '{gens}'}}}}" for i in range(n_sys))
    suite = root / "scale.yaml"
    suite.write_text(
        f"name: scale\nseeds: {seeds}\nsamples: 4\n"
        "tasks: [{name: demo/booking, n_references: 8, n_holdout: 8}]\n"
        f"systems: {{{systems}}}\nmetrics: [parse_rate, schema_valid, tsr]\n",
        encoding="utf-8",
    )
    return suite


def time_executor(suite: Path, out: Path, executor: str, workers: int) -> dict[str, Any]:
    from bench.runner import RunOptions, run_suite

    opts = RunOptions(out=str(out), executor=executor, workers=workers, progress=False, write_report=True)
    t0 = time.perf_counter()
    result = run_suite(suite, None, opts)
    wall = time.perf_counter() - t0
    n = len(result.outcomes)
    failed = sum(o.status == "failed" for o in result.outcomes)
    return {"executor": executor, "workers": workers, "cells": n, "failed": failed, "wall_s": wall}


def overhead(cells: int) -> dict[str, Any]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        suite = write_suite(root, cells)
        plan = [("local", 1), ("local", 2)]
        try:
            import ray  # noqa: F401

            plan.append(("ray", 2))
        except ImportError:
            pass
        for executor, workers in plan:
            rows.append(time_executor(suite, root / f"run-{executor}-{workers}", executor, workers))
    base = rows[0]["wall_s"]
    for r in rows:
        r["ms_per_cell"] = 1000 * r["wall_s"] / max(1, r["cells"])
        r["ratio_to_local_1"] = r["wall_s"] / base
    return {"baseline": "local executor, 1 worker process", "rows": rows}


def model_share(run_dir: Path) -> dict[str, Any]:
    from bench.store import RunStore

    shares = []
    for cell in RunStore(run_dir).iter_cells():
        total = float(cell.record.get("seconds") or 0.0)
        gen = float(cell.usage.get("seconds") or 0.0)
        if cell.status == "ok" and total > 0:
            shares.append(max(0.0, 1.0 - gen / total))
    if not shares:
        return {"run": str(run_dir), "cells": 0}
    return {
        "run": str(run_dir),
        "cells": len(shares),
        "share_outside_model_median": statistics.median(shares),
        "share_outside_model_max": max(shares),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cells", type=int, default=500)
    ap.add_argument("--model-run", type=Path, help="a finished run with a real model (e.g. the quickstart)")
    ap.add_argument("--no-overhead", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {}
    if not args.no_overhead:
        result["overhead"] = overhead(args.cells)
    if args.model_run:
        result["model_share"] = model_share(args.model_run)
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return result


if __name__ == "__main__":
    main()
