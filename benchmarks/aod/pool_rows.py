"""How much do a joint pool's rows matter? The kept pools of an AoD run, replayed by plain `llada`.

    python -m benchmarks.aod.pool_rows suite RUN_DIR --task multiwoz/train --base suites/aod_rl_prior_transfer.yaml \
        --out /tmp/pool_rows.yaml
    bench run /tmp/pool_rows.yaml --out runs/pool-rows
    python -m benchmarks.aod.pool_rows analyze runs/pool-rows

Why: `vary_together` draws a pool's rows (a seeded sample of the passing references' tuples) per round,
so a pool kept in another round is another set of journeys (docs/systems-aod.md, "A policy learned
across cells"). Whether the rows are a lever worth an edit of their own is a question of variance:
`suite` collects the distinct kept pools of the run's AoD cells (one per cell, the fields of the first
such pool) and writes a suite with one `llada` system per row set (`rows-0`, `rows-1`, ...) on the
base suite's DLM preset and seeds, so every row set is scored on the same seeds. `analyze` reads that
run: per row set the mean metric over seeds, and Friedman's test of "all row sets are alike" with the
seeds as blocks (Friedman 1937; a rank test, since `tsr` over 8 records takes nine values).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from benchmarks.aod.comparison import candidate_events, finished_cells


def kept_pools(run: Path, task: str) -> list[dict[str, Any]]:
    """Distinct kept joint pools of `run`'s cells on `task`, in (system, seed) order, each with where it
    came from. Only pools over the first kept pool's fields, so every row set is the same kind of lever."""
    pools: list[dict[str, Any]] = []
    seen: set[str] = set()
    fields: list[str] | None = None
    for (system, cell_task, seed), cell in sorted(finished_cells(run).items()):
        if cell_task != task:
            continue
        for ev in candidate_events(cell):
            edit = ev.get("edit") or {}
            if ev.get("edit_kind") != "vary_together" or not ev.get("accepted"):
                continue
            fields = fields or list(edit["fields"])
            if list(edit["fields"]) != fields:
                continue
            key = json.dumps(edit["rows"])
            if key not in seen:
                seen.add(key)
                pools.append({"fields": fields, "rows": edit["rows"], "source": f"{system}/seed-{seed}"})
    return pools


def pool_suite(base: dict[str, Any], pools: list[dict[str, Any]], dlm: str, task: str) -> dict[str, Any]:
    """A suite from `base` (its models, seeds, samples, metrics and the named task) with one `llada`
    system per pool."""
    if not pools:
        raise ValueError("the run kept no joint pool on that task")
    tasks = [t for t in base["tasks"] if (t["name"] if isinstance(t, dict) else t) == task]
    if not tasks:
        raise ValueError(f"task {task!r} is not in the base suite")
    systems = {
        f"rows-{i}": {
            "type": "llada",
            "models": {"dlm": dlm},
            "params": {"joint_pools": [{"fields": p["fields"], "rows": p["rows"]}]},
        }
        for i, p in enumerate(pools)
    }
    return {
        "name": f"{base['name']}-pool-rows",
        "description": "plain llada with each kept joint pool of an AoD run: "
        + ", ".join(f"rows-{i} from {p['source']}" for i, p in enumerate(pools)),
        "profile": base.get("profile", "embedded"),
        "seeds": base["seeds"],
        "samples": base["samples"],
        "models": base["models"],
        "tasks": tasks,
        "systems": systems,
        "metrics": base["metrics"],
    }


def row_set_table(run: Path, task: str, metric: str) -> tuple[list[str], list[int], list[list[float]]]:
    """Systems, seeds that every system finished, and the metric as a (seeds x systems) matrix, from the
    run's tidy frame (`reports.aggregate.load_run`)."""
    from reports.aggregate import load_run

    frame = load_run(run)
    ok = frame[(frame["status"] == "ok") & (frame["task"] == task) & (frame["metric"] == metric)]
    table = ok.pivot_table(index="seed", columns="system", values="value", aggfunc="first").dropna()
    systems = sorted(table.columns, key=lambda s: (len(s), s))
    table = table[systems].sort_index()
    return systems, [int(k) for k in table.index], table.to_numpy(dtype=float).tolist()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite", help="write the replay suite")
    s.add_argument("run", type=Path)
    s.add_argument("--task", required=True)
    s.add_argument(
        "--base", type=Path, required=True, help="suite whose DLM preset, seeds and metrics to use"
    )
    s.add_argument("--dlm", default="mdlm-1800-threshold", help="the base suite's DLM model name")
    s.add_argument("--out", type=Path, required=True)
    a = sub.add_parser("analyze", help="per row set means and Friedman's test")
    a.add_argument("run", type=Path)
    a.add_argument("--task", default="multiwoz/train")
    a.add_argument("--metric", default="tsr")
    args = ap.parse_args(argv)
    if args.cmd == "suite":
        base = yaml.safe_load(args.base.read_text())
        suite = pool_suite(base, kept_pools(args.run, args.task), args.dlm, args.task)
        args.out.write_text(yaml.safe_dump(suite, sort_keys=False, width=1_000_000))
        print(f"{len(suite['systems'])} row sets -> {args.out}")
        return 0
    from scipy.stats import friedmanchisquare

    systems, seeds, matrix = row_set_table(args.run, args.task, args.metric)
    means = [sum(r[j] for r in matrix) / len(matrix) for j in range(len(systems))]
    print(f"{args.metric} on {args.task}, {len(seeds)} seeds, {len(systems)} row sets")
    print("| row set | mean | per seed |\n|---|---:|---|")
    for j, name in enumerate(systems):
        print(f"| {name} | {means[j]:.3f} | {', '.join(f'{r[j]:.3f}' for r in matrix)} |")
    if len(systems) >= 3 and len(seeds) >= 2:
        stat, p = friedmanchisquare(*[[r[j] for r in matrix] for j in range(len(systems))])
        print(f"row-set means from {min(means):.3f} to {max(means):.3f}; Friedman chi2 {stat:.2f}, p {p:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
