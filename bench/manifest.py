"""The run manifest: what ran, on what, with which models and data, so every number has provenance."""

from __future__ import annotations

import getpass
import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from bench import __version__, kernels
from bench.hashing import stable_hash
from bench.types import JSON

PACKAGES = (
    "aod-bench",
    "numpy",
    "torch",
    "llama_cpp_python",
    "sentence-transformers",
    "transformers",
    "jsonschema",
    "pydantic",
    "sacrebleu",
    "rouge-score",
    "nltk",
    "openai",
    "outlines_core",
    "tokenizers",
)

# Keys whose values are secrets (an env var NAME such as api_key_env is fine and kept).
SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|passwd|^token$|access[_-]?token|authorization)$", re.I)


def git_info(path: Path) -> JSON:
    """Commit and dirty flag of the code that ran (the installed source tree), if it is a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit or None, "dirty": dirty if commit else None}


def package_versions() -> JSON:
    out: JSON = {"python": sys.version.split()[0], "aod_bench": __version__}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def redact(obj: Any) -> Any:
    """Drop values under keys that look like secrets, so a manifest never carries an API key."""
    if isinstance(obj, dict):
        return {k: ("<redacted>" if SECRET_KEY.search(str(k)) else redact(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def _served_by(suite: Any, roles: JSON) -> JSON:
    """Which model served each system, in words (bench/served.py); never fails a run."""
    try:
        from bench.served import served_by

        return served_by(suite, roles)
    except Exception as exc:  # pragma: no cover - a report detail must not stop a run
        return {"error": f"{type(exc).__name__}: {exc}"}


def planned_cells(previous: JSON, jobs: list[Any]) -> dict[str, str]:
    """Every cell the run has planned: this invocation's jobs (with their hashes) and, on a resume, the
    cells an earlier invocation planned that this one leaves out. A resume narrowed with `--systems` or
    `--tasks` must not make the run forget the rest of its plan: a later bare resume reads the plan to
    know what to finish, and the run counts as finished only when every planned cell is on disk."""
    earlier = previous.get("cells") if isinstance(previous.get("cells"), dict) else {}
    return {**earlier, **{job.key.label(): job.hash for job in jobs}}


def build_manifest(
    suite: Any,
    suite_path: Path,
    opts: Any,
    jobs: list[Any],
    roles: JSON,
    fingerprints: JSON,
    started: str,
    previous: JSON,
) -> JSON:
    suite_dump = suite.model_dump(mode="json")
    suite_dump["seeds"] = suite.seed_list()
    suite_dump["metrics"] = suite.metric_list()
    return redact(
        {
            "run_id": previous.get("run_id") or stable_hash({"suite": suite_dump, "started": started}, 12),
            "aod_bench_version": __version__,
            "suite_path": str(suite_path),
            "suite": suite_dump,
            "profile": suite.profile,
            "roles": roles,
            "served_by": _served_by(suite, roles),
            "cells": planned_cells(previous, jobs),
            "git": git_info(suite_path),
            "versions": package_versions(),
            "host": {
                "hostname": platform.node(),
                "platform": platform.platform(),
                "cpu_count": os.cpu_count(),
                "kernels": kernels.provenance(),  # trained weights depend on them (bench/kernels.py)
                "user": getpass.getuser() if hasattr(os, "getuid") else None,
            },
            "data_fingerprints": fingerprints,
            "data_dir": opts.data_dir or os.environ.get("BENCH_DATA_DIR"),
            "options": {"workers": opts.workers, "executor": opts.executor, "use_cache": opts.use_cache},
            "cache": {"enabled": opts.use_cache},
            "created": previous.get("created") or started,
            "resumed": ([*previous.get("resumed", []), started] if previous else []),
            "argv": sys.argv,
        }
    )
