"""Build a `TaskSpec` from a task name: find the loader, read, derive the schema, validate, split.

Every family goes through `load_task`, so de-duplication, schema derivation, the validation of every
record and the split are the same for all of them.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from pathlib import Path

from bench.errors import BenchError, DataError
from bench.registry import TASKS, UnknownNameError
from bench.types import JSON, TaskSpec

from .base import TaskFamily, TaskSource, assert_finite_json
from .datadir import data_dir_origin, resolve_data_dir
from .schema import derive_schema, validate_records
from .split import fingerprint, split_records

_GLOB_CHARS = set("*?[")


def has_members(registered: str) -> bool:
    """True for a family entry such as `superni` whose tasks are `superni/<member>`."""
    return bool(TASKS.meta(registered).get("members"))


def resolve_family(name: str) -> tuple[TaskFamily, str]:
    """(loader, variant) for a concrete task name; unknown names raise UnknownNameError with suggestions."""
    if name in TASKS:
        if has_members(name):
            raise UnknownNameError(
                f"task {name!r} is a family: name one of its tasks ({name}/<task>, or the pattern {name}/*); "
                "see `bench list tasks`"
            )
        loader: TaskFamily = TASKS.get(name)
        return loader, name.split("/", 1)[1] if "/" in name else ""
    family, sep, variant = name.partition("/")
    if sep and family in TASKS and has_members(family):
        return TASKS.get(family), variant
    TASKS.get(name)  # raises UnknownNameError with close matches
    raise AssertionError("unreachable")


def _dedupe(records: list[JSON]) -> tuple[list[JSON], int]:
    """Drop exact duplicate records (first kept): a duplicate could land in both references and holdout."""
    seen: set[str] = set()
    kept = []
    for r in records:
        key = json.dumps(r, sort_keys=True, ensure_ascii=False)
        if key not in seen:
            seen.add(key)
            kept.append(r)
    return kept, len(records) - len(kept)


def _schema_of(name: str, source: TaskSource, records: list[JSON]) -> JSON:
    if source.schema is not None:
        return source.schema
    return derive_schema(
        records, title=source.title, categorical=source.categorical, free_text=source.free_text
    )


def load_task(
    name: str,
    *,
    n_references: int | None,
    n_holdout: int | None,
    split_seed: int = 0,
    data_dir: str | Path | None = None,
    options: dict | None = None,
) -> TaskSpec:
    """The TaskSpec of `name` with one seeded split (see `bench.tasks.split`).

    Data dir: `data_dir`, else $BENCH_DATA_DIR, else the `bench data fetch` cache; demo tasks need none.
    Every record (references and holdout) is checked against the schema before the spec is returned.
    """
    loader, variant = resolve_family(name)
    opts: JSON = dict(options or {})
    root = resolve_data_dir(data_dir) if loader.needs_data_dir else None
    source = loader.read(variant, root, opts)
    if source.items and not source.records:  # JSONSchemaBench: items only; BFCL has answer records too
        return _item_task(name, loader, source, opts, split_seed)
    for i, record in enumerate(source.records):
        assert_finite_json(record, f"task {name!r} record {i}")
    records, duplicates = _dedupe(source.records)
    if not records:
        raise DataError(f"task {name!r}: the source files hold no records")
    schema = _schema_of(name, source, records)
    validate_records(records, schema, f"task {name!r}")
    references, holdout = split_records(
        records, task=name, split_seed=split_seed, n_references=n_references, n_holdout=n_holdout
    )
    meta: JSON = {
        "family": loader.family,
        "loader_version": loader.version,
        "options": opts,
        "source_files": {f.relpath: hashlib.sha256(f.data).hexdigest() for f in source.files},
        "n_records": len(records),
        "n_duplicates_dropped": duplicates,
        **source.meta,
    }
    if source.items:  # a per-item task with answer records: the question each reference answers
        meta["reference_items"] = _reference_items(source, references)
    return TaskSpec(
        name=name,
        instruction=source.instruction,
        schema=schema,
        references=references,
        holdout=holdout,
        rubric=source.rubric,
        fingerprint=fingerprint(name, loader.version, opts, source.files),
        split_seed=split_seed,
        meta=meta,
        items=_scored_items(source, holdout),
    )


def _scored_items(source: TaskSource, holdout: tuple[JSON, ...]) -> tuple:
    """A per-item task scores only the items whose answer record is in the holdout (never one a system
    could have seen among the references); an item without an expected call is always scored."""
    if not source.items:
        return ()
    held = {json.dumps(r, sort_keys=True, ensure_ascii=False) for r in holdout}
    return tuple(
        item
        for item in source.items
        if not _expects_answer(item.meta.get("record") or {})
        or json.dumps(item.meta["record"], sort_keys=True, ensure_ascii=False) in held
    )


def _reference_items(source: TaskSource, references: tuple[JSON, ...]) -> list:
    """For each reference record, the (first) item whose answer it is: a generator trained on the
    references (the embedded DLM on BFCL) learns question -> answer pairs, never a scored item's. A
    record that expects no answer (irrelevance: `{"calls": []}`) gets None, since its items are scored."""
    first: dict[str, object] = {}
    for item in source.items:
        if _expects_answer(item.meta.get("record") or {}):
            first.setdefault(json.dumps(item.meta["record"], sort_keys=True, ensure_ascii=False), item)
    return [first.get(json.dumps(r, sort_keys=True, ensure_ascii=False)) for r in references]


def _expects_answer(record: JSON) -> bool:
    """A call record with calls, or a multi-turn episode record (BFCL): the record is an answer."""
    return bool(record.get("calls")) or "turns" in record


def _item_task(name: str, loader: TaskFamily, source: TaskSource, opts: JSON, split_seed: int) -> TaskSpec:
    """A per-item task (JSONSchemaBench): each item brings its own schema; there are no records to split,
    so references and holdout are empty and reference-based metrics are NaN."""
    meta: JSON = {
        "family": loader.family,
        "loader_version": loader.version,
        "options": opts,
        "source_files": {f.relpath: hashlib.sha256(f.data).hexdigest() for f in source.files},
        "n_records": 0,
        "n_items": len(source.items),
        **source.meta,
    }
    return TaskSpec(
        name=name,
        instruction=source.instruction,
        schema=source.schema if source.schema is not None else {},
        references=(),
        holdout=(),
        rubric=source.rubric,
        fingerprint=fingerprint(name, loader.version, opts, source.files),
        split_seed=split_seed,
        meta=meta,
        items=tuple(source.items),
    )


def list_tasks(data_dir: str | Path | None = None) -> list[str]:
    """Concrete task names loadable now: demo tasks always, the others when their files are present."""
    path, _ = data_dir_origin(data_dir)
    root = path if path.is_dir() else None
    names: list[str] = []
    for registered in TASKS.names():
        loader = TASKS.get(registered)
        if not hasattr(loader, "variants"):
            continue
        if has_members(registered):
            names.extend(f"{registered}/{v}" for v in loader.variants(root))
        elif not loader.needs_data_dir or (root is not None and loader.variants(root)):
            names.append(registered)
    return sorted(names)


def expand_task_pattern(pattern: str, data_dir: str | Path | None = None) -> list[str]:
    """A glob such as `superni/*` or `multiwoz/*` -> the matching concrete tasks; a plain name -> itself."""
    if not _GLOB_CHARS & set(pattern):
        return [pattern]
    matches = fnmatch.filter(list_tasks(data_dir), pattern)
    if not matches:
        path, origin = data_dir_origin(data_dir)
        raise BenchError(
            f"no task matches {pattern!r} in data dir {path} (from {origin}); "
            "see `bench list tasks`, or run `bench data fetch`"
        )
    return sorted(matches)
