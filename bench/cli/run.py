"""`bench run SUITE`: run (or resume) a suite, print the report and a pytest-like closing line."""

from __future__ import annotations

import argparse
import sys


def _csv(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="run a suite (systems x tasks x seeds) and report")
    p.add_argument("suite", help="suite YAML file")
    p.add_argument("--profile", help="role->model profile (overrides the suite's)")
    p.add_argument("--seeds", type=int, help="number of seeds (0..N-1), overrides the suite")
    p.add_argument("--samples", type=int, help="records per cell, overrides the suite")
    p.add_argument("--systems", type=_csv, help="comma-separated subset of the suite's systems")
    p.add_argument("--tasks", type=_csv, help="comma-separated subset of the suite's tasks")
    p.add_argument("--executor", choices=["local", "inline", "ray"], default="local")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes (0 = run in this process; default: the profile's, 2 for embedded, 1 for paper)",
    )
    p.add_argument("--out", help="run directory (default runs/<suite>-<timestamp>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run, skipping finished cells")
    p.add_argument("--data-dir", help="dataset directory (default $BENCH_DATA_DIR)")
    p.add_argument(
        "--cache-dir", help="model/call cache directory (default $BENCH_CACHE_DIR or ~/.cache/aod-bench)"
    )
    p.add_argument("--no-cache", action="store_true", help="do not read or write the call cache")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--portable-kernels",
        action="store_true",
        help="torch, MKL, oneDNN and numpy kernels every x86-64 CPU with AVX2 runs alike, so trained "
        "DLMs get the same weights on any such machine (slower; bench/kernels.py)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the resolved plan; load no model")
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="when preflight finds models that cannot serve here, run the systems that can",
    )
    p.set_defaults(func=run)


def overrides_from_args(args: argparse.Namespace) -> dict:
    o: dict = {}
    if args.profile:
        o["profile"] = args.profile
    if args.seeds is not None:
        o["seeds"] = args.seeds
    if args.samples is not None:
        o["samples"] = args.samples
    return o


def run(args: argparse.Namespace) -> int:
    if args.portable_kernels:  # before anything loads torch; worker processes inherit the settings
        from bench import kernels

        kernels.request()
    from bench.runner import RunOptions, run_suite, summary_line

    overrides = overrides_from_args(args)
    if args.no_progress:
        import os

        os.environ["BENCH_PROGRESS"] = "0"  # worker processes inherit it (bench/progress.py)
    if args.dry_run:
        from bench.checks import prepare_suite, select
        from bench.dry_run import describe_plan

        # the same checks as a real run (bench.checks), then the plan of the selected systems and tasks
        sf = prepare_suite(
            args.suite, overrides, data_dir=args.data_dir, systems=args.systems, tasks=args.tasks
        )
        print(describe_plan(select(sf.suite, args.systems, args.tasks), sf.suite.profile))
        return 0
    opts = RunOptions(
        out=args.out,
        resume=args.resume,
        systems=args.systems,
        tasks=args.tasks,
        workers=args.workers,
        executor=args.executor,
        use_cache=not args.no_cache,
        cache_dir=args.cache_dir,
        data_dir=args.data_dir,
        progress=not args.no_progress,
        keep_going=args.keep_going,
    )
    result = run_suite(args.suite, overrides, opts)
    if result.report_md:  # report.md is written; the terminal gets the same content without Markdown
        from reports.terminal import render_report_text

        print(render_report_text(result.run_dir))
    for f in result.failed_cells:
        print(f"FAILED cell {f.key.label()}: {f.error}")
    for e in result.expectations:
        word = "SKIPPED" if e.skipped else "PASSED" if e.passed else "FAILED"
        print(f"{word} {e.text}  ({e.detail})")
    print(f"run: {result.run_dir}", file=sys.stderr)
    print(summary_line(result))
    return 0 if result.ok else 1
