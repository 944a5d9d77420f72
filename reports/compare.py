"""`bench compare RUN_A RUN_B`: paired per-seed comparison per (system, task, metric).

Why paired: both runs use the same seeds, and a seed fixes few-shot choice and sampling noise, so the
per-seed difference removes most of the between-seed variance that an unpaired test would carry. For each
(system, task, metric) present in both runs we report the mean of A and B, the mean difference B - A, the
paired t-test and Wilcoxon signed-rank p-values, and Cohen's d_z (mean difference / std of differences).
Pairs with a NaN or a failed cell on either side are left out and the shared-seed count says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.stats import Stat, paired_test
from reports.fmt import fmt_num, fmt_p


@dataclass(frozen=True)
class Comparison:
    system: str
    task: str
    metric: str
    n_shared: int
    mean_a: float
    mean_b: float
    diff: float
    p_ttest: float
    p_wilcoxon: float
    effect_size: float
    better: str | None

    @property
    def verdict(self) -> str:
        """ "better" / "worse" for B relative to A when p_ttest < 0.05 and the metric has a direction."""
        if self.better is None or math.isnan(self.p_ttest) or self.p_ttest >= 0.05 or self.diff == 0:
            return ""
        up = self.diff > 0
        return "better" if up == (self.better == "up") else "worse"

    def to_json(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["verdict"] = self.verdict
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()}


def paired_comparison(system: str, task: str, metric: str, va: dict, vb: dict) -> Comparison:
    """The paired statistics of seed -> value maps A and B over their shared seeds."""
    from reports.aggregate import metric_better

    seeds = sorted(set(va) & set(vb))
    xa, xb = [float(va[s]) for s in seeds], [float(vb[s]) for s in seeds]
    t = paired_test(xa, xb)
    return Comparison(
        system,
        task,
        metric,
        t.n,
        Stat.of(xa).mean,
        Stat.of(xb).mean,
        t.mean_diff,
        t.p_ttest,
        t.p_wilcoxon,
        t.effect_size,
        metric_better(metric),
    )


def compare_runs(run_a: Path | str, run_b: Path | str) -> list[Comparison]:
    """Every (system, task, metric) present in both runs, in run A's order."""
    from reports.aggregate import load_run

    a, b = load_run(run_a), load_run(run_b)
    a_ok, b_ok = a[a["status"] == "ok"], b[b["status"] == "ok"]
    b_index = {
        k: dict(zip(g["seed"], g["value"], strict=True))
        for k, g in b_ok.groupby(["system", "task", "metric"], sort=False)
    }
    out: list[Comparison] = []
    for (system, task, metric), g in a_ok.groupby(["system", "task", "metric"], sort=False):
        if (system, task, metric) not in b_index:
            continue
        va = dict(zip(g["seed"], g["value"], strict=True))
        vb = b_index[(system, task, metric)]
        out.append(paired_comparison(system, task, metric, va, vb))
    return out


def compare_systems(run: Path | str, reference: str) -> list[Comparison]:
    """Within one run: every other system against `reference`, paired by (task, seed).

    Why in one run: a suite runs all its systems on the same seeds, and a seed fixes the task's
    few-shot draws and the generator's noise for every system alike, so the seed pairs systems as it
    pairs two runs of one system. Rows carry the compared system; A is `reference`, B the system."""
    from reports.aggregate import load_run

    return compare_frame(load_run(run), reference, str(run))


def compare_frame(frame: Any, reference: str, where: str) -> list[Comparison]:
    """`compare_systems` on a tidy frame (`reports.aggregate.load_run`'s, or several runs' concatenated)."""
    ok = frame[frame["status"] == "ok"]
    if reference not in set(ok["system"]):
        names = ", ".join(dict.fromkeys(frame["system"])) or "none"
        raise ValueError(f"system {reference!r} has no finished cell in {where} (systems: {names})")
    ref = {
        k: dict(zip(g["seed"], g["value"], strict=True))
        for k, g in ok[ok["system"] == reference].groupby(["task", "metric"], sort=False)
    }
    out: list[Comparison] = []
    for (system, task, metric), g in ok[ok["system"] != reference].groupby(
        ["system", "task", "metric"], sort=False
    ):
        if (task, metric) not in ref:
            continue
        va, vb = ref[(task, metric)], dict(zip(g["seed"], g["value"], strict=True))
        out.append(paired_comparison(system, task, metric, va, vb))
    return out


def render_comparison(rows: list[Comparison], run_a: str, run_b: str) -> str:
    """Fixed-width text table for the terminal (names printed as they are; a terminal runs no markup)."""
    head = ["system", "task", "metric", "n", "A", "B", "B-A", "p(t)", "p(W)", "d_z", "verdict"]
    body = [
        [
            r.system,
            r.task,
            r.metric,
            str(r.n_shared),
            fmt_num(r.mean_a),
            fmt_num(r.mean_b),
            fmt_num(r.diff),
            fmt_p(r.p_ttest, spec=".4f", below="1e-4"),
            fmt_p(r.p_wilcoxon, spec=".4f", below="1e-4"),
            fmt_num(r.effect_size, 2)
            if math.isfinite(r.effect_size)
            else ("\u2013" if math.isnan(r.effect_size) else ("+inf" if r.effect_size > 0 else "-inf")),
            r.verdict,
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(x[i]) for x in body)) if body else len(h) for i, h in enumerate(head)]
    lines = [
        f"A = {run_a}",
        f"B = {run_b}",
        "paired over shared seeds; B-A = mean difference; d_z = Cohen's d_z",
        "",
    ]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    for row in body:
        lines.append("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip())
    if not rows:
        lines.append("(no (system, task, metric) in common)")
    return "\n".join(lines) + "\n"
