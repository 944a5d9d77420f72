"""The multi-turn state checker (metrics/multiturn.py) agrees with bfcl-eval's `multi_turn_checker`.

Hand-made episodes for every `multi_turn_base` item: the ground truth itself, and mutations that each hit
one of upstream's rules or one of its tolerances: a turn left empty, a call dropped, a value changed, an
argument misnamed (the backend raises), an unknown function, calls spread over several steps, extra
read-only calls, calls moved to the next turn, turns missing. Both checkers see the same calls; the verdict
and the failure class are compared episode by episode, and every class is hit at least once.
"""

from __future__ import annotations

import copy
import json

import pytest

from bench.tasks.bfcl_multi_turn import read_multi_turn
from bench.types import Sample, TaskSpec
from metrics.multiturn import check_episode
from metrics.scoring import score_cell
from tests.bfcl_reference import bfcl_multi_turn_checker

CHECK = bfcl_multi_turn_checker()
pytestmark = pytest.mark.skipif(CHECK is None, reason="bfcl-eval not installed (extra [bfcl])")

#: upstream error type -> our class
UPSTREAM = {
    None: None,
    "multi_turn:force_terminated": "force_terminated",
    "multi_turn:empty_turn_model_response": "empty_turn",
    "multi_turn:instance_state_mismatch": "state_mismatch",
    "multi_turn:execution_response_mismatch": "response_mismatch",
}


def _calls(record: dict) -> list[list[dict]]:
    return [[c for step in turn for c in step["calls"]] for turn in record["turns"]]


def _episode(turn_calls: list[list[dict]], split: bool = False) -> dict:
    turns = []
    for calls in turn_calls:
        steps = [{"calls": [c]} for c in calls] if split else ([{"calls": calls}] if calls else [])
        turns.append(steps + [{"calls": []}])
    return {"turns": turns, "force_quit": False}


def _mutations(record: dict) -> list[tuple[str, dict]]:
    base = _calls(record)
    out = [("truth", _episode(base)), ("split_steps", _episode(base, split=True))]
    nonempty = [t for t, calls in enumerate(base) if calls]
    if not nonempty:
        return out
    t = nonempty[-1]
    first = nonempty[0]
    m = copy.deepcopy(base)
    m[t] = []
    out.append(("empty_turn", _episode(m)))
    m = copy.deepcopy(base)
    m[t] = m[t][:-1]
    out.append(("drop_last_call", _episode(m)))
    m = copy.deepcopy(base)
    m[first] = m[first][1:]
    out.append(("drop_first_call", _episode(m)))
    m = copy.deepcopy(base)
    args = m[t][-1]["arguments"]
    for k, v in args.items():
        args[k] = (
            (v + "_x")
            if isinstance(v, str)
            else (v + 1 if isinstance(v, int) and not isinstance(v, bool) else v)
        )
        break
    out.append(("changed_value", _episode(m)))
    m = copy.deepcopy(base)
    if m[t][-1]["arguments"]:
        k = next(iter(m[t][-1]["arguments"]))
        m[t][-1]["arguments"] = {k + "_zz": v for k, v in m[t][-1]["arguments"].items()}
        out.append(("misnamed_argument", _episode(m)))
    m = copy.deepcopy(base)
    m[first].insert(0, {"name": "no_such_function", "arguments": {"x": 1}})
    out.append(("unknown_function", _episode(m)))
    m = copy.deepcopy(base)
    m[first] = m[first] + copy.deepcopy(m[first][-1:])
    out.append(("repeated_call", _episode(m)))
    if len(base) > 1:
        m = copy.deepcopy(base)
        m[t - 1 if t > 0 else t + 1] += m[t]
        m[t] = []
        out.append(("moved_turn", _episode(m)))
        out.append(("missing_turn", _episode(base[:-1])))
    return out


@pytest.fixture(scope="module")
def items():
    return read_multi_turn("multi_turn_base", None).items


def test_every_episode_gets_upstreams_verdict_and_class(items):
    seen: dict[str, int] = {}
    n = 0
    for item in items:
        for label, episode in _mutations(item.meta["record"]):
            ours = check_episode(episode, item.meta)
            valid, error_type = CHECK(episode, item.meta, item.id)
            assert (ours.valid, ours.failure) == (valid, UPSTREAM[error_type]), (item.id, label, ours.message)
            seen[str(ours.failure)] = seen.get(str(ours.failure), 0) + 1
            n += 1
    assert n > 2000
    for kind in ("None", "force_terminated", "empty_turn", "state_mismatch", "response_mismatch"):
        assert seen.get(kind, 0) >= 5, seen


def test_ground_truth_episodes_score_full_marks_through_the_metrics(items):
    """The metric path (extraction, rows, rounds and invocations) on the canonical episodes."""
    chosen = items[:6]
    spec = TaskSpec("bfcl/multi_turn_base", "", {}, (), (), items=tuple(chosen), meta={"multi_turn": True})
    samples = [Sample(i, json.dumps(it.meta["record"])) for i, it in enumerate(chosen)]
    metrics = ["multi_turn_accuracy", "rounds_per_solved", "tool_calls_per_solved", "tool_error_rate"]
    score = score_cell(samples, spec, metrics)
    assert score.values["multi_turn_accuracy"] == 1.0
    calls = [sum(len(s["calls"]) for t in it.meta["record"]["turns"] for s in t) for it in chosen]
    rounds = [sum(len(t) for t in it.meta["record"]["turns"]) for it in chosen]
    assert score.values["tool_calls_per_solved"] == pytest.approx(sum(calls) / len(calls))
    assert score.values["rounds_per_solved"] == pytest.approx(sum(rounds) / len(rounds))
    assert score.values["tool_error_rate"] == 0.0
    assert [r["item_id"] for r in score.rows] == [it.id for it in chosen]
    assert all(r["state_valid"] and r["failure"] is None for r in score.rows)


def test_a_raising_call_is_the_models_failure_with_its_message(items):
    item = next(it for it in items if it.meta["involved_classes"] == ["GorillaFileSystem"])
    calls = _calls(item.meta["record"])
    calls[0].insert(0, {"name": "cd", "arguments": {"no_such_arg": "x"}})
    check = check_episode(_episode(calls), item.meta)
    assert len(check.tool_errors) == 1
    assert (
        check.tool_errors[0].startswith("cd: Error during execution:")
        and "no_such_arg" in check.tool_errors[0]
    )
