"""Plots of a run (matplotlib, PNG and PDF): metric bars with 95% t-intervals, the similarity-diversity
scatter, reward-vs-iteration curves from system traces, and records/s against TSR.

Why these four: bars with intervals show whether differences between systems exceed seed noise; the
similarity-diversity plane is the paper's central trade-off; reward curves show whether an optimizer
(AoD, PromptBreeder, EvoPrompt) actually improves over iterations; throughput against TSR is the cost of
quality. A plot whose data is absent (no trace with rewards, no similarity metric) is skipped with a
reason instead of drawn empty. Files carry no timestamps so reruns produce identical bytes.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.store import RunStore, read_jsonl

if TYPE_CHECKING:
    import pandas as pd

PLOT_DIR = "plots"
_REWARD_KEYS = ("reward", "score", "mean_reward")
_ITER_KEYS = ("iteration", "iter", "step", "generation")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "aod-bench", "figure.dpi": 100})
    return plt


def _save(fig: Any, base: Path) -> list[Path]:
    base.parent.mkdir(parents=True, exist_ok=True)
    png, pdf = base.with_suffix(".png"), base.with_suffix(".pdf")
    fig.savefig(png, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None, "ModDate": None, "Producer": None})
    _pyplot().close(fig)
    return [png, pdf]


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def metric_bars(df: pd.DataFrame, metric: str, base: Path) -> list[Path]:
    """Per-system macro mean of `metric` with asymmetric 95% t-interval error bars."""
    from reports.aggregate import metric_better, metric_bounds, metric_unit, system_stats

    stats = {s: st for (s, m), (st, _) in system_stats(df).items() if m == metric and st.n > 0}
    if not stats:
        return []
    plt = _pyplot()
    systems = list(stats)
    means = [stats[s].mean for s in systems]
    bounds = metric_bounds(metric)
    ci = {s: stats[s].bounded_interval(bounds) for s in systems}
    lo = [max(0.0, stats[s].mean - ci[s][0]) if stats[s].n >= 2 else 0.0 for s in systems]
    hi = [max(0.0, ci[s][1] - stats[s].mean) if stats[s].n >= 2 else 0.0 for s in systems]
    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(systems) + 2), 3.2))
    ax.bar(range(len(systems)), means, yerr=[lo, hi], capsize=4, color="#4C72B0")
    ax.set_xticks(range(len(systems)), systems, rotation=30, ha="right")
    ax.set_xlabel("system")
    arrow = {"up": ", higher is better", "down": ", lower is better"}.get(metric_better(metric) or "", "")
    ax.set_ylabel(f"{metric} ({metric_unit(metric)}{arrow})")
    if bounds == (0.0, 1.0):
        ax.set_ylim(0.0, 1.05)
    ax.set_title(f"{metric} by system", fontsize=10)
    return _save(fig, base)


def similarity_diversity(df: pd.DataFrame, base: Path) -> list[Path]:
    """One point per system (macro means), with standard-error bars on both axes."""
    from reports.aggregate import system_stats

    stats = system_stats(df)
    systems = [s for (s, m) in stats if m == "similarity" and (s, "diversity") in stats]
    systems = [
        s for s in dict.fromkeys(systems) if stats[(s, "similarity")][0].n and stats[(s, "diversity")][0].n
    ]
    if not systems:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 4.0))
    for s in systems:
        x, y = stats[(s, "similarity")][0], stats[(s, "diversity")][0]
        xerr = 0.0 if math.isnan(x.sem) else x.sem
        yerr = 0.0 if math.isnan(y.sem) else y.sem
        ax.errorbar(x.mean, y.mean, xerr=xerr, yerr=yerr, fmt="o", capsize=3)
        ax.annotate(s, (x.mean, y.mean), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xlabel("similarity to holdout (cosine, higher is better)")
    ax.set_ylabel("diversity (distinct-2, share 0\u20131, higher is better)")
    ax.set_title("Similarity against diversity", fontsize=10)
    return _save(fig, base)


def reward_series(run_dir: Path | str) -> dict[str, dict[int, list[float]]]:
    """system -> iteration -> rewards (over tasks and seeds) from trace.jsonl events that carry both an
    iteration number and a numeric reward."""
    out: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for cell in RunStore(run_dir).iter_cells():
        for ev in read_jsonl(cell.path / "trace.jsonl"):
            if not isinstance(ev, dict):
                continue
            it = next((ev[k] for k in _ITER_KEYS if isinstance(ev.get(k), int)), None)
            r = next((ev[k] for k in _REWARD_KEYS if isinstance(ev.get(k), int | float)), None)
            if it is not None and r is not None and not math.isnan(float(r)):
                out[cell.key.system][it].append(float(r))
    return {s: dict(v) for s, v in out.items()}


def reward_curves(run_dir: Path | str, base: Path) -> list[Path]:
    """Mean reward per iteration per system, with a band of ±1 standard error over tasks and seeds."""
    from bench.stats import Stat

    series = reward_series(run_dir)
    if not series:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.4))
    for system, by_it in series.items():
        its = sorted(by_it)
        st = [Stat.of(by_it[i]) for i in its]
        mean = [s.mean for s in st]
        sem = [0.0 if math.isnan(s.sem) else s.sem for s in st]
        ax.plot(its, mean, marker="o", label=system)
        ax.fill_between(
            its,
            [m - e for m, e in zip(mean, sem, strict=True)],
            [m + e for m, e in zip(mean, sem, strict=True)],
            alpha=0.2,
        )
    ax.set_xlabel("optimizer iteration")
    ax.set_ylabel("reward (the optimizer's own scale)")
    ax.set_title("Optimizer reward by iteration", fontsize=10)
    ax.legend(fontsize=8)
    return _save(fig, base)


def throughput_rows(run_dir: Path | str, df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """system -> (records/s, tsr) macro means; records/s from the metric when the run has it, else from
    usage.json (samples / seconds)."""
    from reports.aggregate import system_stats

    stats = system_stats(df)
    out: dict[str, tuple[float, float]] = {}
    per_system_rate: dict[str, list[float]] = defaultdict(list)
    if not any(m == "records_per_s" for _, m in stats):
        store = RunStore(run_dir)
        for cell in store.iter_cells():
            secs = float(cell.usage.get("seconds") or 0.0)
            n = len(read_jsonl(cell.path / "samples.jsonl"))
            if cell.status == "ok" and secs > 0 and n:
                per_system_rate[cell.key.system].append(n / secs)
    for (s, m), (st, _) in stats.items():
        if m != "tsr" or st.n == 0:
            continue
        if (s, "records_per_s") in stats:
            rate = stats[(s, "records_per_s")][0].mean
        else:
            rates = per_system_rate.get(s) or []
            rate = sum(rates) / len(rates) if rates else math.nan
        if not math.isnan(rate):
            out[s] = (rate, st.mean)
    return out


def throughput_vs_tsr(run_dir: Path | str, df: pd.DataFrame, base: Path) -> list[Path]:
    rows = throughput_rows(run_dir, df)
    if not rows:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.5, 3.6))
    for s, (rate, tsr) in rows.items():
        ax.scatter([rate], [tsr])
        ax.annotate(s, (rate, tsr), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("throughput (records/s, log scale)")
    ax.set_ylabel("TSR (share 0\u20131, higher is better)")
    ax.set_title("Throughput against task success", fontsize=10)
    return _save(fig, base)


def fidelity_privacy(df: pd.DataFrame, base: Path) -> list[Path]:
    """One point per system: distribution fidelity (marginal_fidelity, else mauve) against the DCR
    share of records closer to a reference than to the holdout (0.5 ideal; 1.0: copies)."""
    from reports.aggregate import system_stats

    stats = system_stats(df)
    fid_metric = next((m for m in ("marginal_fidelity", "mauve") if any(k[1] == m for k in stats)), None)
    if fid_metric is None:
        return []
    systems = [
        s
        for (s, m) in stats
        if m == fid_metric and (s, "dcr_share_closer_to_train") in stats and stats[(s, m)][0].n
    ]
    systems = [s for s in dict.fromkeys(systems) if stats[(s, "dcr_share_closer_to_train")][0].n]
    if not systems:
        return []
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(4.8, 4.0))
    for s in systems:
        x, y = stats[(s, "dcr_share_closer_to_train")][0], stats[(s, fid_metric)][0]
        xerr = 0.0 if math.isnan(x.sem) else x.sem
        yerr = 0.0 if math.isnan(y.sem) else y.sem
        ax.errorbar(x.mean, y.mean, xerr=xerr, yerr=yerr, fmt="o", capsize=3)
        ax.annotate(s, (x.mean, y.mean), textcoords="offset points", xytext=(5, 5), fontsize=8)
    ax.axvline(0.5, color="#888", linestyle="--", linewidth=1)
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("DCR: share of records closer to a reference than to the holdout (0.5 ideal)")
    ax.set_ylabel(f"{fid_metric} (share 0\u20131, higher is better)")
    ax.set_title("Fidelity against privacy", fontsize=10)
    return _save(fig, base)


def _toolcall_plot(run_dir: Path | str, base: Path) -> list[Path]:
    """BFCL runs: accuracy against seconds per item (reports/toolcalls.py); nothing for other runs."""
    from reports.toolcalls import accuracy_vs_seconds

    return accuracy_vs_seconds(run_dir, base)


def plot_caption(name: str) -> tuple[str, str]:
    """(title, one-line caption) of a plot by its name in `write_plots`' result."""
    from reports.aggregate import INTERVAL_NOTE, metric_bounds

    if name.startswith("bars_"):
        metric = name[len("bars_") :]
        lo, hi = metric_bounds(metric)
        rng = f" [{lo:g}, {hi:g}]" if math.isfinite(lo) and math.isfinite(hi) else ""
        return (
            f"{metric} by system",
            f"Macro mean over tasks per system; error bars: {INTERVAL_NOTE}{rng}.",
        )
    return _CAPTIONS.get(name, (name.replace("_", " "), ""))


_CAPTIONS = {
    "similarity_diversity": (
        "Similarity against diversity",
        "One point per system (macro means over tasks); bars: \u00b11 standard error over seeds. "
        "Up and to the right is better: the paper's central trade-off.",
    ),
    "reward_curves": (
        "Optimizer reward by iteration",
        "Mean reward per iteration over tasks and seeds, band \u00b11 standard error; a flat curve "
        "means the optimizer found nothing better than its start.",
    ),
    "throughput_vs_tsr": (
        "Throughput against task success",
        "Records per second (log scale) against TSR, macro means per system: the cost of quality.",
    ),
    "toolcall_accuracy_vs_seconds": (
        "Tool calls: accuracy against speed",
        "One point per system: macro-mean accuracy (AST, irrelevance or multi-turn) against the system's "
        "own seconds per item (log scale), \u00b11 s.e. over tasks; squares are diffusion systems.",
    ),
    "fidelity_privacy": (
        "Fidelity against privacy",
        "Distribution fidelity (marginal_fidelity, else MAUVE) against the share of records closer to a "
        "reference than to the holdout (DCR; 0.5 ideal, 1.0: copies), macro means, \u00b11 s.e.",
    ),
}


def write_plots(run_dir: Path | str, df: pd.DataFrame | None = None) -> dict[str, list[Path]]:
    """Every plot that has data, under RUN_DIR/plots/; name -> [png, pdf]. Skipped plots are absent."""
    from reports.aggregate import load_run, metric_order, read_manifest, suite_metric_names

    df = load_run(run_dir) if df is None else df
    out_dir = Path(run_dir) / PLOT_DIR
    plots: dict[str, list[Path]] = {}
    present = metric_order(df)
    declared = [m for m in suite_metric_names(read_manifest(run_dir)) if m in present]
    for metric in declared or present:  # the suite's metrics; efficiency has its own plot
        files = metric_bars(df, metric, out_dir / f"bars_{_safe(metric)}")
        if files:
            plots[f"bars_{metric}"] = files
    for name, files in (
        ("similarity_diversity", similarity_diversity(df, out_dir / "similarity_diversity")),
        ("reward_curves", reward_curves(run_dir, out_dir / "reward_curves")),
        ("throughput_vs_tsr", throughput_vs_tsr(run_dir, df, out_dir / "throughput_vs_tsr")),
        ("fidelity_privacy", fidelity_privacy(df, out_dir / "fidelity_privacy")),
        ("toolcall_accuracy_vs_seconds", _toolcall_plot(run_dir, out_dir / "toolcall_accuracy_vs_seconds")),
    ):
        if files:
            plots[name] = files
    return plots
