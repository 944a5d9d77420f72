"""The per-split JSONSchemaBench table of a finished run: coverage, compliance and efficiency with bootstrap CIs.

Each cell is re-scored from its stored samples with the benchmark's metrics (metrics/jsonschemabench.py), so
the intervals are the same seeded bootstrap the run computed. A last row per engine pools every split: one
cell of all its samples, each answering its own schema. Run:

    BENCH_DATA_DIR=/work/shared/datasets python -m benchmarks.jsonschemabench.table RUN_DIR
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace

from bench.store import RunStore
from bench.tasks.loading import load_task
from bench.types import Sample, TaskSpec
from metrics.scoring import score_cell
from reports.fmt import fmt_num

METRICS = [
    "declared_coverage",
    "empirical_coverage",
    "compliance",
    "compile_seconds",
    "tpot_seconds",
    "tokens_per_s",
]
SPLIT_ORDER = [
    "Glaiveai2K", "Github_trivial", "Github_easy", "Snowplow", "Github_medium", "Kubernetes",
    "WashingtonPost", "Github_hard", "JsonSchemaStore", "Github_ultra",
]  # fmt: skip


def _with_ci(info: dict, name: str, value: float) -> str:
    ci = (info.get(name) or {}).get("ci95")
    if math.isnan(value):
        return "–"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.2f}"


def row(label: str, engine: str, samples: list[Sample], spec: TaskSpec) -> str:
    score = score_cell(samples, spec, METRICS)
    v, info = score.values, score.info.get("jsonschemabench", {})
    scored = len(samples) - int(info.get("harness_failures", 0))
    return (
        f"| {label} | {engine} | {scored}/{len(samples)} | {_with_ci(info, 'declared_coverage', v['declared_coverage'])} "
        f"| {_with_ci(info, 'empirical_coverage', v['empirical_coverage'])} "
        f"| {_with_ci(info, 'compliance', v['compliance'])} | {fmt_num(v['compile_seconds'], 4)} "
        f"| {fmt_num(v['tpot_seconds'], 3)} | {fmt_num(v['tokens_per_s'], 1)} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    args = ap.parse_args(argv)
    store = RunStore(args.run_dir)
    manifest = store.read_manifest()
    options = {t["name"]: t.get("options") or {} for t in manifest.get("suite", {}).get("tasks", [])}
    cells = [c for c in store.iter_cells() if c.status == "ok"]
    engines = list(dict.fromkeys(c.key.system for c in cells))
    print(
        "| split | engine | scored | declared cov. | empirical cov. | compliance | compile s | s/token | tokens/s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    pooled: dict[str, tuple[list[Sample], list]] = {e: ([], []) for e in engines}
    order = {f"jsonschemabench/{s}": i for i, s in enumerate(SPLIT_ORDER)}
    for c in sorted(cells, key=lambda c: (order.get(c.key.task, 99), engines.index(c.key.system))):
        spec = load_task(c.key.task, n_references=None, n_holdout=None, options=options.get(c.key.task, {}))
        samples = store.read_samples(c.key)
        print(row(c.key.task.split("/")[-1], c.key.system, samples, spec))
        out, items = pooled[c.key.system]
        for s in samples:
            items.append(spec.item_for(s.index))
            out.append(replace(s, index=len(out)))
    for e, (samples, items) in pooled.items():
        spec = TaskSpec("jsonschemabench/all", "", {}, (), (), items=tuple(items))
        print(row("**all splits**", e, samples, spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
