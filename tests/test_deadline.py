"""The per-item deadline (bench.deadline) stops a generation mid-way, on the real embedded model.

Before, the agent loop checked the item's clock only between rounds, so a round could run to its token
limit past `item_timeout_s`. Now each round runs under the item's deadline and llama.cpp stops between
tokens (beams between steps). A cut completion is an error: never cached, recorded as a timeout.
"""

from __future__ import annotations

import pytest

from bench.cache import CachedBackend, CallCache
from bench.deadline import DEADLINE_ERROR, deadline, passed, remaining
from bench.types import Completion, GenerationRequest, SamplingParams

STORY = "Write a very long story about a train journey across Europe, with many stations."


def test_nested_deadlines_keep_the_earlier_and_none_means_no_deadline() -> None:
    assert remaining() is None and not passed()
    with deadline(100.0):
        with deadline(0.0):
            assert passed() and remaining() == 0.0
        assert 99.0 < (remaining() or 0) <= 100.0
        with deadline(1000.0):  # a later inner deadline does not extend the outer one
            assert (remaining() or 0) <= 100.0
        with deadline(None):
            assert remaining() is not None
    assert remaining() is None


@pytest.fixture(scope="module")
def backend():  # type: ignore[no-untyped-def]
    from systems.backends.llama_cpp import LlamaCppBackend

    return LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct", "params": {"n_threads": 1}})


@pytest.mark.slow
def test_sampling_stops_at_the_deadline_with_a_prefix_of_the_full_text_and_is_not_cached(
    backend, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    req = GenerationRequest.chat(STORY, SamplingParams(temperature=0.7, max_tokens=240), seed=3)
    cached = CachedBackend(backend, CallCache(tmp_path / "calls.sqlite"))
    with deadline(0.4):
        cut = cached.generate([req])[0]
    assert cut.error == DEADLINE_ERROR and cut.finish_reason == "error"
    assert len(cached.cache) == 0  # an error never sticks in the cache
    full = cached.generate([req])[0]  # no deadline: the whole completion, now cached
    assert full.error is None and len(cached.cache) == 1
    assert full.text.startswith(cut.text) and len(cut.text) < len(full.text)


@pytest.mark.slow
def test_beam_search_stops_at_the_deadline(backend) -> None:  # type: ignore[no-untyped-def]
    p = SamplingParams(temperature=0.0, num_beams=3, max_tokens=400)
    with deadline(0.3):
        comp = backend.generate([GenerationRequest.chat(STORY, p, seed=0)])[0]
    assert comp.error == DEADLINE_ERROR and comp.text == ""


@pytest.mark.slow
def test_a_round_cut_mid_generation_is_the_items_timeout(backend) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("bfcl_eval")
    from bench.tasks.bfcl_multi_turn import read_multi_turn
    from bench.types import TaskSpec
    from systems.agent_loop import LoopLimits, run_agent_loop

    item = next(
        it
        for it in read_multi_turn("multi_turn_base", None).items
        if it.meta["involved_classes"] == ["GorillaFileSystem"]
    )

    class LongTalker:
        """Asks the real model for a long reply each round, as a model that rambles would give."""

        def reply(self, item, messages, seed, sample_index, round_index) -> Completion:  # type: ignore[no-untyped-def]
            p = SamplingParams(temperature=0.7, max_tokens=1200)
            return backend.generate([GenerationRequest.chat(STORY, p, seed, sample_index)])[0]

    spec = TaskSpec("bfcl/multi_turn_base", "", {}, (), (), items=(item,), meta={"multi_turn": True})
    result = run_agent_loop(spec, 1, 0, LongTalker(), LoopLimits(item_timeout_s=0.5), "long-talker")
    sample = result.samples[0]
    assert sample.status is not None and sample.status.value == "timeout"
    assert "mid-generation" in (sample.error or "")
    assert sample.meta["agent_loop"]["steps"] == 1  # the first round itself ran into the deadline
