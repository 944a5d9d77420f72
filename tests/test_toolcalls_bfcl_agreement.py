"""`ast_accuracy` agrees with bfcl-eval's own AST checker on every item of a fixed set of outputs.

Hand-made outputs: for every question of the AST categories, the canonical answer plus mutations that
each hit one BFCL rule (wrong name, dropped required or answer argument, extra argument, wrong type,
int for float, re-punctuated and re-cased strings, a wrong value, reordered or dropped parallel calls).
Both checkers see the same decoded calls; agreement is asserted per item, not on the average.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from bench.tasks.bfcl import BFCL_FAMILY
from bench.types import Sample, TaskSpec
from metrics.scoring import score_cell
from metrics.toolcalls import check_calls
from tests.bfcl_reference import bfcl_checker

CHECK = bfcl_checker()
pytestmark = pytest.mark.skipif(CHECK is None, reason="bfcl-eval not installed (extra [bfcl])")
DATA = Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent"))
CATEGORIES = ["simple_python", "multiple", "parallel", "parallel_multiple", "live_simple", "live_multiple"]


def _mutations(calls: list[tuple[str, dict]], functions: list[dict]) -> list[list[tuple[str, dict]]]:
    out = [calls]
    name, args = calls[0]
    doc = next(f for f in functions if f["name"] == name)
    props = doc["parameters"].get("properties", {})
    out.append([(name + "_x", args)] + calls[1:])
    other = [f["name"] for f in functions if f["name"] != name]
    if other:
        out.append([(other[0], args)] + calls[1:])
    for key in list(args)[:3]:
        dropped = {k: v for k, v in args.items() if k != key}
        out.append([(name, dropped)] + calls[1:])
        value = args[key]
        bad: list = [str(value), [value], None, 12345, {"v": value}]
        if isinstance(value, str):
            bad += [value.upper(), value.replace(" ", "-") + ".", value + " extra"]
        if isinstance(value, float) and value.is_integer():
            bad.append(int(value))
        if isinstance(value, int) and not isinstance(value, bool):
            bad += [float(value), value + 1]
        if isinstance(value, list) and value:
            bad += [value[::-1], value[:-1], [str(v) for v in value]]
        for b in bad:
            out.append([(name, {**args, key: b})] + calls[1:])
    missing_optional = [p for p in props if p not in args]
    if missing_optional:
        out.append([(name, {**args, missing_optional[0]: "x"})] + calls[1:])
    out.append([(name, {**args, "zz_unexpected": 1})] + calls[1:])
    if len(calls) > 1:
        out += [calls[::-1], calls[:-1], calls + calls[:1]]
    else:
        out += [calls + calls, []]
    return out


def _cases(category: str):
    for item in BFCL_FAMILY.read(category, DATA, {}).items:
        truth = item.meta["ground_truth"]
        calls = [(c["name"], c["arguments"]) for c in item.meta["record"]["calls"]]
        for k, mutated in enumerate(_mutations(calls, item.meta["functions"])):
            yield item, k, copy.deepcopy(mutated), truth


@pytest.mark.parametrize("category", CATEGORIES)
def test_ast_check_agrees_with_bfcl_on_hand_made_outputs(category):
    n, disagreements, valid = 0, [], 0
    for item, k, calls, truth in _cases(category):
        ours = check_calls(calls, item.meta["functions"], truth, category) is None
        theirs = CHECK(item.meta["functions"], copy.deepcopy(calls), truth, category)
        n += 1
        valid += theirs
        if ours != theirs:
            disagreements.append((item.id, k, calls))
    assert not disagreements, disagreements[:5]
    assert n > 500 and 0 < valid < n  # both outcomes are exercised


def test_scored_rows_carry_item_id_ast_valid_and_failure():
    items = BFCL_FAMILY.read("parallel", DATA, {}).items[:3]
    spec = TaskSpec(name="bfcl/parallel", instruction="", schema={}, references=(), holdout=(), items=items)
    good = json.dumps(items[0].meta["record"])
    texts = [good, "I think you should call a function.", '{"calls": [{"name": "x", "arguments": "a=1"}]}']
    score = score_cell(
        [Sample(i, t) for i, t in enumerate(texts)], spec, ["ast_accuracy", "failure_invalid_syntax"]
    )
    assert [r["ast_valid"] for r in score.rows] == [True, False, False]
    assert [r["failure"] for r in score.rows] == [None, "invalid_syntax", "invalid_syntax"]
    assert [r["item_id"] for r in score.rows] == [i.id for i in items]
    assert score.values["ast_accuracy"] == pytest.approx(1 / 3)
    assert score.values["failure_invalid_syntax"] == pytest.approx(2 / 3)
