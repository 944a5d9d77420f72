"""What a dataset loader hands to the task builder, and the small helpers every loader shares.

A loader only knows its upstream file format: it turns files into JSON records plus the words a system
needs (instruction, rubric) and the hints schema derivation needs (which fields are categorical and
with which vocabulary). Splitting, schema derivation, validation and fingerprinting are done once, for
every family, in `bench.tasks.loading`, so no loader can get them subtly different.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.errors import BenchError, DataError
from bench.types import JSON


@dataclass(frozen=True)
class SourceFile:
    """One file a task was read from: its path relative to the data root and its bytes' identity.

    `data` is the raw bytes; they feed the fingerprint, so a task is identified by exactly what was read.
    """

    relpath: str
    data: bytes


@dataclass
class TaskSource:
    """The records of one task as its loader read them, before split and schema derivation.

    `categorical` maps a leaf path (keys joined by ".", "[]" for list items) to the dataset's own
    vocabulary of that field (MultiWOZ `possible_values`); `free_text` lists paths the dataset itself
    declares non-categorical, so no enum is inferred for them. `schema` is set only when the dataset
    ships its own schema (the demo), which then replaces derivation.
    """

    records: list[JSON]
    instruction: str
    rubric: tuple[str, ...]
    files: list[SourceFile]
    title: str
    categorical: dict[str, list[str]] = field(default_factory=dict)
    free_text: frozenset[str] = frozenset()
    schema: JSON | None = None
    meta: JSON = field(default_factory=dict)
    items: tuple[Any, ...] = ()  # per-item tasks (bench.types.TaskItem): records may then be empty


class TaskFamily(Protocol):
    """A loader for one dataset family. `variant` is the part of the task name after the family.

    `version` takes part in the fingerprint: bump it whenever the records a loader produces from the
    same bytes change (a field renamed, a cleaning rule added).
    """

    family: str
    version: str
    needs_data_dir: bool
    options_doc: dict[str, str]

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource: ...

    def variants(self, data_dir: Path | None) -> list[str]:
        """Concrete variants present in `data_dir` (for `list_tasks`)."""
        ...


# ------------------------------------------------------------------------------------------ helpers
def check_options(task: str, options: JSON, accepted: dict[str, str]) -> None:
    """Reject unknown option keys: a typo in a suite must not silently load different data."""
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        known = ", ".join(f"{k} ({v})" for k, v in sorted(accepted.items())) or "none"
        raise BenchError(f"task {task!r}: unknown option(s) {', '.join(unknown)}; accepted: {known}")


def read_source(data_dir: Path, relpath: str, task: str) -> SourceFile:
    """Read one dataset file's bytes, failing with a message that says how to get the file."""
    path = data_dir / relpath
    if not path.is_file():
        raise DataError(
            f"task {task!r} needs {relpath}, which is not in the data dir {data_dir} ({path} not found). "
            "Point --data-dir or $BENCH_DATA_DIR at a folder holding the dataset files, "
            "or run `bench data fetch` to fill the default cache."
        )
    return SourceFile(relpath, path.read_bytes())


def _nan_to_none(token: str) -> None:
    """`json` calls this for NaN/Infinity/-Infinity: upstream SuperNI has `"URL": [NaN]`."""
    return None


def decode_utf8(data: bytes, relpath: str) -> str:
    """UTF-8 text of a dataset file (a leading BOM dropped); other bytes fail naming file and offset.

    Why not guess an encoding: a re-encoded copy (latin-1, cp1252) is not the pinned upstream file, and
    `bench data verify` is the place to find out which file changed.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        offset = exc.start
        line = data.count(b"\n", 0, offset) + 1
        bad = data[offset : offset + 1].hex()
        raise DataError(
            f"{relpath}: not UTF-8 (byte 0x{bad} at byte offset {offset}, line {line}); "
            "the dataset files are UTF-8: restore this one (`bench data verify` lists changed files)"
        ) from None


def loads_lenient(data: bytes, relpath: str) -> Any:
    """Parse JSON as upstream wrote it (Python-style NaN allowed) but never let NaN through."""
    try:
        return json.loads(decode_utf8(data, relpath), parse_constant=_nan_to_none)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"{relpath}: not valid JSON ({exc}); run `bench data verify`") from exc


def loads_jsonl(data: bytes, relpath: str) -> list[Any]:
    """Parse JSON Lines (blank lines skipped); a bad line names its line number."""
    out = []
    for lineno, line in enumerate(decode_utf8(data, relpath).splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line, parse_constant=_nan_to_none))
        except json.JSONDecodeError as exc:
            raise DataError(f"{relpath}:{lineno}: not valid JSON ({exc})") from exc
    return out


def assert_finite_json(record: Any, where: str) -> None:
    """Fail loudly if a record holds NaN/Infinity or a non-JSON value (it would poison metrics)."""

    def walk(v: Any) -> None:
        if isinstance(v, float) and not math.isfinite(v):
            raise DataError(f"{where}: non-finite number in record")
        if isinstance(v, dict):
            for k, x in v.items():
                if not isinstance(k, str):
                    raise DataError(f"{where}: non-string key {k!r}")
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif v is not None and not isinstance(v, str | int | float | bool):
            raise DataError(f"{where}: value of type {type(v).__name__} is not JSON")

    walk(record)
