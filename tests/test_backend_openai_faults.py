"""The OpenAI backend against loopback servers: the real llama.cpp server, and a fault injector in front of it.

The fault server forwards `ok` requests to llama-cpp-python's server running SmolLM2, so every successful
answer is a real model's; the faults (429, 500, slow, malformed, garbage) come before it. The backend
must retry those, then succeed, or give up after its budget with a message that names the cause.
"""

from __future__ import annotations

import os
import time

import pytest
from servers.fault_openai import FaultServer
from servers.llama_server import LlamaServer

from bench.types import GenerationRequest, SamplingParams
from systems.backends.openai_api import BackendCallError, OpenAIBackend

pytest.importorskip("llama_cpp.server")
pytest.importorskip("openai")

ALIAS = "smollm2-135m-instruct"
SHORT = SamplingParams(temperature=0.7, max_tokens=12)


@pytest.fixture(scope="module")
def llama_server():
    from systems.backends.llama_cpp import resolve_gguf

    with LlamaServer(resolve_gguf(ALIAS), alias=ALIAS, n_ctx=1024) as server:
        yield server


@pytest.fixture
def faults(llama_server):
    with FaultServer(upstream=llama_server.base_url, slow_s=2.5) as server:
        yield server


def backend(base_url: str, **params) -> OpenAIBackend:
    spec = {
        "backend": "openai",
        "model": ALIAS,
        "params": {"base_url": base_url, "backoff_base_s": 0.01, "backoff_max_s": 0.05, **params},
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
    }
    return OpenAIBackend.from_spec(spec)


def ask(text: str, seed: int = 0, index: int = 0, params: SamplingParams = SHORT) -> GenerationRequest:
    return GenerationRequest.chat(text, params, seed=seed, sample_index=index)


def test_real_server_answers_with_usage_cost_and_seeded_reproducibility(llama_server):
    b = backend(llama_server.base_url)
    reqs = [ask("Name one colour.", seed=3, index=i) for i in range(3)]
    first = b.generate(reqs)
    again = b.generate(reqs)
    assert [c.text for c in first] == [c.text for c in again]  # seed + sample index fix the output
    for c in first:
        assert c.text.strip()
        assert c.tokens_in > 10 and 0 < c.tokens_out <= 12
        assert c.finish_reason in ("stop", "length")
        assert c.cost_usd == pytest.approx((c.tokens_in * 1.0 + c.tokens_out * 2.0) / 1e6)


def test_transient_faults_are_retried_until_the_real_answer(faults):
    faults.set_plan(["429", "500", "malformed", "garbage", "503"], then="ok")
    b = backend(faults.base_url, max_retries=5)
    [c] = b.generate([ask("Say hello.")])
    assert c.text.strip() and c.tokens_out > 0
    assert [a for a, _ in faults.log] == ["429", "500", "malformed", "garbage", "503", "ok"]


def test_a_slow_server_times_out_and_the_retry_succeeds(faults):
    faults.set_plan(["slow"], then="ok")
    b = backend(faults.base_url, timeout_s=1.0, max_retries=2)
    t0 = time.perf_counter()
    [c] = b.generate([ask("Say hello.")])
    assert c.text.strip()
    assert [a for a, _ in faults.log] == ["slow", "ok"]
    assert time.perf_counter() - t0 >= 1.0  # the first attempt waited for its timeout


def test_the_callers_deadline_caps_the_request_and_is_not_retried(faults):
    """Under bench.deadline (the agent loop's per-item timeout) a slow server costs the deadline, not
    `timeout_s` times the retries; the completion is the deadline error, which the cache never keeps."""
    from bench.deadline import DEADLINE_ERROR, deadline

    faults.set_plan([], then="slow")  # every answer takes 2.5 s
    b = backend(faults.base_url, timeout_s=30.0, max_retries=5)
    with deadline(0.5):
        [c] = b.generate([ask("Say hello.")])
    assert c.error == DEADLINE_ERROR and c.finish_reason == "error"
    assert len(faults.log) == 1  # cut once at the deadline, no retry


def test_gives_up_after_the_budget_with_a_clear_error(faults):
    faults.set_plan([], then="500")
    b = backend(faults.base_url, max_retries=2)
    with pytest.raises(BackendCallError, match=r"gave up after 3 attempts; last error: HTTP 500"):
        b.generate([ask("Say hello.")])
    assert len(faults.log) == 3


def test_timeouts_exhaust_the_budget_with_a_timeout_message(faults):
    faults.set_plan([], then="slow")
    b = backend(faults.base_url, timeout_s=0.5, max_retries=1)
    with pytest.raises(BackendCallError, match=r"gave up after 2 attempts; last error: timed out after 0.5s"):
        b.generate([ask("Say hello.")])


def test_client_errors_are_not_retried_and_the_key_never_leaks(faults, monkeypatch):
    monkeypatch.setenv("BENCH_TEST_KEY", "sk-test-SECRET-123")
    b = backend(faults.base_url, api_key_env="BENCH_TEST_KEY")
    faults.set_plan([], then="400")
    with pytest.raises(BackendCallError, match="HTTP 400") as err:
        b.generate([ask("Say hello.")])
    assert "not retried" in str(err.value) and len(faults.log) == 1
    for text in (str(err.value), repr(b), str(b.identity())):
        assert "SECRET" not in text
    assert b.identity() == {"backend": "openai", "model": ALIAS}


def test_concurrency_is_bounded(llama_server):
    with FaultServer(upstream=llama_server.base_url) as server:
        server.set_plan([], then="ok")
        b = backend(server.base_url, concurrency=2)
        out = b.generate([ask("Count to three.", index=i) for i in range(5)])
        assert len(out) == 5 and all(c.text for c in out)
        assert server.max_in_flight == 2


def test_openai_proper_needs_its_key_and_rejects_unknown_knobs(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    b = OpenAIBackend.from_spec({"backend": "openai", "model": "gpt-4.1-nano-2025-04-14"})
    assert b.price is not None and b.price.input_per_mtok == pytest.approx(0.10)  # from the catalog table
    with pytest.raises(Exception, match="OPENAI_API_KEY"):
        b.generate([ask("hi")])
    with pytest.raises(Exception, match="top_k"):
        b.request_body(ask("hi", params=SamplingParams(top_k=40)))
    assert os.environ.get("OPENAI_API_KEY") is None


SUITE = """\
name: openai-loopback
profile: embedded
seeds: 1
samples: 2
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
models:
  smollm2-server:
    backend: openai
    model: {alias}
    params: {{base_url: "{good}", dialect: llama_cpp}}
    price: {{input_per_mtok: 1.0, output_per_mtok: 2.0}}
  smollm2-behind-faults:
    backend: openai
    model: {alias}
    params: {{base_url: "{bad}", dialect: llama_cpp, max_retries: 2, backoff_base_s: 0.01, backoff_max_s: 0.02}}
systems:
  ar-server: {{type: ar, models: {{generator: smollm2-server}}, params: {{max_tokens: 120, k_shots: 1}}}}
  ar-grammar-server: {{type: ar-grammar, models: {{generator: smollm2-server}}, params: {{max_tokens: 200, k_shots: 1, max_string_chars: 24}}}}
  ar-faulty: {{type: ar, models: {{generator: smollm2-behind-faults}}, params: {{max_tokens: 120, k_shots: 1}}}}
metrics: [parse_rate, schema_valid]
"""


@pytest.mark.slow
def test_suite_runs_ar_through_the_server_and_only_the_faulty_cell_fails(llama_server, faults, tmp_path):
    """`ar` and `ar-grammar` run through the OpenAI backend against llama.cpp's server; the system whose
    generator sits behind the always-500 fault server fails alone, with the backend's reason."""
    from bench.runner import RunOptions, run_suite
    from bench.store import RunStore

    faults.set_plan([], then="500")
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(alias=ALIAS, good=llama_server.base_url, bad=faults.base_url))
    result = run_suite(
        suite, None, RunOptions(out=str(tmp_path / "run"), executor="inline", use_cache=False, progress=False)
    )
    status = {o.key.system: o for o in result.outcomes}
    assert status["ar-server"].status == "ok"
    assert status["ar-grammar-server"].status == "ok"
    assert status["ar-faulty"].status == "failed"
    assert "gave up after 3 attempts; last error: HTTP 500" in status["ar-faulty"].error
    assert (
        3 <= len(faults.log) <= 6
    )  # two samples in flight, at most three attempts each, then the cell stops
    cells = {c.key.system: c for c in RunStore(result.run_dir).iter_cells()}
    assert cells["ar-server"].metrics["parse_rate"] >= 0.0
    assert cells["ar-grammar-server"].metrics["schema_valid"] == 1.0  # the server applied our grammar
