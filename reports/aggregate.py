"""Aggregation views over a run directory: a tidy frame, per-(system, task) and per-system summaries.

Why tidy: one row per (system, task, seed, metric) is the shape users' notebooks, pandas groupbys and our
renderers all start from, and it never needs composite keys split apart. Failed cells appear with status
"failed" and NaN values so that counts stay honest, but they never enter a mean.

Per-system numbers follow the paper's tables, which average over datasets: the mean is the macro mean over
tasks of per-task means over seeds (as suite expectations compute it); its spread (sample std, 95%
t-interval) is that of the per-seed macro means over seeds. With no NaN the two views coincide.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.errors import BenchError
from bench.stats import Stat
from bench.store import RunStore

if TYPE_CHECKING:
    import pandas as pd

TIDY_COLUMNS = ["system", "task", "seed", "metric", "value", "status"]
SUMMARY_COLUMNS = [
    "level",
    "system",
    "task",
    "metric",
    "n",
    "n_nan",
    "n_failed",
    "mean",
    "std",
    "sem",
    "ci95_low",
    "ci95_high",
]
MACRO_TASK = ""  # task column of per-system (macro) rows


def read_manifest(run_dir: Path | str) -> dict[str, Any]:
    """The manifest, or {} when the run has none yet (a report of a half-written run still renders)."""
    store = RunStore(run_dir)
    if not store.exists():
        return {}
    try:
        m = store.read_manifest()
    except (OSError, ValueError, BenchError) as exc:
        print(f"warning: {exc}", file=sys.stderr)
        return {}
    return m if isinstance(m, dict) else {}


def suite_metric_names(manifest: dict[str, Any]) -> list[str]:
    """Metric names declared by the suite, in suite order; entries may be names or {name: ...} dicts."""
    suite = manifest.get("suite") or {}
    out: list[str] = []
    for m in suite.get("metrics") or []:
        name = m if isinstance(m, str) else (m.get("name") if isinstance(m, dict) else None)
        if isinstance(name, str) and name not in out:
            out.append(name)
    return out


def load_run(run_dir: Path | str) -> pd.DataFrame:
    """Tidy frame (system, task, seed, metric, value, status) of every cell in RUN_DIR.

    Metrics are the suite's (manifest order) followed by any other metric a cell wrote. A failed cell
    contributes one NaN row per metric with status "failed" (so it is visible and counted, never averaged).
    """
    import pandas as pd

    store = RunStore(run_dir)
    manifest = read_manifest(run_dir)
    declared = suite_metric_names(manifest)
    cells = list(store.iter_cells())
    seen: list[str] = list(declared)
    for c in cells:
        for name in c.metrics:
            if name not in seen:
                seen.append(name)
    rows: list[dict[str, Any]] = []
    for c in cells:
        status = str(c.record.get("status", "unknown"))
        names = seen if status != "ok" else list(dict.fromkeys([*declared, *c.metrics]))
        for name in names:
            v = c.metrics.get(name, math.nan) if status == "ok" else math.nan
            rows.append(
                {
                    "system": c.key.system,
                    "task": c.key.task,
                    "seed": c.key.seed,
                    "metric": name,
                    "value": float(v) if v is not None else math.nan,
                    "status": status,
                }
            )
    df = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    df["seed"] = df["seed"].astype("int64")
    df["value"] = df["value"].astype("float64")
    df.attrs["metrics"] = seen
    return df


def metric_order(df: pd.DataFrame) -> list[str]:
    """Metric names in the order load_run found them (suite order first)."""
    order = df.attrs.get("metrics")
    if order:
        return list(order)
    return list(dict.fromkeys(df["metric"].tolist()))


INTERVAL_NOTE = "95% t-interval over seeds, clipped to the metric's range"


def metric_bounds(name: str) -> tuple[float, float]:
    """The values a metric can take: its registry entry's `bounds` when it declares one, else the
    range its definition implies (rates in [0, 1], BLEU-style scores x100 in [0, 100], entropy and
    counts >= 0, perplexity >= 1), else unbounded."""
    try:
        from bench.registry import METRICS

        declared = METRICS.meta(name).get("bounds")
        if isinstance(declared, list | tuple) and len(declared) == 2:
            return (float(declared[0]), float(declared[1]))
    except Exception:  # noqa: BLE001 - an unknown metric is just unbounded
        pass
    if name in _UNIT_RANGE or name.startswith(("distinct_", "tsr")):
        return (0.0, 1.0)
    if name in ("bleu", "rouge_l", "meteor"):
        return (0.0, 100.0)
    if name == "perplexity":
        return (1.0, math.inf)
    if name == "similarity":  # cosine
        return (-1.0, 1.0)
    if name in _NON_NEGATIVE:
        return (0.0, math.inf)
    return (-math.inf, math.inf)


_UNIT_RANGE = frozenset({"parse_rate", "schema_valid", "field_overlap", "diversity", "novelty", "self_bleu"})
_NON_NEGATIVE = frozenset(
    {"entropy", "seconds", "records_per_s", "generator_calls", "agent_calls", "tokens_in", "tokens_out"}
    | {"nfe", "cost_usd"}
)


def metric_unit(name: str) -> str:
    """What a metric's number is, for axis labels: share, score x100, nats, seconds ..."""
    lo, hi = metric_bounds(name)
    if (lo, hi) == (0.0, 1.0):
        return "share, 0\u20131"
    if (lo, hi) == (0.0, 100.0):
        return "score \u00d7100"
    return _UNITS.get(name, "value")


_UNITS = {
    "similarity": "cosine",
    "entropy": "nats",
    "perplexity": "per token",
    "seconds": "s",
    "records_per_s": "records/s",
    "cost_usd": "USD",
    "tokens_in": "tokens",
    "tokens_out": "tokens",
    "nfe": "forward passes",
    "generator_calls": "calls",
    "agent_calls": "calls",
}


def _row(level: str, system: str, task: str, metric: str, stat: Stat, n_failed: int) -> dict[str, Any]:
    lo, hi = stat.bounded_interval(metric_bounds(metric))
    return {
        "level": level,
        "system": system,
        "task": task,
        "metric": metric,
        "n": stat.n,
        "n_nan": stat.n_nan,
        "n_failed": n_failed,
        "mean": stat.mean,
        "std": stat.std,
        "sem": stat.sem,
        "ci95_low": lo,
        "ci95_high": hi,
    }


def cell_stats(df: pd.DataFrame) -> dict[tuple[str, str, str], tuple[Stat, int]]:
    """(system, task, metric) -> (Stat over ok seeds, number of failed seeds)."""
    out: dict[tuple[str, str, str], tuple[Stat, int]] = {}
    for (system, task, metric), g in df.groupby(["system", "task", "metric"], sort=False):
        ok = g[g["status"] == "ok"]
        out[(system, task, metric)] = (Stat.of(ok["value"].tolist()), int((g["status"] != "ok").sum()))
    return out


def per_seed_macro(df: pd.DataFrame) -> pd.DataFrame:
    """(system, metric, seed) -> macro mean over tasks with a finite value for that seed (NaN if none)."""
    ok = df[(df["status"] == "ok")]
    g = ok.groupby(["system", "metric", "seed"], sort=False)["value"].mean()  # pandas skips NaN
    return g.reset_index()


def task_coverage(df: pd.DataFrame) -> dict[tuple[str, str], tuple[int, int]]:
    """(system, metric) -> (tasks whose mean is defined, tasks the system ran): a macro mean over fewer
    tasks than the system ran (a task with no parsed record, a failed cell) is marked in tables."""
    ran = df.groupby(["system", "metric"], sort=False)["task"].nunique().to_dict()
    ok = df[df["status"] == "ok"]
    task_means = ok.groupby(["system", "metric", "task"], sort=False)["value"].mean().dropna()
    defined = task_means.groupby(level=["system", "metric"], sort=False).size().to_dict()
    return {key: (int(defined.get(key, 0)), int(n)) for key, n in ran.items()}


def system_stats(df: pd.DataFrame) -> dict[tuple[str, str], tuple[Stat, int]]:
    """(system, metric) -> (macro Stat, failed cells).

    The mean is the macro mean over tasks of each task's mean over seeds (NaN seeds and all-NaN tasks
    left out), the same number suite expectations compare (bench.runner.macro_lookup). The spread (std,
    standard error, t-interval) is that of the per-seed macro means over seeds, the seed-to-seed
    variation of the table's number; with no NaN both views give the same mean.
    """
    ok = df[df["status"] == "ok"]
    task_means = ok.groupby(["system", "metric", "task"], sort=False)["value"].mean()
    macro_mean = task_means.groupby(level=["system", "metric"], sort=False).mean().to_dict()
    macro = per_seed_macro(df)
    out: dict[tuple[str, str], tuple[Stat, int]] = {}
    failed = df[df["status"] != "ok"].groupby(["system", "metric"])["seed"].count().to_dict()
    for (system, metric), g in macro.groupby(["system", "metric"], sort=False):
        spread = Stat.of(g["value"].tolist())
        mean = macro_mean.get((system, metric), math.nan)
        if spread.n == 0 or mean is None or math.isnan(mean):
            stat = spread
        else:
            stat = Stat(spread.n, float(mean), spread.m2, spread.n_nan, spread.min, spread.max)
        out[(system, metric)] = (stat, int(failed.get((system, metric), 0)))
    for (system, metric), n in failed.items():
        out.setdefault((system, metric), (Stat(), int(n)))
    return out


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per-(system, task) rows (level "cell") and per-system macro rows (level "system", task "")."""
    import pandas as pd

    rows = [_row("cell", s, t, m, st, nf) for (s, t, m), (st, nf) in cell_stats(df).items()]
    rows += [_row("system", s, MACRO_TASK, m, st, nf) for (s, m), (st, nf) in system_stats(df).items()]
    out = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    out.attrs["metrics"] = metric_order(df)
    return out


def write_results_csv(run_dir: Path | str, df: pd.DataFrame | None = None) -> Path:
    """RUN_DIR/results.csv: the summary (both levels), NaN written as an empty field."""
    from bench.store import atomic_write_text

    df = load_run(run_dir) if df is None else df
    summary = summarize(df)
    path = Path(run_dir) / "results.csv"
    atomic_write_text(path, summary.to_csv(index=False, float_format="%.10g", na_rep=""))
    return path


def failed_cells(run_dir: Path | str) -> list[dict[str, Any]]:
    """Every cell whose status is not ok, with its reason (cell.json "error")."""
    out = []
    for c in RunStore(run_dir).iter_cells():
        if c.status != "ok":
            err = c.record.get("error")
            if isinstance(err, dict):
                err = err.get("message") or err.get("type") or str(err)
            out.append(
                {
                    "system": c.key.system,
                    "task": c.key.task,
                    "seed": c.key.seed,
                    "status": c.status,
                    "error": str(err) if err else "(no reason recorded)",
                }
            )
    return out


def metric_better(name: str) -> str | None:
    """ "up", "down" or None, from the metric registry; None for unknown metrics or a missing registry."""
    try:
        from bench.registry import METRICS

        better = METRICS.meta(name).get("better")
    except Exception:  # noqa: BLE001 - an unregistered or broken metric just has no direction
        return _FALLBACK_BETTER.get(name)
    return better if better in ("up", "down") else _FALLBACK_BETTER.get(name)


# Directions from design.md section 5, used only when the metric registry does not know a name (e.g. a
# paper results file rendered before metrics/registry.py lands).
_FALLBACK_BETTER: dict[str, str] = {
    "parse_rate": "up",
    "schema_valid": "up",
    "tsr": "up",
    "tsr_judge": "up",
    "field_overlap": "down",
    "similarity": "up",
    "diversity": "up",
    "distinct_1": "up",
    "distinct_2": "up",
    "distinct_3": "up",
    "self_bleu": "down",
    "novelty": "up",
    "entropy": "up",
    "perplexity": "down",
    "bleu": "up",
    "rouge_l": "up",
    "meteor": "up",
    "records_per_s": "up",
    "seconds": "down",
    "cost_usd": "down",
}


def unique_in_order(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
