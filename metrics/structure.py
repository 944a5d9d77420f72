"""Schema validation with per-field diagnostics, in bounded time.

Validation is JSON Schema Draft 2020-12 with the format checker (design §5). Three keywords that run a
schema's regular expressions (`pattern`, `patternProperties`, `additionalProperties`, which consults
`patternProperties`) are replaced by versions that use the `regex` engine with a per-match timeout: a
schema with a catastrophic pattern such as `^(a+)+$` then costs at most `PATTERN_TIMEOUT_S` per check
instead of hanging the run. A timed-out check counts as *not verified* (the record is not schema-valid)
and is reported as its own error kind, `pattern_timeout`, so the cause is visible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import jsonschema
import regex
from jsonschema import Draft202012Validator, FormatChecker
from jsonschema.exceptions import ValidationError

from bench.types import JSON

#: Seconds one regular-expression match may take while validating.
PATTERN_TIMEOUT_S = 0.05
#: Error messages kept per record (the counts are complete; the messages are for people).
MAX_MESSAGES = 20

#: Error kinds counted per field: keyword of the failing check -> diagnostic name.
KIND_OF_KEYWORD = {
    "required": "missing_required",
    "type": "type_violation",
    "enum": "enum_violation",
    "const": "enum_violation",
}


class InvalidSchemaError(ValueError):
    """The task's schema is not a valid Draft 2020-12 schema (a task bug, not a model failure)."""


def _search(pattern: str, text: str) -> bool | None:
    """True/False for a match, None when the regex engine ran out of time."""
    try:
        return regex.search(pattern, text, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        return None


def _pattern(validator: Any, patrn: str, instance: Any, schema: JSON) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    found = _search(patrn, instance)
    if found is None:
        yield ValidationError(f"pattern check timed out: {patrn[:60]!r}", validator="pattern_timeout")
    elif not found:
        yield ValidationError(f"{instance[:60]!r} does not match {patrn[:60]!r}")


def _pattern_properties(
    validator: Any, props: JSON, instance: Any, schema: JSON
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in props.items():
        for key, value in instance.items():
            found = _search(patrn, key)
            if found is None:
                yield ValidationError(f"pattern check timed out: {patrn[:60]!r}", validator="pattern_timeout")
            elif found:
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional_properties(validator: Any, aP: Any, instance: Any, schema: JSON) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = []
    for key in instance:
        if key in properties:
            continue
        hits = [_search(p, key) for p in patterns]
        if None in hits:
            yield ValidationError(
                f"pattern check timed out for key {key[:60]!r}", validator="pattern_timeout"
            )
            continue
        if not any(hits):
            extras.append(key)
    if validator.is_type(aP, "object"):
        for key in extras:
            yield from validator.descend(instance[key], aP, path=key)
    elif not aP and extras:
        yield ValidationError(
            f"additional properties are not allowed ({', '.join(repr(k[:40]) for k in extras[:5])})"
        )


BoundedValidator = jsonschema.validators.extend(
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


@lru_cache(maxsize=64)
def _validator_for(schema_json: str) -> Any:
    import json

    schema = json.loads(schema_json)
    try:
        Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidSchemaError(f"invalid JSON Schema: {exc.message}") from exc
    return BoundedValidator(schema, format_checker=FormatChecker())


def validator_for(schema: JSON) -> Any:
    """A cached bounded Draft 2020-12 validator (with format checks) for `schema`."""
    import json

    return _validator_for(json.dumps(schema, sort_keys=True))


# ------------------------------------------------------------------------------------ the fast engine
#: Formats on which jsonschema-rs and `jsonschema` (with its FormatChecker) gave the same verdict on every
#: instance of the JSON-Schema-Test-Suite (tests/test_fast_validation.py measures this). A schema with any
#: other format, or with a regular expression (ECMA 262 and Python classes differ on non-ASCII text, and
#: the reference's per-match timeout has no counterpart), is validated by the reference alone.
AGREEING_FORMATS = frozenset({"date"})
_REGEX_KEYWORDS = frozenset({"pattern", "patternProperties", "propertyNames"})


def _fast_eligible(schema: Any) -> bool:
    """True when the schema uses no keyword on which the two engines are known to disagree."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in _REGEX_KEYWORDS:
                return False
            if key == "format" and value not in AGREEING_FORMATS:
                return False
            if key in ("enum", "const", "default", "examples"):
                continue  # values, not subschemas
            if not _fast_eligible(value):
                return False
    elif isinstance(schema, list):
        return all(_fast_eligible(v) for v in schema)
    return True


class FastEngine:
    """jsonschema-rs for the verdict on valid records; the reference (`jsonschema`) for every record it
    rejects, because only the reference gives per-field diagnostics. So a disagreement in which
    jsonschema-rs rejects a record that the reference accepts is seen at no cost: the reference's
    verdict stands and the schema is demoted to the reference for the rest of the process
    (`disagreements` counts them)."""

    def __init__(self, schema: JSON) -> None:
        self.rs: Any = None
        self.disagreements = 0
        if not _fast_eligible(schema):
            return
        try:
            import jsonschema_rs
        except ImportError:  # the reference alone is still exact, only slower
            return
        try:
            self.rs = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
        except Exception:  # noqa: BLE001 - a schema jsonschema-rs refuses goes to the reference
            self.rs = None

    def accepts(self, record: Any) -> bool:
        """True when jsonschema-rs accepts the record (and the schema is on the fast path)."""
        if self.rs is None:
            return False
        try:
            return bool(self.rs.is_valid(record))
        except Exception:  # noqa: BLE001 - e.g. an int beyond 64 bits: ask the reference
            return False

    def rejected_but_valid(self) -> None:
        self.disagreements += 1
        self.rs = None


@lru_cache(maxsize=64)
def _fast_for(schema_json: str) -> FastEngine:
    import json

    return FastEngine(json.loads(schema_json))


def fast_engine_for(schema: JSON) -> FastEngine:
    import json

    return _fast_for(json.dumps(schema, sort_keys=True))


def path_string(parts: Any) -> str:
    """Design §5 leaf path: keys joined by '.', any list position written as '[]'."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += "[]"
        else:
            out = f"{out}.{p}" if out else str(p)
    return out


def _join(base: str, key: str) -> str:
    return f"{base}.{key}" if base else key


@dataclass
class SchemaCheck:
    """Result of validating one record: valid flag, per-(kind, field) counts, a few messages."""

    valid: bool
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, field path) -> n
    messages: list[str] = field(default_factory=list)

    def kinds(self) -> set[str]:
        return {k for k, _ in self.counts}

    def to_json(self) -> JSON:
        return {
            "valid": self.valid,
            "errors": [{"kind": k, "field": f, "count": n} for (k, f), n in sorted(self.counts.items())],
            "messages": self.messages,
        }


def check_record(
    record: Any, schema: JSON, validator: Any = None, fast_engine: FastEngine | bool | None = None
) -> SchemaCheck:
    """Validate one parsed record and classify every error by kind and field.

    Pass `validator` (from `validator_for(schema)`) and `fast_engine` (from `fast_engine_for(schema)`)
    when checking many records, to skip the cache lookups; `fast_engine=False` uses the reference alone.
    """
    validator = validator or validator_for(schema)  # first: it raises InvalidSchemaError for a bad schema
    fast = fast_engine_for(schema) if fast_engine is None else fast_engine
    consulted = isinstance(fast, FastEngine) and fast.rs is not None
    if consulted and fast.accepts(record):  # type: ignore[union-attr]
        return SchemaCheck(valid=True)
    check = SchemaCheck(valid=True)
    missing_seen: set[tuple[int, str]] = (
        set()
    )  # jsonschema reports each missing key once per `required` error
    for err in validator.iter_errors(record):
        check.valid = False
        base = path_string(err.absolute_path)
        keyword = str(err.validator)
        if keyword == "required" and isinstance(err.instance, dict):
            for key in err.validator_value:
                path = _join(base, key)
                if key not in err.instance and (id(err.instance), path) not in missing_seen:
                    missing_seen.add((id(err.instance), path))
                    check.counts[("missing_required", path)] += 1
        else:
            kind = KIND_OF_KEYWORD.get(
                keyword, "pattern_timeout" if keyword == "pattern_timeout" else "other"
            )
            check.counts[(kind, base or "$")] += 1
        if len(check.messages) < MAX_MESSAGES:
            check.messages.append(f"{base or '$'}: {err.message[:200]}")
    if check.valid and consulted:
        fast.rejected_but_valid()  # type: ignore[union-attr]  # jsonschema-rs rejected what the reference accepts
    return check
