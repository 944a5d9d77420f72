"""Broken model output on BFCL items is always a classified failure, never a crash; the loader scores
only held-out items, gives each item a schema derived from its function docs, and irrelevance rules."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from bench.tasks.bfcl import BFCL_FAMILY
from bench.tasks.loading import load_task
from bench.types import Sample, SampleStatus, TaskSpec
from metrics.registry import TOOLCALL_METRICS
from metrics.scoring import score_cell

DATA = Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent"))
pytestmark = pytest.mark.skipif(not (DATA / "bfcl").is_dir(), reason="needs $BENCH_DATA_DIR/bfcl")


def _spec(category: str, n: int) -> TaskSpec:
    items = BFCL_FAMILY.read(category, DATA, {}).items[:n]
    return TaskSpec(
        name=f"bfcl/{category}", instruction="", schema={}, references=(), holdout=(), items=items
    )


BAD = [
    "Sure! The area is 25 square units.",  # prose
    '{"calls": [{"name": "calculate_triangle_area", "arguments": {"base": 10,',  # half a call
    '{"calls": [{"name": "no_such_function", "arguments": {"base": 10, "height": 5}}]}',  # unknown function
    '{"calls": [{"name": "calculate_triangle_area", "arguments": "base=10, height=5"}]}',  # args as a string
    '{"calls": {"name": "calculate_triangle_area"}}',  # not a list
    "[1, 2, 3]",
    '{"calls": [null, 3]}',
    '{"calls": [{"name": "calculate_triangle_area", "arguments": {"base": "ten", "height": 5}}]}',
    '{"calls": [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 6}}]}',
    '{"calls": [{"name": "calculate_triangle_area", "arguments": {"base": 10}}]}',
    '{"calls": [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5, "color": "red"}}]}',
    '{"calls": []}',
    "",
]
EXPECTED = [
    "invalid_syntax",
    "invalid_syntax",
    "wrong_function",
    "invalid_syntax",
    "invalid_syntax",
    "invalid_syntax",
    "invalid_syntax",
    "wrong_type",
    "wrong_value",
    "missing_required",
    "unexpected_argument",
    "call_count_mismatch",
    "invalid_syntax",
]


def test_every_broken_output_is_classified_never_raised():
    spec = _spec("simple_python", 1)  # simple_python_0: calculate_triangle_area(base=10, height=5)
    samples = [Sample(i * len(spec.items), t) for i, t in enumerate(BAD)]
    score = score_cell(samples, spec, TOOLCALL_METRICS)
    assert [r["failure"] for r in score.rows] == EXPECTED
    assert not any(r["ast_valid"] for r in score.rows)
    assert score.values["ast_accuracy"] == 0.0
    shares = {k: v for k, v in score.values.items() if k.startswith("failure_")}
    assert sum(shares.values()) == pytest.approx(1.0)  # every sample has exactly one class
    assert score.values["failure_invalid_syntax"] == pytest.approx(
        EXPECTED.count("invalid_syntax") / len(BAD)
    )


def test_irrelevance_counts_calls_as_hallucinated_and_abstention_as_correct():
    spec = _spec("irrelevance", 1)
    fn = spec.items[0].meta["functions"][0]["name"]
    texts = [
        '{"calls": []}',
        "No function can answer that.",
        json.dumps({"calls": [{"name": fn, "arguments": {}}]}),
    ]
    samples = [Sample(i, t) for i, t in enumerate(texts)]
    samples.append(Sample(3, "", status=SampleStatus.TIMEOUT, error="t"))  # harness failure: not scored
    score = score_cell(samples, spec, TOOLCALL_METRICS)
    assert [r.get("failure") for r in score.rows[:3]] == [None, None, "hallucinated_call"]
    assert score.values["irrelevance_accuracy"] == pytest.approx(2 / 3)
    assert score.values["failure_hallucinated_call"] == pytest.approx(1 / 3)
    assert score.values["ast_accuracy"] != score.values["ast_accuracy"]  # NaN: no call-expecting item


def test_item_schema_accepts_the_answer_and_rejects_unknown_names_and_arguments():
    # Upstream answers that contradict their own docs (simple_python_307 passes True to a string
    # parameter; parallel_152 and parallel_multiple_12/21/26/94 likewise) are the only rejections.
    known = {"simple_python_307", "parallel_152", "parallel_multiple_12", "parallel_multiple_21"}
    known |= {"parallel_multiple_26", "parallel_multiple_94"}
    for category in ("simple_python", "multiple", "parallel", "parallel_multiple"):
        for item in BFCL_FAMILY.read(category, DATA, {}).items:
            validator = jsonschema.Draft202012Validator(item.schema)
            assert validator.is_valid(item.meta["record"]) == (item.id not in known), item.id
            assert not validator.is_valid({"calls": [{"name": "not_a_function", "arguments": {}}]})
            assert not validator.is_valid(
                {"calls": [{"name": item.meta["functions"][0]["name"], "arguments": "x"}]}
            )
            assert item.schema["properties"]["calls"]["items"]["anyOf"][0]["properties"]["name"]["enum"]


def test_only_held_out_items_are_scored_and_references_are_answer_records():
    spec = load_task("bfcl/parallel", n_references=None, n_holdout=None, data_dir=DATA)
    held = {json.dumps(r, sort_keys=True) for r in spec.holdout}
    refs = {json.dumps(r, sort_keys=True) for r in spec.references}
    assert spec.items and all(json.dumps(i.meta["record"], sort_keys=True) in held for i in spec.items)
    assert not held & refs and len(spec.items) < 200
    sample_task = spec.for_sample(0)
    assert sample_task.meta["item_id"] == spec.items[0].id and sample_task.schema == spec.items[0].schema
    irrelevance = load_task("bfcl/irrelevance", n_references=None, n_holdout=None, data_dir=DATA)
    assert len(irrelevance.items) == 240  # no answer to leak: every item is scored


def test_ar_samples_name_the_item_they_answer():
    from bench.types import Completion
    from systems.ar import ARSystem

    spec = _spec("multiple", 3)

    class Echo:  # a loopback backend: returns each item's own answer record
        def generate(self, requests):
            return [
                Completion(text=json.dumps(spec.items[r.sample_index % 3].meta["record"])) for r in requests
            ]

        def identity(self):
            return {"backend": "echo"}

    class Ctx:
        def backend(self, role):
            return Echo()

        def model_spec(self, role):
            return {}

    result = ARSystem({"k_shots": 0, "max_tokens": 64}).generate(spec, 4, seed=0, ctx=Ctx())
    assert [s.meta["item_id"] for s in result.samples] == [spec.items[i % 3].id for i in range(4)]
    score = score_cell(result.samples, spec, ["ast_accuracy"])
    assert score.values["ast_accuracy"] == 1.0
