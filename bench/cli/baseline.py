"""`bench baseline RUN_DIR -o BASELINE.json`: freeze a run's per-cell means and seed variance for `bench check`."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="write a regression baseline (means, std, n per cell) from a run")
    p.add_argument("run_dir", help="run directory")
    p.add_argument("-o", "--out", required=True, help="baseline JSON file to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bench.errors import BenchError
    from reports.check import write_baseline

    if not (Path(args.run_dir) / "cells").is_dir():
        raise BenchError(f"{args.run_dir}: not a run directory (no cells/)")
    b = write_baseline(args.run_dir, args.out)
    print(f"wrote {args.out}: {len(b['entries'])} (system, task, metric) entries from run {b['run_id']}")
    return 0
