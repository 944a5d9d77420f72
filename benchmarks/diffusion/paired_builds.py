"""Two DLM recipes over several builds and tasks: paired per (build, task, seed), then pooled.

One training run of the embedded DLM is one draw of its weights (docs/systems-diffusion.md, "How mdlm-9
was reached"), so a recipe is compared over builds (training seeds), each build of recipe A paired with
the build of recipe B that shares its training seed, and the test pools every (build, task, seed) pair.
Each `--pair A:B` names two systems of the run that differ in one thing: the recipe of their DLM
(`llada-0:llada-pair-0`), or the system on one build (`llada:aod`, pooling AoD's effect over builds).

    python -m benchmarks.diffusion.paired_builds runs/pair-superni-tasks \\
        --pair llada-0:llada-pair-0 --pair llada-1:llada-pair-1 --md F.md --json F.json

Several run directories are read as one, as `benchmarks.aod.comparison` reads them (a cell in two of
them is an error).
"""

from __future__ import annotations

import argparse
import json
import math
from functools import partial
from pathlib import Path
from typing import Any

from reports.compare import Comparison, paired_comparison
from reports.fmt import fmt_num, fmt_p

_f = partial(fmt_num, decimals=3)
_p = partial(fmt_p, spec=".2g", below="1e-4")

METRICS = ("parse_rate", "schema_valid", "tsr", "field_overlap", "diversity", "novelty")


def _values(frame: Any, system: str, metric: str) -> dict[tuple[str, int], float]:
    """(task, seed) -> value of one system's finished cells (a metric undefined in a cell is absent)."""
    ok = frame[(frame["status"] == "ok") & (frame["system"] == system) & (frame["metric"] == metric)]
    return {
        (t, int(s)): float(v)
        for t, s, v in zip(ok["task"], ok["seed"], ok["value"], strict=True)
        if not math.isnan(float(v))
    }


def compare_builds(
    frame: Any, pairs: list[tuple[str, str]], metrics: tuple[str, ...] = METRICS
) -> tuple[list[Comparison], list[Comparison]]:
    """Per (pair, task, metric) comparisons of B against A, and per metric the pooled one over every
    (pair, task, seed) where both have a value (its `system` names the pairs, its `task` "pooled")."""
    per: list[Comparison] = []
    pooled: list[Comparison] = []
    tasks = sorted(set(frame["task"]))
    for metric in metrics:
        all_a: dict[tuple[int, str, int], float] = {}
        all_b: dict[tuple[int, str, int], float] = {}
        for i, (a, b) in enumerate(pairs):
            va, vb = _values(frame, a, metric), _values(frame, b, metric)
            for task in tasks:
                ta = {s: v for (t, s), v in va.items() if t == task}
                tb = {s: v for (t, s), v in vb.items() if t == task}
                if set(ta) & set(tb):
                    per.append(paired_comparison(f"{b} vs {a}", task, metric, ta, tb))
            all_a |= {(i, t, s): v for (t, s), v in va.items()}
            all_b |= {(i, t, s): v for (t, s), v in vb.items()}
        if set(all_a) & set(all_b):
            names = ", ".join(f"{b} vs {a}" for a, b in pairs)
            pooled.append(paired_comparison(names, "pooled", metric, all_a, all_b))
    return per, pooled


def render_markdown(per: list[Comparison], pooled: list[Comparison]) -> str:
    """Per pair and task: A / B means of each metric and B − A `tsr` with its t p; then the pooled rows."""
    cells: dict[tuple[str, str], dict[str, Comparison]] = {}
    for c in per:
        cells.setdefault((c.system, c.task), {})[c.metric] = c
    metrics = list(dict.fromkeys(c.metric for c in per))
    lines = [
        "| pair | task | " + " | ".join(f"{m} A / B" for m in metrics) + " | B − A `tsr` (t p) |",
        "|---|---|" + "---:|" * (len(metrics) + 1),
    ]
    for (pair, task), row in cells.items():
        means = [f"{_f(row[m].mean_a)} / {_f(row[m].mean_b)}" if m in row else "–" for m in metrics]
        tsr = row.get("tsr")
        gain = f"{tsr.diff:+.3f} ({_p(tsr.p_ttest)})" if tsr else "–"
        lines.append(f"| {pair} | {task} | " + " | ".join(means) + f" | {gain} |")
    lines += [
        "",
        "| metric (pooled) | pairs | A | B | B − A | t p | Wilcoxon p |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in pooled:
        lines.append(
            f"| {c.metric} | {c.n_shared} | {_f(c.mean_a)} | {_f(c.mean_b)} | {c.diff:+.3f} | "
            f"{_p(c.p_ttest)} | {_p(c.p_wilcoxon)} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from bench.errors import BenchError
    from benchmarks.aod.comparison import runs_frame

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "run", type=Path, nargs="+", help="run directories, read as one (DIR=sys1,sys2 takes those)"
    )
    ap.add_argument("--pair", action="append", required=True, help="A:B, two systems of the run")
    ap.add_argument("--metrics", default=",".join(METRICS))
    ap.add_argument("--md", type=Path, help="write the Markdown tables here (default: print them)")
    ap.add_argument("--json", type=Path, help="write every comparison as JSON here")
    a = ap.parse_args(argv)
    pairs = []
    for text in a.pair:
        left, sep, right = text.partition(":")
        if not sep or not left or not right:
            ap.error(f"--pair {text!r}: expected A:B")
        pairs.append((left, right))
    try:
        frame = runs_frame(list(a.run))
    except BenchError as exc:  # a cell in two runs: a usage error, said as one
        ap.error(str(exc))
    known = set(frame["system"])
    missing = sorted({s for p in pairs for s in p} - known)
    if missing:
        runs = ", ".join(str(r) for r in a.run)
        ap.error(f"no such system in {runs}: {', '.join(missing)} (systems: {', '.join(sorted(known))})")
    per, pooled = compare_builds(frame, pairs, tuple(m for m in a.metrics.split(",") if m))
    text = render_markdown(per, pooled)
    if a.md:
        a.md.write_text(text)
    else:
        print(text, end="")
    if a.json:
        rows = {"pairs": [list(p) for p in pairs], "per_build": [c.to_json() for c in per]}
        rows["pooled"] = [c.to_json() for c in pooled]
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
