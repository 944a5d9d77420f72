"""`bench validate SUITE`: make every check `bench run` makes, without running anything.

The checks are `bench.checks.prepare_suite`, the same function `run --dry-run` and `run` call; every
problem is printed, each with file, line and key.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="check a suite file as a run would (keys, names, models, task data)")
    p.add_argument("suite")
    p.add_argument("--profile", help="role->model profile (overrides the suite's)")
    p.add_argument("--data-dir", help="dataset directory (default $BENCH_DATA_DIR)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bench.checks import prepare_suite

    overrides = {"profile": args.profile} if args.profile else None
    sf = prepare_suite(args.suite, overrides, data_dir=args.data_dir)
    s = sf.suite
    n = len(s.systems) * len(s.tasks) * len(s.seed_list())
    print(
        f"{sf.path}: ok ({len(s.systems)} systems x {len(s.tasks)} tasks x {len(s.seed_list())} seeds "
        f"= {n} cells, {s.samples} samples each, {len(s.metric_list())} metrics, {len(s.expect)} expectations)"
    )
    return 0
