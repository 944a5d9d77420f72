"""The multi-turn agent loop (systems/agent_loop.py) on hand-made reply sequences.

A `Script` policy replies with fixed texts (no model): the ground truth played back step by step, prose,
half a call, an unknown function, arguments as a string, a model that never stops calling, a runtime that
crashes, a slow one. The loop must execute on BFCL's real backends, classify every reply, never crash, and
tell the model's failures (scored) from the harness's (not scored).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from bench.tasks.bfcl_multi_turn import read_multi_turn
from bench.types import Completion, TaskSpec
from metrics.scoring import score_cell
from systems.agent_loop import LoopLimits, run_agent_loop

pytest.importorskip("bfcl_eval")
METRICS = [
    "multi_turn_accuracy",
    "rounds_per_solved",
    "tool_calls_per_solved",
    "tool_error_rate",
    "invalid_step_rate",
]


class Script:
    """Replies from a list of texts (then `{"calls": []}` forever); records the conversations it saw."""

    def __init__(self, texts: list[str], delay: float = 0.0, crash_at: int | None = None):
        self.texts, self.delay, self.crash_at = list(texts), delay, crash_at
        self.seen: list[tuple] = []

    def reply(self, item, messages, seed, sample_index, round_index):
        self.seen.append(messages)
        if self.crash_at is not None and round_index == self.crash_at:
            raise RuntimeError("runtime fell over")
        time.sleep(self.delay)
        text = self.texts[round_index] if round_index < len(self.texts) else '{"calls": []}'
        return Completion(text=text, tokens_in=10, tokens_out=5, finish_reason="stop", nfe=3)


@pytest.fixture(scope="module")
def fs_item():
    items = read_multi_turn("multi_turn_base", None).items
    return next(it for it in items if it.meta["involved_classes"] == ["GorillaFileSystem"])


def _spec(item) -> TaskSpec:
    return TaskSpec("bfcl/multi_turn_base", "", {}, (), (), items=(item,), meta={"multi_turn": True})


def _replay(item) -> list[str]:
    """The ground truth as a model would play it: each turn's calls, then the turn-ending reply."""
    return [json.dumps(step) for turn in item.meta["record"]["turns"] for step in turn]


def _run(item, policy, **limits):
    spec = _spec(item)
    result = run_agent_loop(spec, 1, 0, policy, LoopLimits(**limits), "script")
    return result, score_cell(result.samples, spec, METRICS)


def test_ground_truth_played_back_is_solved_with_upstreams_counts(fs_item):
    result, score = _run(fs_item, Script(_replay(fs_item)))
    sample = result.samples[0]
    assert json.loads(sample.text) == fs_item.meta["record"]
    assert sample.status is None and sample.meta["item_id"] == fs_item.id
    loop = sample.meta["agent_loop"]
    n_calls = sum(len(t) for t in fs_item.meta["ground_truth"])
    assert loop["tool_calls"] == n_calls and loop["raised"] == 0 and loop["stopped"] == "done"
    assert score.values["multi_turn_accuracy"] == 1.0
    assert score.values["rounds_per_solved"] == loop["steps"] == 2 * len(fs_item.meta["turns"])
    assert score.values["tool_calls_per_solved"] == n_calls
    assert result.usage.generator_calls == loop["steps"] and result.usage.nfe == 3 * loop["steps"]
    # the model saw the results of its calls: after the first step, a results message
    assert result.samples[0].meta["agent_loop"]["trace"][0]["results"]


def test_results_are_fed_back_to_the_model(fs_item):
    policy = Script(_replay(fs_item))
    _run(fs_item, policy)
    second = policy.seen[1]
    assert second[0][0] == "system" and "Available functions" in second[0][1]
    assert second[-1][0] == "user" and second[-1][1].startswith("Results of your calls:")
    assert second[-2][0] == "assistant" and json.loads(second[-2][1])["calls"]


@pytest.mark.parametrize(
    "reply",
    [
        "I would move the file for you.",  # prose
        '{"calls": [{"name": "mv", "arguments": {"source": "fin',  # half a call
        '{"calls": [{"name": "mv", "arguments": "{\\"source\\": \\"a\\"}"}]}',  # arguments as a string
        "",
    ],
)
def test_an_undecodable_reply_ends_the_turn_and_is_scored_not_crashed(fs_item, reply):
    result, score = _run(fs_item, Script([reply] * 20))
    sample = result.samples[0]
    assert sample.status is None  # the model's failure, scored
    loop = sample.meta["agent_loop"]
    assert loop["undecodable_steps"] == len(fs_item.meta["turns"]) == loop["steps"]
    assert loop["tool_calls"] == 0
    assert score.values["multi_turn_accuracy"] == 0.0
    assert score.rows[0]["failure"] == "empty_turn"
    assert score.values["invalid_step_rate"] == 1.0


def test_unknown_function_and_bad_arguments_are_model_failures_with_messages(fs_item):
    bad = [
        '{"calls": [{"name": "teleport", "arguments": {"to": "mars"}}, {"name": "cd", "arguments": {"dir": 3}}]}'
    ]
    result, score = _run(fs_item, Script(bad))
    sample = result.samples[0]
    results = sample.meta["agent_loop"]["trace"][0]["results"]
    assert [r["raised"] for r in results] == [True, True]
    assert results[0]["result"] == "Error during execution: name 'teleport' is not defined"
    assert "dir" in results[1]["result"]
    assert score.values["tool_error_rate"] == 1.0
    assert score.rows[0]["n_tool_errors"] == 2 and score.rows[0]["tool_errors"][0].startswith("teleport:")


def test_a_model_that_never_stops_calling_is_force_quit(fs_item):
    call = '{"calls": [{"name": "pwd", "arguments": {}}]}'
    result, score = _run(fs_item, Script([call] * 50), max_steps_per_turn=3)
    sample = result.samples[0]
    assert sample.status is None and json.loads(sample.text)["force_quit"] is True
    assert sample.meta["agent_loop"]["steps"] == 3 and sample.meta["agent_loop"]["stopped"] == "max_steps"
    assert score.rows[0]["failure"] == "force_terminated"


def test_a_crash_of_the_runtime_is_a_harness_failure(fs_item):
    result, score = _run(fs_item, Script(_replay(fs_item), crash_at=1))
    sample = result.samples[0]
    assert sample.status is not None and sample.status.is_harness_failure
    assert "RuntimeError: runtime fell over" in sample.error
    assert score.values["multi_turn_accuracy"] != score.values["multi_turn_accuracy"]  # NaN: not scored


def test_the_item_timeout_stops_the_episode_as_a_harness_failure(fs_item):
    result, _ = _run(fs_item, Script(_replay(fs_item), delay=0.05), item_timeout_s=0.08)
    sample = result.samples[0]
    assert sample.status is not None and sample.status.value == "timeout"
    assert "item timeout" in sample.error
    assert 1 <= sample.meta["agent_loop"]["steps"] < 2 * len(fs_item.meta["turns"])


def test_old_turns_are_dropped_past_the_history_budget_but_the_current_turn_is_kept(fs_item):
    policy = Script(_replay(fs_item))
    _run(fs_item, policy, history_chars=200)
    last = policy.seen[-1]
    users = [c for r, c in last if r == "user"]
    assert users[0].startswith("(earlier requests omitted)")
    assert fs_item.meta["turns"][-1][0]["content"] in users[0]


def test_a_backend_that_edits_its_arguments_does_not_rewrite_the_record():
    items = read_multi_turn("multi_turn_base", None).items
    item = next(it for it in items if any("lockDoors" in c for t in it.meta["ground_truth"] for c in t))
    result, _ = _run(item, Script(_replay(item)))
    assert json.loads(result.samples[0].text) == item.meta["record"]


@pytest.mark.skipif(
    not Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent")).is_dir(), reason="needs BENCH_DATA_DIR"
)
def test_the_loop_runs_from_a_suite_task_name():
    """The loop behind the task name: `load_task` gives a multi-turn spec whose held-out items ar plays."""
    from bench.tasks.loading import load_task
    from systems.agent_loop import is_multi_turn

    full = load_task("bfcl/multi_turn_base", n_references=None, n_holdout=None)
    assert is_multi_turn(full) and full.items and all(it.meta["multi_turn"] for it in full.items)
    held = {json.dumps(r, sort_keys=True) for r in full.holdout}
    assert all(json.dumps(it.meta["record"], sort_keys=True) in held for it in full.items)
    assert not any(json.dumps(r, sort_keys=True) in held for r in full.references)
    assert replace(full, items=full.items[:1]).for_sample(0).meta["item_id"] == full.items[0].id


def test_absurd_arguments_cannot_hang_or_leak_into_the_process():
    import decimal

    from bench.tasks.bfcl_env import BFCLEnvironment

    env = BFCLEnvironment({}, ["MathAPI"])
    before = decimal.getcontext().prec
    ex = env.execute("power", {"base": 9, "exponent": 999999999})
    assert ex.raised and "outside the harness's bound" in ex.result
    ok = env.execute("square_root", {"number": 2, "precision": 5})
    assert not ok.raised and "1.4142" in ok.result
    assert decimal.getcontext().prec == before  # MathAPI's precision does not leak
    huge = env.execute("power", {"base": 10, "exponent": 999})  # a 1000-digit int: still rendered
    assert not huge.raised
