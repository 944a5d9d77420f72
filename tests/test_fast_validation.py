"""jsonschema-rs in front of `jsonschema`: identical verdicts, differentially tested.

The reference is `jsonschema` (Draft 2020-12, format checker, bounded regex). jsonschema-rs decides only
the records it accepts, and only for schemas without the keywords on which the two were seen to differ
(regular expressions, formats other than AGREEING_FORMATS). These tests hold that choice to the official
JSON-Schema-Test-Suite and to every task family's real records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from metrics.structure import (
    AGREEING_FORMATS,
    FastEngine,
    check_record,
    fast_engine_for,
    validator_for,
)

pytest.importorskip("jsonschema_rs")

SUITE = Path(os.environ.get("BENCH_DATA_DIR", "")) / "json_schema_test_suite"
needs_suite = pytest.mark.skipif(not SUITE.is_dir(), reason="BENCH_DATA_DIR/json_schema_test_suite missing")


def _suite_cases():
    for path in sorted([*SUITE.glob("*.json"), *SUITE.glob("optional-format/*.json")]):
        if path.name == "refRemote.json":  # needs remote documents that are not shipped
            continue
        for case in json.loads(path.read_text(encoding="utf-8")):
            if isinstance(case["schema"], dict):
                yield path.name, case


def _reference(record, schema, validator) -> bool:
    return check_record(record, schema, validator, fast_engine=False).valid


@needs_suite
def test_fast_path_agrees_with_the_reference_on_the_official_test_suite():
    on_fast_path = checked = 0
    disagreements = []
    for name, case in _suite_cases():
        schema = case["schema"]
        try:
            validator = validator_for(schema)
        except Exception:  # noqa: BLE001 - schemas the reference itself rejects are not scored
            continue
        engine = FastEngine(schema)
        if engine.rs is None:
            continue
        on_fast_path += 1
        for test in case["tests"]:
            checked += 1
            fast = engine.accepts(test["data"])
            ref = _reference(test["data"], schema, validator)
            if fast and not ref:  # the only direction the fast path trusts without the reference
                disagreements.append((name, case["description"], test["description"]))
    assert on_fast_path > 250 and checked > 900, (on_fast_path, checked)
    assert disagreements == []


@needs_suite
def test_the_keywords_left_to_the_reference_do_disagree():
    """Why the exclusions exist: with every keyword on the fast path, the engines differ."""
    import jsonschema_rs

    differ: set[str] = set()
    for name, case in _suite_cases():
        schema = case["schema"]
        try:
            validator = validator_for(schema)
            rs = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
        except Exception:  # noqa: BLE001
            continue
        for test in case["tests"]:
            if rs.is_valid(test["data"]) != _reference(test["data"], schema, validator):
                differ.add(name)
    assert "optional-ecmascript-regex.json" in differ  # ECMA \d \w \s against Python's Unicode classes
    assert {"email.json", "uri.json", "time.json"} <= differ  # format checkers differ
    assert not {f"{fmt}.json" for fmt in AGREEING_FORMATS} & differ


FAMILIES = [
    ("demo/booking", 16, 16),
    ("multiwoz/train", 200, 200),
    ("multiwoz/hotel", 12, 12),
    ("multiwoz/restaurant", 40, 40),
    ("multiwoz/attraction", 30, 30),
    ("truthfulqa", 300, 300),
    ("self_instruct", 100, 75),
    ("superni/task1192_food_flavor_profile", 10, 10),
]


@pytest.mark.parametrize("task,n_ref,n_hold", FAMILIES)
def test_fast_path_agrees_with_the_reference_on_every_task_record(task, n_ref, n_hold):
    from bench.cells import load_task_cached

    if task != "demo/booking" and not os.environ.get("BENCH_DATA_DIR"):
        pytest.skip("BENCH_DATA_DIR not set")
    spec = load_task_cached({"name": task, "n_references": n_ref, "n_holdout": n_hold}, None)
    validator = validator_for(spec.schema)
    engine = fast_engine_for(spec.schema)
    records = list(spec.references) + list(spec.holdout)
    # damaged copies too, so both verdicts occur: a dropped key, a wrong type
    for r in list(records[:20]):
        if r:
            k = sorted(r)[0]
            records.append({kk: v for kk, v in r.items() if kk != k})
            records.append({**r, k: 12345})
    verdicts = [check_record(r, spec.schema, validator, engine).valid for r in records]
    reference = [_reference(r, spec.schema, validator) for r in records]
    assert verdicts == reference
    assert engine.disagreements == 0


def test_regex_and_unknown_formats_stay_with_the_reference():
    assert fast_engine_for({"type": "string", "pattern": "^a$"}).rs is None
    assert fast_engine_for({"properties": {"u": {"format": "uri"}}}).rs is None
    assert fast_engine_for({"properties": {"d": {"type": "string", "format": "date"}}}).rs is not None
    # an enum value that happens to look like a keyword is data, not a schema
    assert fast_engine_for({"enum": [{"pattern": "x"}]}).rs is not None


def test_a_rejection_the_reference_overrules_demotes_the_schema():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    engine = FastEngine(schema)

    class RejectsAll:  # stands in for a jsonschema-rs bug: rejects a valid record
        def is_valid(self, _record):
            return False

    engine.rs = RejectsAll()
    check = check_record({"a": 1}, schema, validator_for(schema), engine)
    assert check.valid and engine.disagreements == 1 and engine.rs is None
    assert not check_record({"a": "x"}, schema, validator_for(schema), engine).valid  # reference now


def test_invalid_schema_still_raises_on_the_fast_path():
    from metrics.structure import InvalidSchemaError

    with pytest.raises(InvalidSchemaError):
        check_record({}, {"type": "no-such-type"})
