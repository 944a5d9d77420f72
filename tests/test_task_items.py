"""Per-item tasks (JSONSchemaBench schemas, BFCL questions): sample i answers item i, with its own schema
and instruction in the prompt, names it in meta.item_id, and is validated against its own schema."""

from __future__ import annotations

import json

from bench.types import Sample, TaskItem, TaskSpec
from metrics.scoring import score_cell
from systems.ar import ARSystem

ITEMS = (
    TaskItem(
        "a", {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}, "Make an x."
    ),
    TaskItem(
        "b", {"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]}, "Make a y."
    ),
)
SPEC = TaskSpec(name="items/test", instruction="", schema={}, references=(), holdout=(), items=ITEMS)


def test_for_sample_gives_each_sample_its_item():
    assert SPEC.for_sample(0).schema == ITEMS[0].schema and SPEC.for_sample(1).instruction == "Make a y."
    assert SPEC.for_sample(2).meta["item_id"] == "a"  # wraps around
    plain = TaskSpec(name="t", instruction="i", schema={"type": "object"}, references=(), holdout=())
    assert plain.for_sample(5) is plain and plain.item_for(0) is None


def test_ar_prompts_carry_each_items_schema_and_instruction():
    requests, _ = ARSystem({"k_shots": 0}).build_requests(SPEC, 2, seed=0)
    texts = [json.dumps([m for m in r.messages]) for r in requests]
    assert "Make an x." in texts[0] and '\\"x\\"' in texts[0] and "Make a y." not in texts[0]
    assert "Make a y." in texts[1] and '\\"y\\"' in texts[1]


def test_each_sample_is_validated_against_its_own_items_schema():
    samples = [Sample(0, '{"x": 1}'), Sample(1, '{"x": 1}'), Sample(2, '{"y": "z"}'), Sample(3, '{"y": "z"}')]
    score = score_cell(samples, SPEC, ["parse_rate", "schema_valid"])
    assert score.values["parse_rate"] == 1.0
    assert score.values["schema_valid"] == 0.5  # samples 0 and 3 match their items; 1 and 2 do not
    assert [r["status"] for r in score.rows] == ["ok", "schema_violation", "schema_violation", "ok"]
