"""DiffLM's "check column" test on one generated record: it parses, has the schema's keys, and its
categorical values are in range (Zhou et al. 2024, sampling). Upstream resamples until this holds with
no bound; we bound it (see the difflm system) and count the attempts.
"""

from __future__ import annotations

from typing import Any

from bench.types import JSON
from metrics.extract import extract_record


def parse_record(text: str) -> Any:
    """The record the text holds, by the harness's own rule (metrics.extract: first fenced block or first
    balanced object, parsed strictly), so "passes the check" and "parses" in the metrics agree."""
    ex = extract_record(text)
    if ex.record is None:
        raise ValueError(f"not JSON: {ex.error}")
    return ex.record


def _enum_problems(value: Any, schema: JSON, path: str) -> list[str]:
    out: list[str] = []
    if not isinstance(schema, dict):
        return out
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path or '$'}: {value!r} not in enum")
    if isinstance(value, dict):
        for k, sub in (schema.get("properties") or {}).items():
            if k in value:
                out.extend(_enum_problems(value[k], sub, f"{path}.{k}" if path else k))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            out.extend(_enum_problems(v, schema["items"], f"{path}[{i}]"))
    return out


def check_record(text: str, schema: JSON) -> str | None:
    """None when the record passes; otherwise the first reason it fails.

    Keys: every `required` key is present and, when the schema closes the object
    (`additionalProperties: false`), no other key is (upstream: the keys equal the required columns).
    Categorical: every value at a path whose schema has `enum` is one of its values.
    """
    try:
        rec = parse_record(text)
    except ValueError as exc:
        return str(exc)
    if schema.get("type") == "object" or "properties" in schema:
        if not isinstance(rec, dict):
            return f"not an object: {type(rec).__name__}"
        missing = [k for k in schema.get("required", []) if k not in rec]
        if missing:
            return f"missing keys: {', '.join(missing)}"
        if schema.get("additionalProperties") is False:
            extra = [k for k in rec if k not in (schema.get("properties") or {})]
            if extra:
                return f"unexpected keys: {', '.join(extra)}"
    problems = _enum_problems(rec, schema, "")
    return problems[0] if problems else None
