"""Tool-call report of a run (BFCL tasks): accuracy, failure taxonomy and speed per system, the
diffusion-against-autoregressive speed ratio at matched accuracy, and the accuracy-against-speed plot.

The DLLM Agent study (arXiv 2602.07451) claims that at comparable accuracy diffusion agents are faster end
to end; this view puts the two numbers side by side. Definitions:

* **accuracy** of a cell: `ast_accuracy` on call-expecting categories, `irrelevance_accuracy` on
  irrelevance categories, `multi_turn_accuracy` on multi-turn ones (the first of these the cell has).
* **seconds per item**: the system's own generation time (`usage.json` seconds: model calls, sampling and,
  in the agent loop, tool execution; not the training of a per-task model; llama.cpp loads its model on
  the first call, under a second for SmolLM2) over the cell's samples. Cached calls take no time: time
  a run with a fresh call cache (`--no-cache`).
* per system and task: mean over seeds with a 95% t-interval; per system: the macro mean over tasks.
* **speed ratio** of a diffusion system D against an AR system A on a task: A's seconds per item over D's
  (above 1: D is faster). **Matched accuracy**: the two systems' per-seed accuracies on that task do not
  differ significantly (paired t-test on shared seeds, p >= 0.05) *and* their means differ by at most
  `MATCH_TOLERANCE` (0.05 absolute), and at least one of them is above 0 (two systems that solve nothing
  are not "comparable"), and both sides generated output tokens (a side that made no model call, such
  as `llada-skeleton` answering "no call" on irrelevance from the references' call counts, is not timed
  work). The ratio is reported for every pair; the matched ones are marked,
  and the headline ratio (geometric mean over tasks) uses matched tasks only, or says there are none.

Systems are diffusion systems when their suite type is one of `DLM_TYPES`.

    python -m reports.toolcalls RUN_DIR   # writes RUN_DIR/toolcalls.md and RUN_DIR/plots/toolcall_*.png
    python -m reports.toolcalls RUN_A RUN_B ... [--out DIR]   # several runs as one (AR and DLM run apart)

Several runs are read as one when their cells do not overlap: AR and DLM systems are often run
separately (other machines, other days). A (system, task, seed) in two runs, or one system name with two
types, is an error that names both runs, never a silent pick.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.stats import Stat
from bench.store import RunStore, read_jsonl
from reports.fmt import fmt_num

DLM_TYPES = frozenset({"llada", "llada-skeleton", "aod", "diffusion-lm", "difflm"})
ACCURACY_METRICS = ("ast_accuracy", "irrelevance_accuracy", "multi_turn_accuracy")
MATCH_TOLERANCE = 0.05
TABLE_FAILURES = (
    "failure_invalid_syntax",
    "failure_wrong_function",
    "failure_missing_required",
    "failure_unexpected_argument",
    "failure_wrong_type",
    "failure_wrong_value",
    "failure_hallucinated_call",
    "failure_call_count_mismatch",
)


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and math.isfinite(float(v))


@dataclass
class CellSpeed:
    """One cell's accuracy and speed."""

    system: str
    task: str
    seed: int
    accuracy: float
    seconds_per_item: float
    nfe_per_item: float
    tokens_out_per_item: float
    metrics: dict[str, float] = field(default_factory=dict)


Runs = Path | str | list[Path] | list[str] | list[Path | str]


def _runs(runs: Runs) -> list[Path]:
    return [Path(r) for r in runs] if isinstance(runs, list) else [Path(runs)]


def cell_rows(runs: Runs) -> list[CellSpeed]:
    """Every finished tool-call cell (one with an accuracy metric) of the run or runs."""
    out: list[CellSpeed] = []
    seen: dict[tuple[str, str, int], Path] = {}
    for run_dir in _runs(runs):
        for row in _run_cell_rows(run_dir):
            key = (row.system, row.task, row.seed)
            if key in seen:
                raise BenchError(
                    f"cell {row.system}/{row.task}/seed-{row.seed} is in both {seen[key]} and {run_dir}; "
                    "combine runs whose cells do not overlap"
                )
            seen[key] = run_dir
            out.append(row)
    return out


def _run_cell_rows(run_dir: Path) -> list[CellSpeed]:
    out = []
    for cell in RunStore(run_dir).iter_cells():
        if cell.status != "ok":
            continue
        acc = next((float(cell.metrics[m]) for m in ACCURACY_METRICS if _finite(cell.metrics.get(m))), None)
        if acc is None:
            continue
        n = len(read_jsonl(cell.path / "samples.jsonl")) or 1
        usage = cell.usage or {}
        out.append(
            CellSpeed(
                cell.key.system,
                cell.key.task,
                int(cell.key.seed),
                acc,
                float(usage.get("seconds") or 0.0) / n,
                float(usage.get("nfe") or 0.0) / n,
                float(usage.get("tokens_out") or 0.0) / n,
                {k: float(v) for k, v in cell.metrics.items() if _finite(v)},
            )
        )
    return out


def system_types(runs: Runs) -> dict[str, str]:
    """System name -> suite type, over the run or runs (one name must keep one type)."""
    out: dict[str, str] = {}
    where: dict[str, Path] = {}
    for run_dir in _runs(runs):
        manifest = json.loads((run_dir / "manifest.json").read_text())
        for name, cfg in (manifest.get("suite") or {}).get("systems", {}).items():
            kind = str(cfg.get("type"))
            if name in out and out[name] != kind:
                raise BenchError(
                    f"system {name!r} is type {out[name]!r} in {where[name]} but {kind!r} in {run_dir}"
                )
            out[name], where[name] = kind, where.get(name, run_dir)
    return out


def _stat(values: list[float]) -> Stat:
    return Stat.of([v for v in values if math.isfinite(v)])


def per_task(rows: list[CellSpeed]) -> dict[tuple[str, str], list[CellSpeed]]:
    out: dict[tuple[str, str], list[CellSpeed]] = defaultdict(list)
    for r in rows:
        out[(r.system, r.task)].append(r)
    return out


def _paired_p(a: dict[int, float], b: dict[int, float]) -> float:
    """Two-sided paired t-test p-value on shared seeds (NaN with fewer than two; 1.0 for no difference)."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return math.nan
    d = [a[s] - b[s] for s in seeds]
    mean = sum(d) / len(d)
    var = sum((x - mean) ** 2 for x in d) / (len(d) - 1)
    if var == 0:
        return 1.0 if mean == 0 else 0.0
    from scipy import stats

    t = mean / math.sqrt(var / len(d))
    return float(2 * stats.t.sf(abs(t), len(d) - 1))


@dataclass
class PairRatio:
    dlm: str
    ar: str
    task: str
    ratio: float  # AR s/item over DLM s/item
    dlm_accuracy: float
    ar_accuracy: float
    p_value: float
    matched: bool


def speed_ratios(rows: list[CellSpeed], types: dict[str, str]) -> list[PairRatio]:
    """Every (diffusion system, AR system, task) the run has both of."""
    cells = per_task(rows)
    systems = sorted({r.system for r in rows})
    dlms = [s for s in systems if types.get(s) in DLM_TYPES]
    ars = [s for s in systems if s not in dlms]
    out = []
    for task in sorted({r.task for r in rows}):
        for d in dlms:
            for a in ars:
                cd, ca = cells.get((d, task)), cells.get((a, task))
                if not cd or not ca:
                    continue
                sd, sa = _stat([c.seconds_per_item for c in cd]), _stat([c.seconds_per_item for c in ca])
                accd = {c.seed: c.accuracy for c in cd}
                acca = {c.seed: c.accuracy for c in ca}
                md, ma = sum(accd.values()) / len(accd), sum(acca.values()) / len(acca)
                p = _paired_p(accd, acca)
                # comparable accuracy means something only when one of them solves anything, and a speed
                # ratio only when both generated: a side with no output token did no model work (the
                # skeleton's zero-call answer on irrelevance), so its ratio is shown but never matched
                worked = min(_stat([c.tokens_out_per_item for c in cs]).mean for cs in (cd, ca)) > 0
                matched = (
                    worked
                    and max(md, ma) > 0
                    and abs(md - ma) <= MATCH_TOLERANCE
                    and (math.isnan(p) or p >= 0.05)
                )
                ratio = sa.mean / sd.mean if sd.mean > 0 else math.inf
                out.append(PairRatio(d, a, task, ratio, md, ma, p, matched))
    return out


def headline(ratios: list[PairRatio], dlm: str, ar: str) -> tuple[float, int, int]:
    """(geometric-mean ratio over matched tasks, matched tasks, tasks) for one pair."""
    pair = [r for r in ratios if r.dlm == dlm and r.ar == ar]
    matched = [r.ratio for r in pair if r.matched and r.ratio > 0 and math.isfinite(r.ratio)]
    if not matched:
        return math.nan, 0, len(pair)
    return math.exp(sum(math.log(x) for x in matched) / len(matched)), len(matched), len(pair)


def _ci(st: Stat) -> str:
    if st.n == 0:
        return "–"
    if st.n < 2:
        return fmt_num(st.mean, 3)
    lo, hi = st.t_interval()
    return f"{fmt_num(st.mean, 3)} [{fmt_num(lo, 3)}, {fmt_num(hi, 3)}]"


def render_markdown(runs: Runs) -> str:
    """The tool-call report as Markdown (per system x task table, failures, speed ratios)."""
    rows = cell_rows(runs)
    types = system_types(runs)
    cells = per_task(rows)
    names = ", ".join(f"`{p.name}`" for p in _runs(runs))
    lines = [
        "# Tool calls (BFCL)",
        "",
        f"Run{'s' if len(_runs(runs)) > 1 else ''}: {names}. Definitions (reports/toolcalls.py):",
        "",
        __doc__.split("\n\n")[2].strip(),
        "",
    ]
    lines += [
        "## Accuracy and speed per system and task (mean [95% t-interval] over seeds)",
        "",
        "| system | type | task | seeds | accuracy | s/item | NFE/item | tokens out/item |",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for (s, t), cs in sorted(cells.items()):
        lines.append(
            f"| {s} | {types.get(s, '?')} | {t} | {len(cs)} | {_ci(_stat([c.accuracy for c in cs]))} | "
            f"{fmt_num(_stat([c.seconds_per_item for c in cs]).mean, 2)} | "
            f"{fmt_num(_stat([c.nfe_per_item for c in cs]).mean, 1)} | "
            f"{fmt_num(_stat([c.tokens_out_per_item for c in cs]).mean, 1)} |"
        )
    failures = [m for m in TABLE_FAILURES if any(m in c.metrics for c in rows)]
    if failures:
        lines += [
            "",
            "## Failure taxonomy (share of scored samples, mean over seeds)",
            "",
            "| system | task | " + " | ".join(m.removeprefix("failure_") for m in failures) + " |",
            "|---|---|" + "---:|" * len(failures),
        ]
        for (s, t), cs in sorted(cells.items()):
            vals = [fmt_num(_stat([c.metrics.get(m, math.nan) for c in cs]).mean, 2) for m in failures]
            lines.append(f"| {s} | {t} | " + " | ".join(vals) + " |")
    mt = [m for m in ("rounds_per_solved", "tool_calls_per_solved", "rounds_per_item", "tool_calls_per_item",
                      "tool_error_rate") if any(m in c.metrics for c in rows)]  # fmt: skip
    if mt:
        lines += [
            "",
            "## Multi-turn effort (mean over seeds)",
            "",
            "| system | task | " + " | ".join(mt) + " |",
        ]
        lines.append("|---|---|" + "---:|" * len(mt))
        for (s, t), cs in sorted(cells.items()):
            if any(m in c.metrics for c in cs for m in mt):
                vals = [fmt_num(_stat([c.metrics.get(m, math.nan) for c in cs]).mean, 2) for m in mt]
                lines.append(f"| {s} | {t} | " + " | ".join(vals) + " |")
    ratios = speed_ratios(rows, types)
    lines += ["", "## Diffusion against AR: speed ratio (AR s/item over DLM s/item; > 1: DLM faster)", ""]
    if not ratios:
        lines.append("No task has both a diffusion and an AR system.")
    else:
        lines += [
            "| DLM | AR | task | ratio | DLM acc | AR acc | paired p | matched |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        for r in ratios:
            lines.append(
                f"| {r.dlm} | {r.ar} | {r.task} | {fmt_num(r.ratio, 2)} | {fmt_num(r.dlm_accuracy, 3)} | "
                f"{fmt_num(r.ar_accuracy, 3)} | {fmt_num(r.p_value, 3)} | {'yes' if r.matched else 'no'} |"
            )
        lines.append("")
        for d, a in sorted({(r.dlm, r.ar) for r in ratios}):
            g, k, n = headline(ratios, d, a)
            if k:
                lines.append(
                    f"- {d} vs {a}: {fmt_num(g, 2)}x (geometric mean over the {k} of {n} tasks at matched accuracy)"
                )
            else:
                lines.append(f"- {d} vs {a}: no task at matched accuracy (of {n}); no headline ratio")
    return "\n".join(lines) + "\n"


def accuracy_vs_seconds(runs: Runs, base: Path) -> list[Path]:
    """One point per system: macro-mean accuracy against seconds per item (log), ±1 s.e. over tasks' means."""
    from reports.plots import _pyplot, _save

    rows = cell_rows(runs)
    if not rows:
        return []
    types = system_types(runs)
    by_system: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for (s, _t), cs in per_task(rows).items():
        by_system[s].append(
            (_stat([c.accuracy for c in cs]).mean, _stat([c.seconds_per_item for c in cs]).mean)
        )
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.0, 3.8))
    for i, (s, pts) in enumerate(sorted(by_system.items())):
        acc, secs = _stat([p[0] for p in pts]), _stat([p[1] for p in pts])
        dlm = types.get(s) in DLM_TYPES
        ax.errorbar(
            max(secs.mean, 1e-4), acc.mean,
            yerr=0.0 if math.isnan(acc.sem) else acc.sem,
            fmt="s" if dlm else "o", color="#C44E52" if dlm else "#4C72B0", capsize=3,
        )  # fmt: skip
        # labels alternate above and below their point: systems of one family often sit on top of
        # each other (same speed, same accuracy), and their names must stay readable
        ax.annotate(
            s,
            (max(secs.mean, 1e-4), acc.mean),
            textcoords="offset points",
            xytext=(6, 5 if i % 2 == 0 else -11),
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_xlabel("seconds per item (log scale; lower is faster)")
    ax.set_ylabel("accuracy (macro mean over tasks)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Tool calls: accuracy against speed (squares: diffusion)", fontsize=10)
    return _save(fig, base)


def write(runs: Runs, out: Path | str | None = None) -> list[Path]:
    """OUT/toolcalls.md and OUT/plots/toolcall_accuracy_vs_seconds (PNG and PDF); OUT defaults to the
    (first) run directory."""
    target = Path(out) if out is not None else _runs(runs)[0]
    target.mkdir(parents=True, exist_ok=True)
    md = target / "toolcalls.md"
    md.write_text(render_markdown(runs))
    return [md, *accuracy_vs_seconds(runs, target / "plots" / "toolcall_accuracy_vs_seconds")]


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m reports.toolcalls", description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories, read as one")
    ap.add_argument("--out", type=Path, help="where toolcalls.md and plots/ go (default: the first run)")
    args = ap.parse_args(argv)
    try:
        for p in write(args.runs, args.out):
            print(p)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover - thin CLI
    raise SystemExit(main())
