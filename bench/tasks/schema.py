"""Derive a JSON Schema (Draft 2020-12) from a task's records, deterministically, and validate against it.

Rules (also in docs/tasks.md):

* Types come from the observed values: `boolean`, `integer`, `number` (integers and floats mixed give
  `number`), `string`, `null`, `object`, `array`. A path with several kinds gets `anyOf`.
* Objects: `properties` in first-seen key order, `required` = keys present in every observed object,
  `additionalProperties: false`; `minProperties: 1` when no key is required but no object was empty.
* Arrays: `items` derived from all elements pooled; `minItems` = shortest observed length (when > 0);
  `maxItems` too when every observed array has the same length (a `[lat, lon]` pair).
* Strings: an `enum` is set when the dataset declares the
  field categorical (MultiWOZ `possible_values`, extended by any value the records actually use so every
  record stays valid), never when it declares it free text, and otherwise when the field has at most
  `ENUM_MAX_VALUES` distinct values and every value occurs `ENUM_MIN_COUNT_PER_VALUE` times on average
  (a field whose values repeat a lot is a category; a field of mostly unique values is text).
  Strings without an enum get `minLength: 1` when no observed value is empty.
* No `pattern`, `format` or numeric bounds are inferred: they would reject plausible new values that
  the few observed ones happen not to show. Hand-written schemas (the demo) may use them.

The schema depends on all records of a task, never on the split, so it is one per task and dataset.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bench.errors import DataError
from bench.types import JSON

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
ENUM_MAX_VALUES = 40
ENUM_MIN_COUNT_PER_VALUE = 10

_KIND_ORDER = ("null", "boolean", "integer", "number", "string", "array", "object")


def json_kind(v: Any) -> str:
    """The JSON Schema type name of a parsed JSON value (shared by schema derivation and skeletons)."""
    if v is None:
        return "null"
    if isinstance(v, bool):  # before int: bool is a subclass of int
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    raise DataError(f"cannot derive a schema for a value of type {type(v).__name__}")


class _Deriver:
    def __init__(self, categorical: dict[str, list[str]], free_text: Iterable[str]) -> None:
        self.categorical = categorical
        self.free_text = frozenset(free_text)

    def at(self, path: str, values: list[Any]) -> JSON:
        kinds = {json_kind(v) for v in values}
        if {"integer", "number"} <= kinds:
            kinds.discard("integer")
        ordered = [k for k in _KIND_ORDER if k in kinds]
        if len(ordered) == 1:
            return self.of_kind(path, ordered[0], values)
        parts = []
        for k in ordered:
            same = [v for v in values if json_kind(v) == k or (k == "number" and json_kind(v) == "integer")]
            parts.append(self.of_kind(path, k, same))
        return {"anyOf": parts}

    def of_kind(self, path: str, kind: str, values: list[Any]) -> JSON:
        if kind == "object":
            return self.obj(path, values)
        if kind == "array":
            return self.arr(path, values)
        if kind == "string":
            return self.string(path, values)
        return {"type": kind}

    def obj(self, path: str, objs: list[dict[str, Any]]) -> JSON:
        keys: dict[str, None] = {}
        for o in objs:
            for k in o:
                keys.setdefault(k, None)
        props = {}
        for k in keys:
            child = f"{path}.{k}" if path else k
            props[k] = self.at(child, [o[k] for o in objs if k in o])
        required = [k for k in keys if all(k in o for o in objs)]
        schema: JSON = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        elif objs and all(o for o in objs):
            schema["minProperties"] = 1
        schema["additionalProperties"] = False
        return schema

    def arr(self, path: str, arrs: list[list[Any]]) -> JSON:
        elems = [x for a in arrs for x in a]
        schema: JSON = {"type": "array"}
        if elems:
            schema["items"] = self.at(f"{path}[]", elems)
        lengths = {len(a) for a in arrs}
        lo = min(lengths)
        if lo > 0:
            schema["minItems"] = lo
        if len(lengths) == 1:
            schema["maxItems"] = lo
        return schema

    def string(self, path: str, values: list[str]) -> JSON:
        schema: JSON = {"type": "string"}
        distinct = sorted(set(values))
        if path in self.categorical:
            declared = list(self.categorical[path])
            schema["enum"] = declared + [v for v in distinct if v not in declared]
        elif path not in self.free_text and is_categorical(len(values), len(distinct)):
            schema["enum"] = distinct
        elif values and all(values):
            schema["minLength"] = 1
        return schema


def is_categorical(n_values: int, n_distinct: int) -> bool:
    """The enum threshold for fields the dataset does not classify itself."""
    return 0 < n_distinct <= ENUM_MAX_VALUES and n_values >= ENUM_MIN_COUNT_PER_VALUE * n_distinct


def derive_schema(
    records: list[JSON],
    *,
    title: str,
    categorical: dict[str, list[str]] | None = None,
    free_text: Iterable[str] = (),
) -> JSON:
    """The Draft 2020-12 schema of `records` (all JSON objects); see the module docstring for the rules."""
    if not records:
        raise DataError(f"{title}: no records to derive a schema from")
    if not all(isinstance(r, dict) for r in records):
        raise DataError(f"{title}: every record must be a JSON object")
    body = _Deriver(categorical or {}, free_text).obj("", records)
    return {"$schema": SCHEMA_DIALECT, "title": title, **body}


def validator_for(schema: JSON) -> Any:
    """A Draft 2020-12 validator with format checking, after checking the schema itself."""
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def validate_records(records: Iterable[JSON], schema: JSON, where: str) -> None:
    """Every reference and holdout record must satisfy the task schema; the first failure is an error."""
    validator = validator_for(schema)
    for i, record in enumerate(records):
        error = next(iter(validator.iter_errors(record)), None)
        if error is not None:
            at = "/".join(str(p) for p in error.absolute_path) or "(root)"
            raise DataError(f"{where}: record {i} violates the task schema at {at}: {error.message}")
