"""The agent loop with the real embedded model: SmolLM2-135M (llama.cpp) plays a BFCL multi-turn item.

Bounded: one single-turn-conversation item, at most two rounds per turn, short replies; `ar`
(unconstrained) and `ar-grammar` (each step under the grammar of the item's call schema). Whatever the model
writes must be classified without a crash, the calls it makes run on BFCL's backends, and our verdict on
the resulting episode must equal bfcl-eval's own multi-turn checker's.
"""

from __future__ import annotations

import json

import pytest

from bench.context import BenchContext
from bench.profiles import resolve_profile
from bench.tasks.bfcl_multi_turn import read_multi_turn
from bench.types import TaskSpec
from metrics.registry import MULTI_TURN_FAILURE_CLASSES, MULTI_TURN_METRICS
from metrics.scoring import score_cell
from tests.bfcl_reference import bfcl_multi_turn_checker

pytest.importorskip("llama_cpp")
CHECK = bfcl_multi_turn_checker()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(CHECK is None, reason="bfcl-eval not installed")]
ITEM = "multi_turn_base_50"  # one user turn, VehicleControlAPI: unlock the doors, headlights on


@pytest.fixture(scope="module")
def spec() -> TaskSpec:
    item = next(it for it in read_multi_turn("multi_turn_base", None).items if it.id == ITEM)
    return TaskSpec("bfcl/multi_turn_base", "", {}, (), (), items=(item,), meta={"multi_turn": True})


@pytest.mark.parametrize(
    "kind,params",
    [("ar", {"max_tokens": 48}), ("ar-grammar", {"max_tokens": 96})],
)
def test_smollm2_episodes_are_classified_and_agree_with_bfcl(spec, tmp_path, monkeypatch, kind, params):
    from systems.ar import ARSystem
    from systems.ar_grammar import ARGrammarSystem

    monkeypatch.setenv("BENCH_THREADS", "1")
    system = (ARSystem if kind == "ar" else ARGrammarSystem)(
        {"k_shots": 0, "temperature": 0.7, "max_steps_per_turn": 2, "item_timeout_s": 120, **params}
    )
    ctx = BenchContext(resolve_profile("embedded"), tmp_path)
    result = system.generate(spec, 1, 7, ctx)
    sample = result.samples[0]
    assert sample.status is None, sample.error  # the model's output never makes a harness failure
    loop = sample.meta["agent_loop"]
    assert 1 <= loop["steps"] <= 2 and len(loop["trace"]) == loop["steps"]
    assert result.usage.generator_calls == loop["steps"] and result.usage.tokens_in > 0
    for step in loop["trace"]:  # every reply classified: its calls ran (with results), or it ended the turn
        assert ("results" in step) == bool(step["calls"])
    score = score_cell(result.samples, spec, MULTI_TURN_METRICS)
    row = score.rows[0]
    assert row["item_id"] == ITEM and row["rounds"] == loop["steps"]
    assert row["failure"] is None or row["failure"] in MULTI_TURN_FAILURE_CLASSES
    episode = json.loads(sample.text)
    if not episode["force_quit"]:
        valid, _ = CHECK(episode, spec.items[0].meta, ITEM)
        assert valid == row["state_valid"]
    if kind == "ar-grammar":  # constrained: every reply decodes as a call record
        assert loop["undecodable_steps"] == 0
