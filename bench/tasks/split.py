"""The one seeded split of a task into references and holdout, and the task's data fingerprint.

Split: the record indices are shuffled by `random.Random` seeded from (task name, split_seed); the
holdout is the first `n_holdout` of that permutation and the references the next `n_references`.
Taking the holdout first means that growing or shrinking `n_references` never changes the holdout
of a given split seed, so similarity/BLEU numbers stay comparable across reference budgets.
`None` means "all remaining records"; when both are None, a fifth of the records (at least one, when
there are two or more) is held out. Sampling is without replacement, so the two sets are disjoint.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

from bench.errors import DataError
from bench.types import JSON

from .base import SourceFile

DEFAULT_HOLDOUT_FRACTION = 0.2


def _rng(task: str, split_seed: int) -> random.Random:
    digest = hashlib.sha256(f"aod-bench/split/{task}/{split_seed}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def split_sizes(n: int, n_references: int | None, n_holdout: int | None, task: str) -> tuple[int, int]:
    """(n_references, n_holdout) after resolving None; asking for more records than exist is an error."""
    for label, v in (("n_references", n_references), ("n_holdout", n_holdout)):
        if v is not None and v < 0:
            raise DataError(f"task {task!r}: {label} must be >= 0, got {v}")
    if n_references is None and n_holdout is None:
        n_holdout = max(1, round(n * DEFAULT_HOLDOUT_FRACTION)) if n >= 2 else 0
        return n - n_holdout, n_holdout
    if n_holdout is None:
        assert n_references is not None
        n_holdout = max(0, n - n_references)
    if n_references is None:
        n_references = max(0, n - n_holdout)
    if n_references + n_holdout > n:
        raise DataError(
            f"task {task!r} has {n} records, fewer than n_references={n_references} + n_holdout={n_holdout}; "
            "lower the sizes for this task"
        )
    return n_references, n_holdout


def split_records(
    records: Sequence[JSON], *, task: str, split_seed: int, n_references: int | None, n_holdout: int | None
) -> tuple[tuple[JSON, ...], tuple[JSON, ...]]:
    """(references, holdout), disjoint, each in permutation order; deterministic in (task, split_seed)."""
    n_ref, n_hold = split_sizes(len(records), n_references, n_holdout, task)
    order = list(range(len(records)))
    _rng(task, split_seed).shuffle(order)
    holdout = tuple(records[i] for i in order[:n_hold])
    references = tuple(records[i] for i in order[n_hold : n_hold + n_ref])
    return references, holdout


def fingerprint(task: str, loader_version: str, options: JSON, files: Sequence[SourceFile]) -> str:
    """sha256 over the source files (path and bytes), the loader version and the options.

    It identifies the data a task is built from, not the split: split seed and sizes are task config
    and enter the runner's cell hash separately.
    """
    h = hashlib.sha256()
    h.update(b"aod-bench/task-fingerprint/v1\0")
    h.update(task.encode() + b"\0" + loader_version.encode() + b"\0")
    h.update(json.dumps(options, sort_keys=True, separators=(",", ":")).encode() + b"\0")
    for f in sorted(files, key=lambda f: f.relpath):
        h.update(f.relpath.encode() + b"\0")
        h.update(hashlib.sha256(f.data).digest())
    return h.hexdigest()
