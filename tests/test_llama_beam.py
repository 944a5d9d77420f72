"""Beam search over llama.cpp sequences, checked against an independent search on the real SmolLM2 model.

The reference keeps one saved llama.cpp state per beam (`save_state`/`load_state` on the plain `Llama`
object) and extends each beam alone, token by token: no shared KV cells, no sequence ids. Both decode
one token per call; their KV cells lie in another order, which shifts the logits a little (llama_beam's
docstring), so the tokens must agree and the scores within 0.01 nats per token. Both searches
must pick the same tokens with the same scores. The search rules (2k candidates, the first k may finish,
score = summed log-probability / generated length with the ending token counted, stop once k are finished
and no live beam beats the worst) are written out again here, from transformers' description of its
beam search (length_penalty 1, early_stopping False).
"""

from __future__ import annotations

import numpy as np
import pytest

from bench.types import GenerationRequest, SamplingParams
from metrics.extract import record_complete

pytestmark = pytest.mark.slow

PROMPTS = [
    "What is the capital of France? Answer in JSON.",
    'Write one JSON object for a train booking with keys "day" and "leaveAt".',
]


@pytest.fixture(scope="module")
def model():  # type: ignore[no-untyped-def]
    from systems.backends.llama_cpp import LlamaCppBackend, _load_llama

    backend = LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct", "params": {"n_threads": 1}})
    llm = _load_llama(backend.path, backend.n_ctx, False, 1)
    return backend, llm


@pytest.fixture(scope="module")
def scorer(model):  # type: ignore[no-untyped-def]
    """The same weights with every row's logits kept (`scores`), for the reference search."""
    from systems.backends.llama_cpp import _load_llama

    return _load_llama(model[0].path, model[0].n_ctx, True, 1)


def _logp(llm) -> np.ndarray:  # type: ignore[no-untyped-def]
    row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
    row -= row.max()
    return row - np.log(np.exp(row).sum())


def reference_beam_search(llm, prompt: list[int], width: int, max_tokens: int, eos: int):  # type: ignore[no-untyped-def]
    """Beam search with one saved state per beam; (score, tokens, reason) of the best."""
    llm.reset()
    llm.eval(prompt)
    beams = [([], 0.0, llm.save_state(), _logp(llm))]
    finished: list[tuple[float, list[int], str]] = []
    for step in range(max_tokens):
        cands = []
        for b, (_tokens, total, _state, logp) in enumerate(beams):
            for tok in np.argsort(-logp)[: 2 * width]:
                cands.append((total + float(logp[tok]), b, int(tok)))
        cands.sort(key=lambda c: -c[0])
        cands = cands[: 2 * width]
        live = []
        for rank, (total, b, tok) in enumerate(cands):
            tokens = beams[b][0] + [tok]
            if tok == eos:
                if rank < width:
                    finished.append((total / len(tokens), beams[b][0], "stop"))
                continue
            live.append((total, b, tok))
            if len(live) == width:
                break
        finished = sorted(finished, key=lambda f: -f[0])[:width]
        if len(finished) >= width and finished[-1][0] >= max(t for t, _, _ in live) / (step + 1):
            break
        if step == max_tokens - 1:
            finished += [(t / (step + 1), beams[b][0] + [tok], "length") for t, b, tok in live]
            break
        new = []
        for total, b, tok in live:
            llm.load_state(beams[b][2])
            llm.eval([tok])
            new.append((beams[b][0] + [tok], total, llm.save_state(), _logp(llm)))
        beams = new
    return max(finished, key=lambda f: f[0])


@pytest.mark.parametrize("question", PROMPTS)
def test_shared_cell_search_matches_a_search_with_one_state_per_beam(model, scorer, question: str) -> None:  # type: ignore[no-untyped-def]
    from systems.backends.llama_beam import beam_search

    backend, llm = model
    prompt = backend._prompt_tokens(llm, [{"role": "user", "content": question}])
    eos = int(llm.token_eos())
    want_score, want_tokens, want_reason = reference_beam_search(scorer, prompt, 3, 24, eos)
    got = beam_search(
        llm,
        prompt,
        width=3,
        max_tokens=24,
        eos={eos},
        detokenize=lambda ids: llm.detokenize(ids).decode("utf-8", "ignore"),
    )
    assert got.tokens == want_tokens
    assert got.finish_reason == want_reason
    # the same sums up to KV-cell order (module docstring): well under 0.01 nats per token
    assert got.score == pytest.approx(want_score, abs=0.01)


def test_width_one_is_greedy_decoding(model) -> None:  # type: ignore[no-untyped-def]
    backend, _ = model
    p = SamplingParams(temperature=0.0, max_tokens=48)
    req = GenerationRequest.chat(PROMPTS[1], p, seed=0)
    greedy = backend.generate([req])[0]
    from systems.backends.llama_beam import beam_search

    _, llm = model
    got = beam_search(
        llm,
        backend._prompt_tokens(llm, [{"role": "user", "content": PROMPTS[1]}]),
        width=1,
        max_tokens=48,
        eos={int(llm.token_eos())},
        detokenize=lambda ids: llm.detokenize(ids).decode("utf-8", "ignore"),
    )
    assert got.text == greedy.text


def test_backend_beams_are_deterministic_end_at_the_record_and_count_tokens(model) -> None:  # type: ignore[no-untyped-def]
    """Three copy prompts under a width-3 beam. Which of them the 135M model copies and which it loops on
    depends on the CPU's float results (seen: the first loops into nested objects on an AMD EPYC VM and
    closes its record on another machine), so the test asks for most of them to close a record and checks
    the harness on each: determinism, the text ending where the record closes, token counts, and a
    beam that never closed its record ending at the token budget."""
    backend, llm = model
    p = SamplingParams(temperature=0.0, num_beams=3, max_tokens=160, stop_at_record=True)
    copies = [
        'Copy this JSON object exactly, in a ```json code block: {"day": "monday", "leaveAt": "09:15"}',
        'Copy this JSON object exactly: {"day": "monday", "leaveAt": "09:15"}',
        'Return this JSON object unchanged, in a ```json code block: {"day": "friday"}',
    ]
    closed = 0
    for copy in copies:
        reqs = [GenerationRequest.chat(copy, p, seed=s) for s in (0, 1)]
        a, b = backend.generate(reqs)
        assert a.text == b.text  # beam search ignores the seed
        assert a.tokens_in == len(backend._prompt_tokens(llm, [{"role": "user", "content": copy}]))
        if a.finish_reason != "stop":
            assert a.finish_reason == "length" and not record_complete(a.text) and a.tokens_out == 160
            continue
        closed += 1
        assert record_complete(a.text)
        # the text ends where the record closes: no shorter prefix (on token bounds) holds it
        ids = llm.tokenize(a.text.encode("utf-8"), add_bos=False, special=False)
        assert not record_complete(llm.detokenize(ids[:-1]).decode("utf-8", "ignore"))
        assert abs(a.tokens_out - len(ids)) <= 2  # re-tokenising the text may merge a piece or two
    assert closed >= 2


def test_stop_strings_cut_the_text_and_a_grammar_is_refused(model) -> None:  # type: ignore[no-untyped-def]
    backend, _ = model
    p = SamplingParams(temperature=0.0, num_beams=2, max_tokens=64, stop=('"',))
    c = backend.generate([GenerationRequest.chat(PROMPTS[1], p, seed=0)])[0]
    assert '"' not in c.text and c.finish_reason == "stop"
    g = SamplingParams(temperature=0.0, num_beams=2, max_tokens=8, json_schema={"type": "object"})
    e = backend.generate([GenerationRequest.chat(PROMPTS[1], g, seed=0)])[0]
    assert e.finish_reason == "error" and "grammar" in (e.error or "")
