"""`bench validate SUITE`: check a suite without running anything."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="validate a suite file (keys, names, expectations)")
    p.add_argument("suite")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bench.suite import load_suite

    sf = load_suite(args.suite)
    s = sf.suite
    n = len(s.systems) * len(s.tasks) * len(s.seed_list())
    print(
        f"{sf.path}: ok ({len(s.systems)} systems x {len(s.tasks)} tasks x {len(s.seed_list())} seeds "
        f"= {n} cells, {s.samples} samples each, {len(s.metric_list())} metrics, {len(s.expect)} expectations)"
    )
    return 0
