"""`bench check RUN_DIR --baseline BASELINE.json [--k 3] [--floor X] [--junit FILE]`: CI regression gate.

Exit status 0 when no gated metric regressed, 1 when one did (2 for usage errors, as every command).
"""

from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="fail when metrics regress beyond k standard errors of a baseline")
    p.add_argument("run_dir", help="run directory to check")
    p.add_argument("--baseline", required=True, help="baseline JSON written by `bench baseline`")
    p.add_argument("--k", type=float, default=3.0, help="tolerance in baseline standard errors (default 3)")
    p.add_argument("--floor", type=float, default=0.0, help="absolute tolerance floor (default 0)")
    p.add_argument(
        "--timing", action="store_true", help="also gate wall-clock metrics (seconds, records_per_s)"
    )
    p.add_argument("--junit", help="also write JUnit XML here")
    p.add_argument("-v", "--verbose", action="store_true", help="list passing and skipped entries too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bench.errors import BenchError
    from reports.check import check_run, read_baseline, render_check, write_junit

    if not (Path(args.run_dir) / "cells").is_dir():
        raise BenchError(f"{args.run_dir}: not a run directory (no cells/)")
    results = check_run(
        args.run_dir, read_baseline(args.baseline), k=args.k, floor=args.floor, timing=args.timing
    )
    sys.stdout.write(render_check(results, k=args.k, floor=args.floor, verbose=args.verbose))
    if args.junit:
        write_junit(results, args.junit)
    return 1 if any(r.status == "fail" for r in results) else 0
