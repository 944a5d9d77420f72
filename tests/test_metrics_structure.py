"""Structure metrics: parse rate, schema validity, task success (default rubric), diagnostics.

Expected values are worked out by hand in each test from the listed samples.
"""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.types import Sample, SampleStatus, TaskSpec
from metrics.registry import MODEL_FREE_METRICS
from metrics.rubric import is_placeholder
from metrics.scoring import score_cell
from metrics.structure import check_record

HOTEL_SCHEMA = {
    "type": "object",
    "required": ["name", "area", "phone", "stars"],
    "properties": {
        "name": {"type": "string", "minLength": 0},
        "area": {"enum": ["north", "south", "centre"]},
        "phone": {"type": "string"},
        "stars": {"type": "integer"},
        "internet": {"type": "boolean"},
        "price": {"type": "object", "properties": {"single": {"type": "number"}}},
    },
    "additionalProperties": False,
}
REFS = ({"name": "acorn guest house", "area": "north", "phone": "?", "stars": 4},)
HOLD = ({"name": "bridge guest house", "area": "south", "phone": "01223247942", "stars": 3},)
SPEC = TaskSpec("hotel", "make hotels", HOTEL_SCHEMA, REFS, HOLD)

STRUCTURE = [
    "parse_rate",
    "schema_valid",
    "tsr",
    "missing_required",
    "type_violations",
    "enum_violations",
    "truncation_rate",
    "harness_failures",
]


def _s(i: int, obj: object, **kw: object) -> Sample:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return Sample(index=i, text=text, **kw)  # type: ignore[arg-type]


def _cell() -> list[Sample]:
    good = {"name": "city inn", "area": "centre", "phone": "01223 000000", "stars": 2}
    return [
        _s(0, good),  # passes everything
        _s(1, good),  # duplicate of sample 0 -> tsr fails
        _s(2, REFS[0]),  # exact copy of a reference -> tsr fails (phone "?" is the data's convention)
        _s(3, {"name": "N/A", "area": "north", "phone": "1", "stars": 1}),  # placeholder name
        _s(4, {"name": "ok", "area": "east", "phone": "1", "stars": "3"}),  # enum + type violation
        _s(5, {"name": "ok", "area": "north"}),  # missing phone and stars
        _s(6, '{"name": "cut', finish_reason="length"),  # truncated
        _s(7, "I cannot help with that."),  # invalid
        _s(8, "", status=SampleStatus.TIMEOUT, error="deadline"),  # harness failure: excluded
        _s(9, "", status=SampleStatus.BACKEND_ERROR, error="500"),  # harness failure: excluded
        _s(10, {"name": "", "area": "south", "phone": "2", "stars": 5}),  # empty required string
    ]


def test_structure_metrics_by_hand() -> None:
    score = score_cell(_cell(), SPEC, STRUCTURE, None)
    v = score.values
    n = 9  # 11 samples - 2 harness failures
    assert v["harness_failures"] == 2
    assert v["parse_rate"] == pytest.approx(7 / n)  # 0,1,2,3,4,5,10
    assert v["schema_valid"] == pytest.approx(5 / n)  # 0,1,2,3,10 (4 and 5 violate)
    assert v["tsr"] == pytest.approx(1 / n)  # only sample 0
    assert v["truncation_rate"] == pytest.approx(1 / n)
    assert v["missing_required"] == pytest.approx(1 / 7)  # over parsed records
    assert v["type_violations"] == pytest.approx(1 / 7)
    assert v["enum_violations"] == pytest.approx(1 / 7)
    rows = {r["index"]: r for r in score.rows}
    assert [r["index"] for r in score.rows] == list(range(11))  # rows follow the input order
    assert rows[1]["tsr_failures"] == ["duplicate_of_sample:0"]
    assert rows[2]["tsr_failures"] == ["copy_of_reference"]
    assert rows[3]["tsr_failures"] == ["placeholder:name"]
    assert rows[10]["tsr_failures"] == ["empty:name"]
    assert rows[4]["status"] == "schema_violation" and rows[6]["status"] == "truncated"
    assert rows[7]["status"] == "invalid_json" and rows[8]["status"] == "timeout"
    assert rows[8]["tsr"] is None and rows[8]["harness_failure"]
    assert score.info["structure"] == {
        "enum_violation": {"area": 1},
        "missing_required": {"phone": 1, "stars": 1},
        "type_violation": {"stars": 1},
    }


def test_empty_or_all_failed_cells_are_nan_not_zero() -> None:
    for samples in ([], [_s(0, "", status=SampleStatus.TIMEOUT)]):
        v = score_cell(samples, SPEC, MODEL_FREE_METRICS, None).values
        for name in MODEL_FREE_METRICS:
            if name == "harness_failures":
                assert v[name] == len(samples)
            else:
                assert math.isnan(v[name]), name
    v = score_cell([_s(0, "nope"), _s(1, "{")], SPEC, MODEL_FREE_METRICS, None).values
    assert v["parse_rate"] == 0.0 and v["schema_valid"] == 0.0 and v["tsr"] == 0.0
    for name in ("field_overlap", "novelty", "diversity", "entropy", "self_bleu", "missing_required"):
        assert math.isnan(v[name]), name


def test_tsr_judge_reads_verdicts_and_is_nan_without_a_judge() -> None:
    good = {"name": "a", "area": "north", "phone": "1", "stars": 1}
    other = {"name": "b", "area": "north", "phone": "1", "stars": 1}
    samples = [
        _s(0, good, meta={"judge": [True, True]}),
        _s(1, other, meta={"judge": [True, False]}),
        _s(2, "x"),
    ]
    assert score_cell(samples, SPEC, ["tsr_judge"]).values["tsr_judge"] == pytest.approx(1 / 3)
    assert math.isnan(score_cell([_s(0, good)], SPEC, ["tsr_judge"]).values["tsr_judge"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("string", True),
        ("...", True),
        ("<hotel name>", True),
        ("[date]", True),
        ("N/A", True),
        ("Lorem ipsum dolor", True),
        ("your answer here", True),
        ("name", True),
        ("xxxx", True),
        ("acorn guest house", False),
        ("Nana's", False),
        ("12:30", False),
    ],
)
def test_placeholders(value: str, expected: bool) -> None:
    assert is_placeholder(value, "name") is expected


def test_catastrophic_schema_pattern_is_bounded_and_reported() -> None:
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}},
        "patternProperties": {"^(a|aa)+$": {"type": "string"}},
    }
    hostile = {"code": "a" * 40 + "!", "a" * 40 + "!": 1}
    t0 = time.perf_counter()
    check = check_record(hostile, schema)
    assert time.perf_counter() - t0 < 2.0
    assert not check.valid
    assert ("pattern_timeout", "code") in check.counts
    assert check_record({"code": "aaaa"}, schema).valid  # the same pattern still works on easy input
    spec = TaskSpec("t", "", schema, (), ())
    t0 = time.perf_counter()
    v = score_cell([_s(i, hostile) for i in range(5)], spec, ["schema_valid"]).values
    assert v["schema_valid"] == 0.0 and time.perf_counter() - t0 < 5.0


def test_format_checker_is_applied() -> None:
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}
    assert check_record({"d": "2024-02-29"}, schema).valid
    assert not check_record({"d": "2024-02-30"}, schema).valid


def test_nested_required_paths_are_reported_with_list_markers() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}}},
            }
        },
    }
    check = check_record({"items": [{"id": 1}, {}, {"id": "x"}]}, schema)
    assert check.counts[("missing_required", "items[].id")] == 1
    assert check.counts[("type_violation", "items[].id")] == 1


records_st = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(["a", "b", "c", "", "string"]),
            "area": st.sampled_from(["north", "south", "west"]),
            "phone": st.sampled_from(["1", "2", "?"]),
            "stars": st.integers(0, 2),
        }
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None)
@given(records_st, st.randoms(use_true_random=False))
def test_structure_metrics_are_bounded_and_order_invariant(records: list[dict], rnd: object) -> None:
    samples = [_s(i, r) for i, r in enumerate(records)]
    a = score_cell(samples, SPEC, MODEL_FREE_METRICS).values
    shuffled = list(samples)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    renumbered = [Sample(index=i, text=s.text) for i, s in enumerate(shuffled)]
    b = score_cell(renumbered, SPEC, MODEL_FREE_METRICS).values
    for name in MODEL_FREE_METRICS:
        if math.isnan(a[name]):
            assert math.isnan(b[name]), name
            continue
        assert a[name] == pytest.approx(b[name], abs=1e-12), name
        if name not in ("entropy", "harness_failures"):
            assert 0.0 <= a[name] <= 1.0, name


HOSTILE = [
    "x" * 10_000_000,
    '{"a": "' + "b" * 10_000_000 + '"}',
    '{"a":' * 10_000 + "1" + "}" * 10_000,
    '{"name": NaN, "area": "north", "phone": "1", "stars": 1}',
    '{"name": "a", "name": "b", "area": "north", "phone": "1", "stars": 1}',
    '{"name": "\\ud800", "area": "north", "phone": "1", "stars": 1}',
    '{"name": "\ud800", "area": "north", "phone": "1", "stars": 1}',
    '```json\n{"name": "fenced", "area": "north", "phone": "1", "stars": 1}\n```\ntrailing prose',
    '{"name": "trailing", "area": "north", "phone": "1", "stars": 1} and some prose }}}',
    '{"name": "trunc", "area": "nor',
]


def test_a_cell_of_hostile_outputs_is_scored_in_bounded_time() -> None:
    samples = [Sample(i, t, "length" if i == len(HOSTILE) - 1 else "stop") for i, t in enumerate(HOSTILE)]
    t0 = time.perf_counter()
    score = score_cell(samples, SPEC, MODEL_FREE_METRICS)
    assert time.perf_counter() - t0 < 5.0
    assert [r["status"] for r in score.rows] == ["invalid_json"] * 7 + ["ok", "ok", "truncated"]
    assert score.values["parse_rate"] == pytest.approx(2 / 10)
    json.dumps(score.rows).encode("utf-8")  # rows are storable: no lone surrogates leak into them


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=40).filter(lambda s: "{" not in s), min_size=1, max_size=8))
def test_all_invalid_cells_score_zero_parse_rate_and_nan_content_metrics(texts: list[str]) -> None:
    v = score_cell([Sample(i, t) for i, t in enumerate(texts)], SPEC, MODEL_FREE_METRICS).values
    assert v["parse_rate"] == 0.0 and v["tsr"] == 0.0
    for name in (
        "field_overlap",
        "novelty",
        "diversity",
        "distinct_1",
        "entropy",
        "self_bleu",
        "missing_required",
    ):
        assert math.isnan(v[name]), name
