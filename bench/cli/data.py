"""`bench data verify [DIR]` and `bench data fetch [--dest DIR]`: the dataset files behind the tasks."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("data", help="verify or fetch the dataset files the tasks read")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION", required=True)

    verify = sub.add_parser("verify", help="check the sha256 of every known dataset file")
    verify.add_argument(
        "dir",
        nargs="?",
        default=None,
        help="data dir (default: --data-dir rules: $BENCH_DATA_DIR, else the cache)",
    )
    verify.set_defaults(func=run_verify)

    fetch = sub.add_parser("fetch", help="download the dataset files from their upstream repositories")
    fetch.add_argument("--dest", default=None, help="destination (default: ~/.cache/aod-bench/data)")
    fetch.add_argument(
        "--mirror",
        default=None,
        help="base URL replacing https://raw.githubusercontent.com ($BENCH_DATA_MIRROR)",
    )
    fetch.add_argument("--timeout", type=float, default=10.0, help="seconds per connection (default 10)")
    fetch.add_argument(
        "--all", action="store_true", help="also fetch files no task reads (other MultiWOZ dbs)"
    )
    fetch.set_defaults(func=run_fetch)


def _print_checks(checks: list) -> None:
    width = max(len(c.relpath) for c in checks)
    for c in checks:
        note = f"  ({c.note})" if c.note else ""
        print(f"{c.status:<10} {c.relpath:<{width}}{note}".rstrip())


def run_verify(args: argparse.Namespace) -> int:
    import sys

    from bench.errors import DataError
    from bench.tasks.datadir import resolve_data_dir
    from bench.tasks.fetch import FAILING, verify_dir

    try:
        root = resolve_data_dir(args.dir)
    except DataError as exc:  # nothing to verify is a failed verification (exit 1), not a usage error
        print(f"missing: {exc}", file=sys.stderr)
        return 1
    checks = verify_dir(root)
    print(f"data dir: {root}")
    _print_checks(checks)
    failed = [c for c in checks if c.status in FAILING]
    counts = {s: sum(1 for c in checks if c.status == s) for s in sorted({c.status for c in checks})}
    print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return 1 if failed else 0


def run_fetch(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bench.tasks.datadir import default_cache_dir
    from bench.tasks.fetch import UNVERIFIED, fetch

    dest = Path(args.dest).expanduser() if args.dest else default_cache_dir()
    print(f"fetching dataset files into {dest}")
    checks = fetch(dest, mirror=args.mirror, timeout=args.timeout, include_optional=args.all)
    _print_checks(checks)
    if any(c.status == UNVERIFIED for c in checks):
        print(
            "note: 'unverified' files have no pinned upstream sha256 (full SuperNI task files); see docs/tasks.md"
        )
    print(
        f"done: {len(checks)} files; use --data-dir {dest} or BENCH_DATA_DIR={dest} (the default cache needs neither)"
    )
    return 0
