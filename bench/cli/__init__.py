"""`bench` command line. Each sub-command lives in its own module exposing `register(subparsers)`.

A module's `register` adds its parser and sets `func=<callable(args) -> int>`. Command modules import
heavy things only inside `func`, so `bench --help` and `bench list` stay fast.
"""

from __future__ import annotations

import os

# OpenMP worker threads (torch, llama.cpp) spin while idle by default; on a small shared CPU that starves
# every other thread. Set before any runtime loads; a user's explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import importlib  # noqa: E402
import sys  # noqa: E402

from bench.errors import BenchError  # noqa: E402

COMMAND_MODULES = (
    "run",
    "validate",
    "list_cmd",
    "data",
    "score",
    "report",
    "compare",
    "check",
    "baseline",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="aod-bench: evaluate structured (JSON) generation by diffusion and AR LMs"
    )
    from bench import __version__

    parser.add_argument("--version", action="version", version=f"aod-bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"bench.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bench.cli.{name}":
                continue
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BenchError as exc:
        from bench.problems import printable

        # one `error:` line per problem (a suite reports all of them at once); printable() because a
        # suite may hold NUL or lone surrogates, which a terminal or a UTF-8 stream cannot take raw
        for line in str(exc).splitlines() or [type(exc).__name__]:
            print(f"error: {printable(line)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
