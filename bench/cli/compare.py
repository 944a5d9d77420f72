"""`bench compare RUN_A RUN_B [--json]`: paired per-seed comparison with p-values and effect sizes.

`bench compare RUN --against SYSTEM` pairs the systems of one run instead: each against SYSTEM, by
(task, seed)."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="paired per-seed comparison of two runs (t-test, Wilcoxon, d_z)")
    p.add_argument("run_a", help="run directory A (reference)")
    p.add_argument("run_b", nargs="?", help="run directory B (compared against A: differences are B - A)")
    p.add_argument(
        "--against",
        metavar="SYSTEM",
        help="one run: compare its other systems with SYSTEM, paired by (task, seed)",
    )
    p.add_argument("--systems", help="with --against: comma-separated systems to compare (default: all)")
    p.add_argument("--metrics", help="comma-separated metrics to show (default: all shared)")
    p.add_argument("--json", action="store_true", help="print JSON rows instead of a text table")
    p.set_defaults(func=run)


def _seeds(run_dir: str) -> list[int]:
    from bench.store import RunStore

    return sorted({c.key.seed for c in RunStore(run_dir).iter_cells() if c.status == "ok"})


def _nothing_shared(run_a: str, run_b: str, rows: list) -> str:
    """Why no pair could be formed: no shared (system, task, metric), or no shared seed."""
    if not rows:
        return f"{run_a} and {run_b} share no (system, task, metric) with finished cells; nothing to compare"
    sa, sb = _seeds(run_a), _seeds(run_b)
    shared = sorted(set(sa) & set(sb))
    if not shared:
        return (
            f"no shared seed: {run_a} has seeds {', '.join(map(str, sa)) or 'none'}, {run_b} has seeds "
            f"{', '.join(map(str, sb)) or 'none'}; a paired comparison needs the same seeds in both runs"
        )
    return f"no (system, task, metric) has a finite value in both runs for the shared seeds {shared}"


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bench.errors import BenchError
    from reports.compare import compare_runs, render_comparison

    if (args.run_b is None) == (args.against is None):
        raise BenchError("give two runs (RUN_A RUN_B) or one run and --against SYSTEM")
    if args.systems and args.against is None:
        raise BenchError("--systems selects the systems compared with --against SYSTEM; give --against")
    for r in (args.run_a, args.run_b):
        if r is not None and not (Path(r) / "cells").is_dir():
            raise BenchError(f"{r}: not a run directory (no cells/)")
    if args.against is not None:
        from reports.compare import compare_systems

        try:
            rows = compare_systems(args.run_a, args.against)
        except ValueError as e:
            raise BenchError(str(e)) from None
        if args.systems:
            chosen = {s.strip() for s in args.systems.split(",") if s.strip()}
            rows = [r for r in rows if r.system in chosen]
        if not any(r.n_shared for r in rows):
            raise BenchError(f"{args.run_a}: no system shares a finished (task, seed) with {args.against!r}")
        label_a, label_b = f"{args.run_a} system {args.against}", f"{args.run_a} (each row's system)"
    else:
        rows = compare_runs(args.run_a, args.run_b)
        if not any(r.n_shared for r in rows):
            raise BenchError(_nothing_shared(args.run_a, args.run_b, rows))
        label_a, label_b = args.run_a, args.run_b
    if args.metrics:
        wanted = {m.strip() for m in args.metrics.split(",") if m.strip()}
        rows = [r for r in rows if r.metric in wanted]
    if args.json:
        json.dump([r.to_json() for r in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_comparison(rows, label_a, label_b))
    return 0
