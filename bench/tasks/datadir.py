"""Where dataset files live: an explicit argument, else $BENCH_DATA_DIR, else the user cache.

The cache (`~/.cache/aod-bench/data`, or `$XDG_CACHE_HOME/aod-bench/data`) is what `bench data fetch`
fills. The resolved directory uses the same layout as the upstream-format copies in the shared
datasets folder (`multiwoz_2.2/db/...`, `truthfulqa/...`, `self_instruct/...`,
`super_natural_instructions/tasks/...`).
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import DataError

ENV_VAR = "BENCH_DATA_DIR"


def default_cache_dir() -> Path:
    """The per-user cache that `bench data fetch` fills when no destination is given."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aod-bench" / "data"


def data_dir_origin(data_dir: str | Path | None) -> tuple[Path, str]:
    """Resolve the data dir and say where the choice came from (for error messages)."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser(), "--data-dir"
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser(), f"${ENV_VAR}"
    return default_cache_dir(), "the default cache"


def resolve_data_dir(data_dir: str | Path | None = None, *, must_exist: bool = True) -> Path:
    """The data directory to read; with `must_exist`, a missing one is a DataError that says what to do."""
    path, origin = data_dir_origin(data_dir)
    if must_exist and not path.is_dir():
        raise DataError(
            f"data dir {path} (from {origin}) does not exist. Point --data-dir or ${ENV_VAR} at a folder "
            "holding the dataset files, or run `bench data fetch` to download them into the default cache. "
            "The demo tasks (demo/*) need no data dir."
        )
    return path
