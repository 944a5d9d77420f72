"""The issue-10 comparison of a `suites/aod.yaml` run: paired tests and what each search kept.

    python -m benchmarks.aod.comparison RUN_DIR [RUN_DIR ...] [--reference llada] [--md out.md] [--json out.json]

Several run directories are read as one when their cells do not overlap (a cell in two runs is an
error naming both): re-running only the systems a change touched, next to an earlier run of the others.
`RUN_DIR=sys1,sys2` takes only those systems from that run (the earlier run's stale AoD cells stay out).

What it reports, per task:
- mean and standard deviation over seeds of each metric, per system;
- paired tests (t and Wilcoxon over seeds, `bench.stats.paired_test`) of every system against the
  reference system, and of `aod` against `aod-norl` (the RL part) and `aod-scalar` (verbal feedback),
  with Holm-adjusted t p-values over all tests of the table (there are dozens of tests; a raw p below
  0.05 is expected in some of them by chance alone);
- from the stored samples and traces, why the numbers are what they are: in how many cells the final
  samples are the reference's own records (the search kept no edit that changed them), and for the AoD
  family how many candidate edits were kept and where they came from (agent reply or template fallback);
- round by round, whether each learned edit policy (`aod`, `aod` under another name with other
  params, or a policy with a prior learned across cells) drew other kinds than `aod-norl`'s frozen
  uniform one (they share the seeded draws), and what it ended up preferring;
- the incumbent's reward and `tsr` on each round's fresh batch, per system, paired by round (how fast
  each search got where it ended).

Everything is read from the run directory (`reports.compare.compare_systems` for the pairs), so the
tables in docs/systems-aod.md can be regenerated from a run without a model.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

from bench.stats import Stat
from metrics.rubrics import failed_names
from reports.compare import Comparison, compare_frame
from reports.fmt import fmt_num, fmt_p

_f = partial(fmt_num, decimals=3)
_p = partial(fmt_p, spec=".3f", below="0.001")

METRICS = ("tsr", "diversity", "field_overlap", "novelty")
PAIRS_AGAINST_AOD = ("aod-norl", "aod-scalar")


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979): controls the family-wise error rate at any dependence.
    NaN p-values (an undefined test) stay NaN and do not count towards the family size."""
    finite = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    m = len(finite)
    out = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


Runs = Path | list[Path]


def _runs(runs: Runs) -> list[Path]:
    return list(runs) if isinstance(runs, list) else [runs]


def _split(run: Path) -> tuple[Path, set[str] | None]:
    """`DIR=sys1,sys2` -> (DIR, {sys1, sys2}); a plain directory takes every system."""
    text = str(run)
    if "=" in text and not Path(text).exists():
        path, names = text.rsplit("=", 1)
        return Path(path), {n.strip() for n in names.split(",") if n.strip()}
    return run, None


def finished_cells(runs: Runs) -> dict[tuple[str, str, int], Path]:
    """(system, task, seed) -> cell directory, for finished cells (read through the run store, so a
    damaged cell is skipped with its warning). A cell in two runs is an error."""
    from bench.errors import BenchError
    from bench.store import RunStore

    out: dict[tuple[str, str, int], Path] = {}
    where: dict[tuple[str, str, int], Path] = {}
    for run in _runs(runs):
        run, only = _split(run)
        for c in RunStore(run).iter_cells():
            if only is not None and c.key.system not in only:
                continue
            key = (c.key.system, c.key.task, int(c.key.seed))
            if key in where:
                raise BenchError(
                    f"cell {key[0]}/{key[1]}/seed-{key[2]} is in both {where[key]} and {run}; "
                    "combine runs whose cells do not overlap"
                )
            where[key] = run
            if c.status == "ok":
                out[key] = c.path
    return out


def runs_frame(runs: Runs) -> Any:
    """The runs' tidy frames (`reports.aggregate.load_run`) as one; `finished_cells` rejects overlaps first."""
    import pandas as pd

    from reports.aggregate import load_run

    finished_cells(runs)
    frames = []
    for run in _runs(runs):
        path, only = _split(run)
        frame = load_run(path)
        frames.append(frame if only is None else frame[frame["system"].isin(only)])
    return pd.concat(frames, ignore_index=True)


def _texts(cell: Path) -> list[str]:
    return [json.loads(line)["text"] for line in (cell / "samples.jsonl").read_text().splitlines() if line]


def _events(cell: Path, event: str) -> list[dict[str, Any]]:
    """A cell's trace events of one kind, in order; none for a cell without a trace."""
    trace = cell / "trace.jsonl"
    events = (json.loads(line) for line in trace.read_text().splitlines() if line) if trace.exists() else ()
    return [ev for ev in events if ev.get("event") == event]


def _iterations(cell: Path, role: str) -> list[dict[str, Any]]:
    """A cell's AoD-family iteration events of one role (`candidate`: one per round, `incumbent`: the
    incumbent's fresh batch of each round), in order."""
    return [ev for ev in _events(cell, "aod_iteration") if ev.get("role") == role]


def candidate_events(cell: Path) -> list[dict[str, Any]]:
    return _iterations(cell, "candidate")


def search_summary(run: Runs, reference: str) -> list[dict[str, Any]]:
    """Per (system, task): cells, cells whose final samples equal the reference's, and for the AoD family
    candidate edits, kept edits and fallbacks, from the traces."""
    cells = finished_cells(run)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for (system, task, seed), cell in sorted(cells.items()):
        row = rows.setdefault(
            (system, task),
            {"system": system, "task": task, "cells": 0, "same_as_reference": 0, "edits": 0, "kept": 0},
        )
        row["cells"] += 1
        ref = cells.get((reference, task, seed))
        if system == reference:
            row["same_as_reference"] = None
        elif ref is not None and _texts(cell) == _texts(ref):
            row["same_as_reference"] += 1
        sources: Counter[str] = row.setdefault("edit_sources", Counter())
        kept_kinds: Counter[str] = row.setdefault("kept_kinds", Counter())
        last_probs: dict[str, float] | None = None
        for ev in candidate_events(cell):
            row["edits"] += 1
            sources[str(ev.get("edit_source"))] += 1
            probs = (ev.get("policy") or {}).get("probs") if isinstance(ev.get("policy"), dict) else None
            if probs:
                last_probs = probs
            if ev.get("accepted"):
                row["kept"] += 1
                kept_kinds[str(ev.get("edit_kind"))] += 1
        if last_probs:
            # how far the learned policy over edit kinds got from uniform by the cell's last update
            drift = max(abs(p - 1 / len(last_probs)) for p in last_probs.values())
            row["policy_drift_max"] = max(row.get("policy_drift_max", 0.0), drift)
    out = []
    for row in rows.values():
        row["edit_sources"] = dict(row["edit_sources"])
        row["kept_kinds"] = dict(row["kept_kinds"])
        out.append(row)
    return out


def check_failures(run: Runs) -> list[dict[str, Any]]:
    """Per (system, task): records scored, and the share of them failing each code check (`check:` entries
    of the samples' `tsr_failures`), commonest first. This is the per-question view `tsr` hides: a record
    passes `tsr` only when every check passes."""
    rows = []
    by: dict[tuple[str, str], tuple[int, Counter[str]]] = {}
    for (system, task, _seed), cell in sorted(finished_cells(run).items()):
        n, fails = by.get((system, task), (0, Counter()))
        for line in (cell / "samples.jsonl").read_text().splitlines():
            if not line:
                continue
            scored = json.loads(line).get("scored") or {}
            n += 1
            fails.update(failed_names(scored.get("tsr_failures") or []))
        by[(system, task)] = (n, fails)
    for (system, task), (n, fails) in by.items():
        shares = {k: v / n for k, v in fails.most_common()} if n else {}
        rows.append({"system": system, "task": task, "records": n, "failing": shares})
    return rows


def edit_kinds(run: Runs) -> list[dict[str, Any]]:
    """Per (task, edit kind), over the AoD family's candidate edits: how many, the share that left the
    candidate batch's reward exactly equal to the incumbent's (the edit did not reach the generator's
    records), the mean paired reward difference, and how many were kept."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for (_system, task, _seed), cell in sorted(finished_cells(run).items()):
        for ev in candidate_events(cell):
            d = ev.get("paired_difference")
            row = acc.setdefault(
                (task, str(ev.get("edit_kind"))), {"n": 0, "unchanged": 0, "diffs": [], "kept": 0}
            )
            row["n"] += 1
            if isinstance(d, int | float) and math.isfinite(d):
                row["diffs"].append(float(d))
                row["unchanged"] += abs(d) < 1e-12
            row["kept"] += bool(ev.get("accepted"))
    return [
        {
            "task": task,
            "kind": kind,
            "n": r["n"],
            "unchanged": r["unchanged"] / r["n"],
            "mean_difference": Stat.of(r["diffs"]).mean,
            "kept": r["kept"],
        }
        for (task, kind), r in sorted(acc.items())
    ]


def learned_policy_systems(run: Runs) -> list[str]:
    """Systems whose traces show a learned edit policy: candidate events whose policy update is not the
    frozen one of `aod-norl` (`aod`, and `aod` with other params under another name), or a start event
    with a `policy_prior` (a policy learned across cells, frozen or not)."""
    found: list[str] = []
    for (system, _task, _seed), cell in sorted(finished_cells(run).items()):
        if system in found:
            continue
        updates = [ev.get("policy") for ev in candidate_events(cell)]
        learned = any(isinstance(u, dict) and "frozen" not in u and u.get("probs") for u in updates)
        if learned or any(ev.get("policy_prior") for ev in _events(cell, "aod_start")):
            found.append(system)
    return found


def policy_divergence(
    run: Runs, learned: tuple[str, ...] | None = None, frozen: str = "aod-norl"
) -> list[dict[str, Any]]:
    """Per learned-policy system (default: every one in the run) and task, over the seeds it shares with
    `frozen`: does the learned edit policy draw differently from the frozen uniform one? Both draw each
    round's kind from the same seeded uniform number, so they can only differ once the learned
    probabilities have moved far enough to cross a draw.

    Reports the rounds compared, the share of rounds where both drew the same kind, the first round where
    they differed (per seed; None when never), cells whose final records are identical, and the learned
    policy's final probabilities averaged over seeds (what it learned to prefer)."""
    cells = finished_cells(run)
    out = []
    for system in learned if learned is not None else learned_policy_systems(run):
        out += _divergence_of(cells, system, frozen)
    return out


def _divergence_of(
    cells: dict[tuple[str, str, int], Path], learned: str, frozen: str
) -> list[dict[str, Any]]:
    out = []
    for task in sorted({t for (s, t, _) in cells if s == learned}):
        seeds = sorted(k for (s, t, k) in cells if s == learned and t == task and (frozen, t, k) in cells)
        if not seeds:
            continue
        rounds = same = identical = 0
        first: list[int | None] = []
        finals: list[dict[str, float]] = []
        for seed in seeds:
            a, b = cells[(learned, task, seed)], cells[(frozen, task, seed)]
            ca = candidate_events(a)
            ka = [str(ev.get("edit_kind")) for ev in ca]
            kb = [str(ev.get("edit_kind")) for ev in candidate_events(b)]
            pairs = list(zip(ka, kb, strict=False))
            rounds += len(pairs)
            same += sum(x == y for x, y in pairs)
            first.append(next((i for i, (x, y) in enumerate(pairs) if x != y), None))
            identical += _texts(a) == _texts(b)
            probs = [
                ev["policy"]["probs"]
                for ev in ca
                if isinstance(ev.get("policy"), dict) and ev["policy"].get("probs")
            ]
            if probs:
                finals.append(probs[-1])
        kinds = sorted({k for p in finals for k in p})
        out.append(
            {
                "system": learned,
                "task": task,
                "seeds": len(seeds),
                "rounds": rounds,
                "same_kind": same / rounds if rounds else math.nan,
                "first_difference": first,
                "identical_records": identical,
                "final_probs": {k: sum(p.get(k, 0.0) for p in finals) / len(finals) for k in kinds},
            }
        )
    return out


def incumbent_curve(
    run: Runs, systems: tuple[str, ...] | None = None, metric: str = "tsr"
) -> list[dict[str, Any]]:
    """Per (task, system, round): the mean over seeds of the incumbent's reward and `metric` on that
    round's fresh batch (the `incumbent` trace events; default: every system that has them, i.e. the AoD
    family). Every system of the family draws the same round seeds, so the curves are paired round by
    round: a policy that learns which edit kind pays should reach a better incumbent in fewer rounds,
    even where both end at the same place."""
    acc: dict[tuple[str, str, int], dict[str, list[float]]] = {}
    for (system, task, _seed), cell in sorted(finished_cells(run).items()):
        if systems is not None and system not in systems:
            continue
        for ev in _iterations(cell, "incumbent"):
            row = acc.setdefault((task, system, int(ev["round"])), {"reward": [], metric: []})
            row["reward"].append(float(ev["reward"]))
            value = (ev.get("metrics") or {}).get(metric)
            if isinstance(value, int | float) and math.isfinite(value):
                row[metric].append(float(value))
    return [
        {
            "task": task,
            "system": system,
            "round": rnd,
            "seeds": len(r["reward"]),
            "reward": Stat.of(r["reward"]).mean,
            metric: Stat.of(r[metric]).mean if r[metric] else math.nan,
        }
        for (task, system, rnd), r in sorted(acc.items())
    ]


def metric_table(run: Runs, metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    """Mean and sample standard deviation over seeds per (system, task, metric)."""
    frame = runs_frame(run)
    ok = frame[(frame["status"] == "ok") & frame["metric"].isin(metrics)]
    rows = []
    for (system, task, metric), g in ok.groupby(["system", "task", "metric"], sort=False):
        s = Stat.of(float(v) for v in g["value"])
        rows.append(
            {"system": system, "task": task, "metric": metric, "n": s.n, "mean": s.mean, "std": s.std}
        )
    return rows


def paired_rows(run: Runs, reference: str, metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every system against `reference`, then `aod` against each of PAIRS_AGAINST_AOD, and every other
    learned-policy system (`learned_policy_systems`) against `aod-norl`; Holm over all."""
    frame = runs_frame(run)
    where = ", ".join(str(r) for r in _runs(run))
    rows: list[tuple[str, Comparison]] = [
        (reference, c) for c in compare_frame(frame, reference, where) if c.metric in metrics
    ]
    present = {c.system for _, c in rows} | {reference}
    # A pair already tested against the reference is not tested again: listed twice, it would count
    # twice in Holm's family (`--reference aod-norl`).
    for other in PAIRS_AGAINST_AOD:
        if other != reference and other in present and "aod" in present:
            rows += [
                (other, c)
                for c in compare_frame(frame, other, where)
                if c.metric in metrics and c.system == "aod"
            ]
    others = [x for x in learned_policy_systems(run) if x != "aod" and x in present]
    if others and "aod-norl" in present and reference != "aod-norl":
        rows += [
            ("aod-norl", c)
            for c in compare_frame(frame, "aod-norl", where)
            if c.metric in metrics and c.system in others
        ]
    adjusted = holm([c.p_ttest for _, c in rows])
    return [
        {"against": ref, **c.to_json(), "p_ttest_holm": None if math.isnan(p) else p}
        for (ref, c), p in zip(rows, adjusted, strict=True)
    ]


def _same(x: int | None) -> str:
    return "(reference)" if x is None else str(x)


def _curve_table(curve: list[dict], every: int = 6, metric: str = "tsr") -> list[str]:
    """The incumbent's fresh-batch reward and `metric` at round 1, every `every`-th round and the last."""
    systems = list(dict.fromkeys(r["system"] for r in curve))
    index = {(r["task"], r["system"], r["round"]): r for r in curve}
    lines = [
        "",
        "The incumbent on each round's fresh batch (mean over seeds; every system draws the same round "
        f"seeds), reward / {metric}:",
        "",
        "| task | round | " + " | ".join(systems) + " |",
        "|---|---:|" + "---:|" * len(systems),
    ]
    for task in dict.fromkeys(r["task"] for r in curve):
        last = max(r["round"] for r in curve if r["task"] == task)
        for rnd in sorted({1, last, *range(every, last + 1, every)}):
            cells = [index.get((task, system, rnd)) for system in systems]
            vals = [f"{_f(c['reward'])} / {_f(c.get(metric))}" if c else "–" for c in cells]
            lines.append(f"| {task} | {rnd} | " + " | ".join(vals) + " |")
    return lines


def render_markdown(
    means: list[dict],
    pairs: list[dict],
    search: list[dict],
    metrics: tuple[str, ...],
    failures: list[dict] | None = None,
    edit_rows: list[dict] | None = None,
    divergence: list[dict] | None = None,
    curve: list[dict] | None = None,
) -> str:
    lines: list[str] = []
    tasks = list(dict.fromkeys(r["task"] for r in means))
    systems = list(dict.fromkeys(r["system"] for r in means))
    index = {(r["system"], r["task"], r["metric"]): r for r in means}
    for task in tasks:
        lines += [f"**{task}** (mean ± sd over seeds; n = seeds)", ""]
        lines.append("| system | n | " + " | ".join(metrics) + " |")
        lines.append("|---|---:|" + "---:|" * len(metrics))
        for system in systems:
            cells = [index.get((system, task, m)) for m in metrics]
            if not any(cells):
                continue
            n = max(c["n"] for c in cells if c)
            vals = [f"{_f(c['mean'])} ± {_f(c['std'])}" if c else "–" for c in cells]
            lines.append(f"| {system} | {n} | " + " | ".join(vals) + " |")
        lines.append("")
    lines += [
        "Paired tests (B − A over shared seeds; p(t) paired t, p(W) Wilcoxon signed-rank, "
        "p(t, Holm) adjusted over every row of this table):",
        "",
        "| task | A | B | metric | n | B − A | p(t) | p(W) | p(t, Holm) |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in pairs:
        lines.append(
            f"| {r['task']} | {r['against']} | {r['system']} | {r['metric']} | {r['n_shared']} | "
            f"{_f(r['diff'])} | {_p(r['p_ttest'])} | {_p(r['p_wilcoxon'])} | {_p(r['p_ttest_holm'])} |"
        )
    lines += [
        "",
        "What the searches kept (final samples equal to the reference's: the cell's records are the "
        "reference system's own, byte for byte; AoD family: candidate edits, kept edits, edit sources, and "
        "policy drift: the largest |p(kind) − 1/K| of the edit-kind policy at a cell's last update, over "
        "cells):",
        "",
        "| system | task | cells | same as reference | candidate edits | kept | sources | kept kinds | "
        "policy drift |",
        "|---|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in search:
        src = ", ".join(f"{k} {v}" for k, v in sorted(r["edit_sources"].items())) or "–"
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["kept_kinds"].items())) or "–"
        lines.append(
            f"| {r['system']} | {r['task']} | {r['cells']} | {_same(r['same_as_reference'])} | {r['edits']} | "
            f"{r['kept']} | {src} | {kinds} | {_f(r.get('policy_drift_max'))} |"
        )
    if edit_rows:
        lines += [
            "",
            "Candidate edits of the AoD family by kind (unchanged: the candidate's batch reward equals the "
            "incumbent's on the same seed and sample indices, i.e. the edit did not change the records):",
            "",
            "| task | edit kind | edits | unchanged | mean paired difference | kept |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for r in edit_rows:
            lines.append(
                f"| {r['task']} | {r['kind']} | {r['n']} | {r['unchanged']:.2f} | "
                f"{_f(r['mean_difference'])} | {r['kept']} |"
            )
    if divergence:
        lines += [
            "",
            "The RL part: each system with a learned edit policy against `aod-norl` (frozen uniform policy, "
            "the same seeded draws) round by round (same kind: the share of rounds where both drew the same "
            "edit kind; first difference: the first round, from 0, where they did not, per seed, '–' for "
            "never; identical records: cells whose final records are `aod-norl`'s):",
            "",
            "| system | task | seeds | rounds | same kind | first difference | identical records | "
            "learned policy at the end |",
            "|---|---|---:|---:|---:|---|---:|---|",
        ]
        for r in divergence:
            first = ", ".join("–" if i is None else str(i) for i in r["first_difference"])
            probs = ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(r["final_probs"].items(), key=lambda kv: -kv[1])
            )
            lines.append(
                f"| {r['system']} | {r['task']} | {r['seeds']} | {r['rounds']} | {_f(r['same_kind'], decimals=2)} | {first} | "
                f"{r['identical_records']} | {probs or '–'} |"
            )
    if curve:
        lines += _curve_table(curve)
    if failures:
        lines += [
            "",
            "Share of records failing each code check (a record passes `tsr` only when none fails):",
            "",
            "| system | task | records | failing checks (share of records) |",
            "|---|---|---:|---|",
        ]
        for r in failures:
            shares = ", ".join(f"{k} {v:.2f}" for k, v in r["failing"].items()) or "none"
            lines.append(f"| {r['system']} | {r['task']} | {r['records']} | {shares} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, nargs="+", help="run directories, read as one (cells must not overlap)")
    ap.add_argument("--reference", default="llada")
    ap.add_argument("--metrics", default=",".join(METRICS))
    ap.add_argument("--md", type=Path, help="write the Markdown tables here (default: print them)")
    ap.add_argument("--json", type=Path, help="write every row as JSON here")
    args = ap.parse_args(argv)
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    means = metric_table(args.run, metrics)
    pairs = paired_rows(args.run, args.reference, metrics)
    search = search_summary(args.run, args.reference)
    failures = check_failures(args.run)
    kinds = edit_kinds(args.run)
    divergence = policy_divergence(args.run)
    curve = incumbent_curve(args.run)
    text = render_markdown(means, pairs, search, metrics, failures, kinds, divergence, curve)
    if args.md:
        args.md.write_text(text)
    else:
        print(text, end="")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "means": means,
                    "pairs": pairs,
                    "search": search,
                    "check_failures": failures,
                    "edit_kinds": kinds,
                    "policy_divergence": divergence,
                    "incumbent_curve": curve,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
