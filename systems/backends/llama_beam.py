"""Beam search over llama.cpp: one context, one sequence id per live beam, a shared KV cache.

llama-cpp-python samples one sequence at a time and has no beam search, yet the paper's Gemma-2 row
decodes with beam width 3 (Agents of Diffusion, experimental setup). Running that row on the
transformers runtime cost more than 28 minutes per TruthfulQA cell here (docs/reproducing.md), so this
module runs the search on llama.cpp itself:

- The context's KV cache is unified, so a beam that extends its parent shares the parent's cells.
  `llama_memory_seq_cp` only tags cells with one more sequence id, and nothing is copied.
- The live beams sit in one half of `2 * width` sequence ids. Each step copies every parent into the
  other half, drops the old half, and decodes each beam's new token.
- Each beam's token is decoded alone, not in one batch with the others. llama.cpp's CPU kernels give a
  one-token batch other logits than a batch of several (up to 0.76 apart here, Q4_1 on AVX-512), and
  beam search turns such differences into other paths: decoded as one batch per step, width 3 on
  "What is the capital of France? Answer in JSON." took another token at position 4 than token-by-token
  decoding, and ended 0.11 nats per token worse. Decoded alone, a beam sees the logits that sampling
  that sequence token by token sees, up to the order of its KV cells (Q8-quantized activations shift a
  little with it: 0.002 nats per token over 24 tokens, tests/test_llama_beam.py). Width 1 is greedy
  decoding, token for token. The price is 1.5x per step (58 against 40 ms at width 3, 331-token prompt).

The search is the standard one that transformers runs for `generate(num_beams=k)` (its beam scorer
with length_penalty 1 and early_stopping False):
- Each step ranks the 2k best (beam, token) continuations by summed log-probability.
- A continuation that ends the text becomes a finished hypothesis if it ranks among the first k. It ends
  the text with EOS, with a stop string, or, with `until`, by completing a record. Its score is the
  summed log-probability over the generated length.
- The first k other continuations go on.
- The search ends when k hypotheses are finished and no live beam can beat the worst of them (best live
  sum over the current length), or at `max_tokens`, where the live beams join the finished ones.

The length counts the ending token too (EOS included), as transformers 5 does (`cur_len + 1 -
prompt length` in `_update_finished_beams`), so no hypothesis has length 0. Ours: a completed record
(`until`) ends a hypothesis; transformers' stopping criteria stop the whole search instead.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bench.deadline import check as check_deadline

_CONTEXTS: dict[tuple[int, int], tuple[int, Any]] = {}  # (model pointer, width) -> (n_ctx, context)
_CONTEXTS_LOCK = threading.Lock()


@dataclass(frozen=True)
class BeamResult:
    """The best hypothesis: its generated tokens (the ending EOS left out), text, score and why it ended."""

    tokens: list[int]
    text: str
    score: float
    finish_reason: str  # "stop" (EOS, stop string or complete record) or "length"
    steps: int  # search steps run (each decodes one token per live beam)


@dataclass
class _Beam:
    seq: int
    tokens: list[int]
    logprob: float


def _context(llm: Any, n_ctx: int, width: int) -> Any:
    """A llama.cpp context over `llm`'s weights with room for 2 * width sequences and at least `n_ctx`
    cells. One per model and width per process: a larger need replaces it (a 10k-cell KV cache of
    SmolLM2 holds about 240 MB), a smaller one reuses it."""
    import llama_cpp

    model = llm._model.model  # the loaded weights; a second context shares them
    key = (ctypes.cast(model, ctypes.c_void_p).value or 0, width)
    with _CONTEXTS_LOCK:
        have = _CONTEXTS.get(key)
        if have is not None and have[0] >= n_ctx:
            return have[1]
        if have is not None:
            llama_cpp.llama_free(have[1])
        # the plain Llama context's settings (flash attention off, its RoPE/YaRN values), so a beam
        # computes the logits that sampling would; llama.cpp's defaults differ (flash attention auto)
        params = type(llm.context_params).from_buffer_copy(llm.context_params)
        params.n_ctx = n_ctx
        params.n_batch = min(512, n_ctx)
        params.n_ubatch = min(512, n_ctx)
        params.n_seq_max = 2 * width
        params.kv_unified = True  # beams share their common prefix's cells
        ctx = llama_cpp.llama_init_from_model(model, params)
        if ctx is None:
            raise RuntimeError(f"llama.cpp could not create a {n_ctx}-token beam-search context")
        _CONTEXTS[key] = (n_ctx, ctx)
        return ctx


def context_size(prompt_tokens: int, max_tokens: int, width: int) -> int:
    """KV cells the search can need: the prompt once plus every live beam's own tokens, in steps of 1024."""
    need = prompt_tokens + width * (max_tokens + 1) + 8
    return -(-need // 1024) * 1024


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class _Decoder:
    """One batch buffer and the calls that feed a context and read its logits."""

    def __init__(self, ctx: Any, n_vocab: int, capacity: int) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.capacity = capacity
        self.batch = llama_cpp.llama_batch_init(capacity, 0, 1)

    def close(self) -> None:
        self._lib.llama_batch_free(self.batch)

    def decode(self, items: Sequence[tuple[int, int, int, bool]]) -> None:
        """Decode (token, position, sequence id, want logits) rows as one batch."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (tok, pos, seq, want) in enumerate(items):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = want
        rc = self._lib.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} (KV cache full?)")

    def logits(self, i: int) -> np.ndarray:
        ptr = self._lib.llama_get_logits_ith(self.ctx, i)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()


def beam_search(
    llm: Any,
    prompt: Sequence[int],
    *,
    width: int,
    max_tokens: int,
    eos: set[int],
    detokenize: Callable[[list[int]], str],
    stop: Sequence[str] = (),
    until: Callable[[str], bool] | None = None,
) -> BeamResult:
    """The best of `width` beams continuing `prompt` (token ids, BOS included where the model wants it).

    `detokenize` turns generated ids into text (stop strings and `until` are judged on it). `until`
    ends a hypothesis once it returns true, for example `metrics.extract.record_complete`.
    """
    import llama_cpp

    if width < 1 or max_tokens < 1 or not prompt:
        raise ValueError("beam_search needs width >= 1, max_tokens >= 1 and a non-empty prompt")
    n_ctx = context_size(len(prompt), max_tokens, width)
    ctx = _context(llm, n_ctx, width)
    memory = llama_cpp.llama_get_memory(ctx)
    llama_cpp.llama_memory_clear(memory, True)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llm._model.model))
    dec = _Decoder(ctx, n_vocab, max(width, min(512, n_ctx)))
    try:
        return _search(dec, memory, list(prompt), width, max_tokens, eos, detokenize, stop, until)
    finally:
        dec.close()
        llama_cpp.llama_memory_clear(memory, True)


def _ends(text: str, stop: Sequence[str], until: Callable[[str], bool] | None) -> str | None:
    """The text a hypothesis ends with, if its last token ended it (cut at a stop string), else None."""
    cuts = [text.index(s) for s in stop if s and s in text]
    if cuts:
        return text[: min(cuts)]
    if until is not None and until(text):
        return text
    return None


# A record closes only on one of these characters, so `until` is asked only when a token holds one.
_CLOSERS = ("}", "]", "`")


def _search(
    dec: _Decoder,
    memory: Any,
    prompt: list[int],
    width: int,
    max_tokens: int,
    eos: set[int],
    detokenize: Callable[[list[int]], str],
    stop: Sequence[str],
    until: Callable[[str], bool] | None,
) -> BeamResult:
    import llama_cpp

    chunk = dec.capacity
    for start in range(0, len(prompt), chunk):
        part = prompt[start : start + chunk]
        last = start + len(part) == len(prompt)
        dec.decode([(t, start + i, 0, last and i == len(part) - 1) for i, t in enumerate(part)])
    beams = [_Beam(seq=0, tokens=[], logprob=0.0)]
    logps = _log_softmax(dec.logits((len(prompt) - 1) % chunk))[None, :]
    finished: list[tuple[float, list[int], str, str]] = []  # (score, tokens, text, finish reason)
    pieces: dict[int, str] = {}
    half, steps = 0, 0
    for step in range(max_tokens):
        check_deadline()  # the agent loop's per-item deadline (bench.deadline): raises once passed
        flat = (np.asarray([b.logprob for b in beams])[:, None] + logps).ravel()
        k = min(2 * width, flat.size)
        top = np.argpartition(-flat, k - 1)[:k]
        top = top[np.argsort(-flat[top], kind="stable")]
        survivors: list[tuple[_Beam, int, float]] = []
        for rank, idx in enumerate(top):
            parent, tok = beams[int(idx) // dec.n_vocab], int(idx) % dec.n_vocab
            total = float(flat[idx])
            tokens = parent.tokens + [tok]
            if tok in eos:
                if rank < width:
                    finished.append((total / len(tokens), parent.tokens, detokenize(parent.tokens), "stop"))
                continue
            if stop or until is not None:
                if tok not in pieces:
                    pieces[tok] = detokenize([tok])
                asks = stop or any(c in pieces[tok] for c in _CLOSERS)
                ended = _ends(detokenize(tokens), stop, until) if asks else None
                if ended is not None:
                    if rank < width:
                        finished.append((total / len(tokens), tokens, ended, "stop"))
                    continue
            survivors.append((parent, tok, total))
            if len(survivors) == width:
                break
        finished.sort(key=lambda f: -f[0])
        del finished[width:]
        if not survivors:
            break
        if len(finished) >= width and finished[-1][0] >= max(s[2] for s in survivors) / (step + 1):
            break
        if step == max_tokens - 1:  # the limit: the live beams join the finished ones
            for parent, tok, total in survivors:
                tokens = parent.tokens + [tok]
                finished.append((total / len(tokens), tokens, detokenize(tokens), "length"))
            break
        half = width - half  # the new beams take the other half of the sequence ids
        new = []
        for j, (parent, tok, total) in enumerate(survivors):
            llama_cpp.llama_memory_seq_cp(memory, parent.seq, half + j, -1, -1)
            new.append(_Beam(seq=half + j, tokens=parent.tokens + [tok], logprob=total))
        for b in beams:
            llama_cpp.llama_memory_seq_rm(memory, b.seq, -1, -1)
        rows = []
        for b in new:  # one decode per beam (numerics: see the module docstring)
            dec.decode([(b.tokens[-1], len(prompt) + step, b.seq, True)])
            rows.append(dec.logits(0))
        steps += 1
        beams = new
        logps = _log_softmax(np.stack(rows))
    finished.sort(key=lambda f: -f[0])
    score, tokens, text, reason = finished[0]
    return BeamResult(tokens=tokens, text=text, score=score, finish_reason=reason, steps=steps)
