"""Generation that ends at the first complete record: the predicate, and the real llama.cpp model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.types import GenerationRequest, SamplingParams
from metrics.extract import extract_record, record_complete

FENCED = 'Sure!\n```json\n{"day": "monday", "note": "a } inside a string"}\n```\nAnd another:\n```json\n{"day": "x"}\n```'
BARE = 'Here: {"day": "monday", "nested": {"a": [1, 2]}} and then more text {"day": "sunday"}'


def earliest_stop(text: str) -> str:
    """The shortest prefix at which record_complete holds (what a streamed generation would keep)."""
    for i in range(1, len(text) + 1):
        if record_complete(text[:i]):
            return text[:i]
    return text


@pytest.mark.parametrize(
    "text",
    [
        FENCED,
        BARE,
        '```\n[{"a": 1}, {"a": 2}]\n```\n{"a": 3}',  # a fenced array: judged once the array closes
        '```json\n```\n{"a": 1}',  # an empty fenced block: extraction fails on it, as on the full text
        "no record at all, just prose with a } brace",
        '{"a": "unterminated',
    ],
)
def test_stopping_at_the_earliest_complete_prefix_extracts_what_the_full_text_does(text: str) -> None:
    prefix = earliest_stop(text)
    full, cut = extract_record(text, "stop"), extract_record(prefix, "stop")
    assert (cut.status, cut.record) == (full.status, full.record)


def test_the_predicate_waits_for_the_record_to_close() -> None:
    assert not record_complete('```json\n{"day": "monday"')
    assert not record_complete('{"a": "}"')  # the brace is inside a string
    assert record_complete('```json\n{"day": "monday"}')
    assert record_complete('{"a": {"b": 1}}')
    assert not record_complete("```json\n")
    assert record_complete("```json\nnot json\n```")  # a closed fence decides extraction (a failure)


def test_a_bare_record_followed_by_a_fence_is_the_documented_policy() -> None:
    text = '{"a": 1}\n```json\n{"a": 2}\n```'
    assert extract_record(text).record == {"a": 2}  # the extraction rule prefers the fenced block
    assert extract_record(earliest_stop(text)).record == {"a": 1}  # generation ended at the first record


def test_off_by_default_keeps_earlier_cache_keys() -> None:
    assert "stop_at_record" not in SamplingParams().to_json()
    assert SamplingParams(stop_at_record=True).to_json()["stop_at_record"] is True


def test_smollm2_stops_after_its_record_and_keeps_the_same_tokens_before_it() -> None:
    from systems.backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend.from_spec({"backend": "llama_cpp", "model": "smollm2-135m-instruct"}, None)
    prompt = (
        'Write one JSON object for a train booking with keys "day" and "leaveAt", in a ```json code block. '
        "Then explain it."
    )
    base = SamplingParams(temperature=0.7, max_tokens=160)
    for seed in range(3):
        full = backend.generate([GenerationRequest.chat(prompt, base, seed, 0)])[0]
        cut = backend.generate([GenerationRequest.chat(prompt, replace(base, stop_at_record=True), seed, 0)])[
            0
        ]
        assert full.text.startswith(cut.text)  # the same sampled tokens, only the tail dropped
        assert cut.tokens_out <= full.tokens_out
        assert cut.tokens_in == full.tokens_in
        if record_complete(full.text):
            assert record_complete(cut.text)
            fe, ce = (
                extract_record(full.text, full.finish_reason),
                extract_record(cut.text, cut.finish_reason),
            )
            if not full.text.lstrip().startswith("{"):  # fenced or prose-first: exact
                assert (ce.status, ce.record) == (fe.status, fe.record)
