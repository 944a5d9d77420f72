"""Generation limits from the task: the default max_tokens covers every reference record in its most
verbose form (checked with SmolLM2's real tokenizer, not our chars/3 estimate), and a sample cut off at
our default limit before it wrote a complete record is retried once at twice the limit, on the real
model; an explicit max_tokens is used as is."""

from __future__ import annotations

import json
import os

import pytest

from bench.tasks import load_task
from metrics.extract import extract_record
from systems import gen_limits
from systems.ar import ARSystem

DATA = os.environ.get("BENCH_DATA_DIR")
needs_data = pytest.mark.skipif(not DATA, reason="needs BENCH_DATA_DIR (the real dataset files)")


def _pretty(record: dict) -> str:
    return "```json\n" + json.dumps(record, ensure_ascii=False, indent=2) + "\n```"


def test_percentile_matches_numpy():
    np = pytest.importorskip("numpy")
    xs = [3, 90, 7, 12, 55, 41, 8]
    for q in (0.0, 0.5, 0.95, 1.0):
        assert gen_limits.percentile(xs, q) == pytest.approx(float(np.percentile(xs, 100 * q)))


@needs_data
@pytest.mark.parametrize("task", ["truthfulqa", "self_instruct", "multiwoz/train", "demo/booking"])
def test_default_limit_covers_every_reference_under_the_real_tokenizer(task):
    from systems.backends.llama_cpp import _load_llama, resolve_gguf

    spec = load_task(task, n_references=32, n_holdout=8)
    limit = ARSystem().sampling(spec).max_tokens
    assert limit == gen_limits.task_max_tokens(spec)
    llm = _load_llama(resolve_gguf("smollm2-135m-instruct"), 2048, False, 1)
    real = [len(llm.tokenize(_pretty(r).encode("utf-8"), add_bos=False)) for r in spec.references]
    assert max(real) <= limit  # no reference, pretty-printed in a fence, is cut by our default
    assert limit >= 1.5 * sorted(real)[int(0.95 * (len(real) - 1))]  # the margin is real, not nominal


@needs_data
def test_truthfulqa_gets_more_room_than_the_old_fixed_limit():
    spec = load_task("truthfulqa", n_references=32, n_holdout=8)
    assert ARSystem().sampling(spec).max_tokens > 256  # 192/256 cut every TruthfulQA record


def test_explicit_max_tokens_wins_and_disables_the_retry():
    system = ARSystem({"max_tokens": 40})
    spec = load_task("demo/booking", n_references=8, n_holdout=4)
    assert system.sampling(spec).max_tokens == 40 and not system.limit_is_default()
    assert ARSystem().limit_is_default() and not ARSystem().limit_is_default({"max_tokens": 64})


@pytest.mark.slow
def test_a_cut_at_our_default_is_retried_at_twice_the_limit_on_the_real_model(tmp_path, monkeypatch):
    from bench.cache import CallCache
    from bench.context import BenchContext
    from bench.profiles import resolve_profile
    from metrics.scoring import score_cell

    monkeypatch.setattr("systems.ar.task_max_tokens", lambda spec: 6)  # far too small: every sample is cut
    spec = load_task("demo/booking", n_references=8, n_holdout=4)
    ctx = BenchContext(resolve_profile("embedded"), tmp_path, CallCache(tmp_path / "calls.sqlite"))
    result = ARSystem({"temperature": 0.0, "k_shots": 0, "stop_at_record": False}).generate(spec, 1, 0, ctx)
    assert result.usage.generator_calls == 2  # the sample once more at twice the limit
    for s in result.samples:
        assert s.meta["limit"] == {"max_tokens": 6, "source": "task", "retried_at": 12}
    assert result.trace[0]["retried_at_twice_the_limit"] == 1
    rows = score_cell(result.samples, spec, ["parse_rate"], ctx).rows
    assert all(r["status"] == "truncated" for r in rows)  # still cut at 12: scored as truncated, visibly

    fixed = ARSystem({"temperature": 0.0, "k_shots": 0, "max_tokens": 6}).generate(spec, 1, 0, ctx)
    assert fixed.usage.generator_calls == 1  # the user's own limit: no retry
    assert all(s.meta["limit"] == {"max_tokens": 6, "source": "set"} for s in fixed.samples)


@pytest.mark.slow
def test_a_backend_that_stops_at_the_record_generates_what_the_retry_would_at_once(tmp_path, monkeypatch):
    """Twice the limit up front, stopped at the record: the same text as generate-then-retry (same seed
    and index, so the same tokens), one call instead of two."""
    from bench.cache import CallCache
    from bench.context import BenchContext
    from bench.profiles import resolve_profile

    monkeypatch.setattr("systems.ar.task_max_tokens", lambda spec: 24)
    spec = load_task("demo/booking", n_references=8, n_holdout=4)
    ctx = BenchContext(resolve_profile("embedded"), tmp_path, CallCache(tmp_path / "calls.sqlite"))
    params = {"temperature": 0.7, "k_shots": 0}
    retried = ARSystem({**params, "stop_at_record": False}).generate(spec, 4, 0, ctx)
    direct = ARSystem(params).generate(spec, 4, 0, ctx)
    assert direct.usage.generator_calls == 4 < retried.usage.generator_calls  # at least one was cut at 24
    assert direct.trace[0]["limit_policy"] == "direct"
    assert all(s.meta["limit"]["max_tokens"] == 48 for s in direct.samples)
    for r, d in zip(retried.samples, direct.samples, strict=True):
        # the direct text is the retried one (or the first attempt's, when that already held a record),
        # cut where its record closes
        assert r.text.startswith(d.text)
        assert extract_record(r.text).record == extract_record(d.text).record
