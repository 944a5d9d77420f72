"""The default task-success rubric behind `tsr` (design §5).

A sample passes when it is schema-valid AND
1. every required string field is non-empty and not a placeholder,
2. it is not an exact copy of a reference record (canonical JSON equality),
3. it is not a duplicate of an earlier sample of the same cell (canonical JSON equality),
4. it passes every code check of its task family (metrics/rubrics/: departure != destination, the
   best answer among the correct ones, ...; a failure reads `check:<name>`).

A placeholder is a value such as "string", "...", "N/A", "<name>", "[date]", "lorem ipsum", or the
field's own name. A value the task's references themselves use at that path is never a placeholder:
MultiWOZ writes "?" for unknown, and a rubric must not fail the dataset's own conventions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from bench.types import JSON
from metrics.records import canonical, normalized_value
from metrics.rubrics import Check, failed
from metrics.schema_paths import required_string_paths

PLACEHOLDER_WORDS = frozenset(
    {
        "?",
        "??",
        "???",
        "-",
        "--",
        "...",
        "…",
        "string",
        "str",
        "text",
        "value",
        "example",
        "sample",
        "placeholder",
        "todo",
        "tbd",
        "tba",
        "n/a",
        "na",
        "none",
        "null",
        "nil",
        "undefined",
        "unknown",
        "xxx",
        "foo",
        "bar",
        "lorem ipsum",
        "your answer here",
    }
)
_PLACEHOLDER_SHAPES = re.compile(
    r"^(?:<[^<>]{0,60}>|\{[^{}]{0,60}\}|\[[^\[\]]{0,60}\]|x{2,}|\.{2,}|_{2,}|lorem ipsum\b.*"
    r"|(?:your|insert|enter)\b.{0,60}\bhere)$"
)


def is_placeholder(value: str, field_name: str = "") -> bool:
    norm = normalized_value(value)
    if norm in PLACEHOLDER_WORDS or _PLACEHOLDER_SHAPES.match(norm):
        return True
    return bool(field_name) and norm == normalized_value(field_name.rsplit(".", 1)[-1])


def _value_at(record: Any, path: str) -> tuple[bool, Any]:
    node = record
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


class Rubric:
    """Default rubric for one task: precomputes the reference identities and conventions once."""

    def __init__(self, schema: JSON, references: Iterable[JSON], checks: Iterable[Check] = ()):
        self.checks = list(checks)
        self.required_strings = sorted(required_string_paths(schema))
        refs = list(references)
        self.reference_ids = {canonical(r) for r in refs}
        self.conventions: dict[str, set[str]] = {p: set() for p in self.required_strings}
        for r in refs:
            for p in self.required_strings:
                found, v = _value_at(r, p)
                if found and isinstance(v, str):
                    self.conventions[p].add(normalized_value(v))

    def failures(self, record: JSON) -> list[str]:
        """Content reasons the record fails (empty list = passes); duplicates are checked by the cell."""
        reasons = []
        for p in self.required_strings:
            found, v = _value_at(record, p)
            if not found or not isinstance(v, str):
                continue
            norm = normalized_value(v)
            if norm in self.conventions[p]:
                continue
            if not norm:
                reasons.append(f"empty:{p}")
            elif is_placeholder(v, p):
                reasons.append(f"placeholder:{p}")
        if canonical(record) in self.reference_ids:
            reasons.append("copy_of_reference")
        return reasons + failed(self.checks, record)
