"""`llada` in the multi-turn agent loop: the step task its DLM trains on, and the prompts it plays with.

The step task must come from the reference conversations only (never a scored item) and pair each round
of the replayed ground truth with its step record; the prompt the policy renders from the loop's live
messages must be the very prompt training used for the same state (else the DLM sees a shape it never
learned). The end-to-end test trains a tiny DLM (seconds) and plays one conversation.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from tiny_dlm import TINY_DLM

from bench.tasks.loading import load_task
from bench.types import Completion, TaskSpec
from systems.agent_loop import LoopLimits, run_agent_loop
from systems.agent_steps import conversation_state, step_pairs, step_prompt, step_task

pytest.importorskip("bfcl_eval")
pytestmark = pytest.mark.skipif(
    not Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent")).is_dir(), reason="needs BENCH_DATA_DIR"
)
TINY = TINY_DLM | {"vocab_size": 600, "max_prompt_tokens": 96}


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    return load_task("bfcl/multi_turn_base", n_references=None, n_holdout=None)


def test_the_step_task_replays_reference_conversations_only(spec):
    steps = step_task(spec)
    refs = [it for it in spec.meta["reference_items"] if it is not None]
    assert {it.id for it in refs}.isdisjoint({it.id for it in spec.items})
    expected = [pair for it in refs for pair in step_pairs(it.meta)]
    assert list(steps.references) == [r for _, r in expected]
    assert steps.meta["reference_prompts"] == [p for p, _ in expected]
    first = refs[0]
    gt_calls = [c for s in first.meta["record"]["turns"][0] for c in s["calls"]]
    assert steps.references[0] == {"calls": gt_calls} and steps.references[1] == {"calls": []}
    assert "Results: " in steps.meta["reference_prompts"][1]


class Recorder:
    """Plays the ground truth and records the DLM prompt the policy would render at each round."""

    def __init__(self, item):
        self.texts = [json.dumps(s) for t in item.meta["record"]["turns"] for s in t]
        self.prompts = []

    def reply(self, item, messages, seed, sample_index, round_index):
        request, results = conversation_state(messages)
        self.prompts.append(step_prompt(item.meta["functions"], request, results))
        return Completion(text=self.texts[round_index], finish_reason="stop")


def test_the_policys_prompts_are_the_training_prompts_for_the_same_state(spec):
    item = spec.items[0]
    rec = Recorder(item)
    one = TaskSpec(spec.name, "", {}, (), (), items=(item,), meta={"multi_turn": True})
    run_agent_loop(one, 1, 0, rec, LoopLimits(history_chars=100_000), "recorder")
    assert rec.prompts == [p for p, _ in step_pairs(item.meta)]


def test_llada_plays_an_episode_with_a_tiny_dlm(spec, monkeypatch):
    from dataclasses import replace

    from bench.context import BenchContext
    from bench.profiles import apply_overrides, resolve_profile
    from metrics.registry import MULTI_TURN_METRICS
    from metrics.scoring import score_cell
    from systems.llada import LLaDASkeletonSystem, LLaDASystem

    dlm = {"backend": "mdlm", "model": "embedded-mdlm", "per_task": True, "params": TINY}
    ctx = BenchContext(
        apply_overrides(resolve_profile("embedded"), {"dlm": dlm}, None), Path(tempfile.mkdtemp())
    )
    one = replace(spec, items=spec.items[:1])
    result = LLaDASystem({"max_steps_per_turn": 2}).generate(one, 1, 0, ctx)
    sample = result.samples[0]
    assert sample.status is None, sample.error
    loop = sample.meta["agent_loop"]
    assert 1 <= loop["steps"] <= 2 * len(one.items[0].meta["turns"]) and result.usage.nfe > 0
    score = score_cell(result.samples, one, MULTI_TURN_METRICS)
    assert score.rows[0]["item_id"] == one.items[0].id and score.rows[0]["rounds"] == loop["steps"]
    with pytest.raises(Exception, match="multi-turn"):
        LLaDASkeletonSystem({}).generate(one, 1, 0, ctx)
