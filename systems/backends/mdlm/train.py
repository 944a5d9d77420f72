"""Training the embedded masked-diffusion LM on one task's references (LLaDA's SFT objective, small).

Each example is `prompt <sep> response`, the prompt left-padded to a fixed width, the response filled
with EOS to a fixed length (LLaDA-Instruct fills with EOS the same way, which teaches it the length).
The response is either the record's JSON text ("natural" form, what `llada` generates) or its
padded-slot skeleton form (what `llada-skeleton` infills: structure fixed, each value followed by
`<nul>` up to the slot budget). A noise level t ~ U(eps, 1) masks each maskable response position with
probability t; the loss is the cross-entropy on masked positions weighted 1/t and divided by the
number of maskable positions (LLaDA Eq. 5). Everything is seeded; steps are fixed (no wall-clock
stopping) so the same data, config and seed give the same weights.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from bench.types import JSON, TaskSpec
from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tokenizer import SPECIALS, BPETokenizer, train_bpe
from systems.skeleton import SkeletonPlan, leaves, segments
from systems.skeleton_infill import training_tokens
from systems.skeleton_prompt import render_prompt, training_example, training_parts, value_pools


@dataclass(frozen=True)
class TrainConfig:
    """Training knobs (all in the cache key)."""

    vocab_size: int = 1024
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 384
    max_prompt_tokens: int = 48
    max_response_tokens: int = 160
    max_slot_tokens: int = 24
    skeleton_fraction: float = 0.4
    steps: int = 900
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 50
    eps: float = 1e-3
    copy_head: bool = True
    hint_swap: float = 0.5
    """Per-hint probability that training swaps in another reference's value (see training_example)."""
    hint_weight: float = 3.0
    """Loss weight of response tokens that spell a hinted value (see hinted_positions)."""
    threads: int | None = field(default=1, compare=False, hash=False)
    """torch threads while training (speed only; not part of the cache key)."""


def record_text(record: JSON) -> str:
    """The natural response form: JSON as `json.dumps` writes it (what parsers expect)."""
    return json.dumps(record, ensure_ascii=False)


def prompt_ids(tok: BPETokenizer, prompt: str, max_tokens: int) -> list[int]:
    """Prompt tokens plus <sep>; over-long prompts keep their tail (fields and hints are at the end)."""
    ids = tok.encode(prompt)[-(max_tokens - 1) :] if max_tokens > 1 else []
    return ids + [tok.sep_id]


@dataclass
class Prepared:
    """Tokenized material the training loop draws batches from."""

    tok: BPETokenizer
    plan: SkeletonPlan
    response_length: int
    pools: dict[str, list] = field(default_factory=dict)


def prepare(spec: TaskSpec, cfg: TrainConfig, tok: BPETokenizer | None = None) -> Prepared:
    """Train the tokenizer on the references (JSON and prompt texts) unless given; size the response window."""
    if tok is None:
        texts = [record_text(r) for r in spec.references]
        rng = random.Random(0)
        texts += [render_prompt(training_parts(spec, r, rng)) for r in spec.references]
        tok = train_bpe(texts, cfg.vocab_size)
    plan = SkeletonPlan(spec.schema, spec.references, lambda s: len(tok.encode(s)), cfg.max_slot_tokens)
    nat = sorted(len(tok.encode(record_text(r))) + 1 for r in spec.references)
    q95 = nat[min(len(nat) - 1, int(0.95 * len(nat)))]
    skel = []
    for r in spec.references:
        toks, _ = training_tokens(
            segments(plan.of_record(r)),
            [lf.value_text or "" for lf in leaves(plan.of_record(r))],
            tok.encode,
            tok.nul_id,
        )
        skel.append(len(toks) + 1)
    skel.sort()
    s95 = skel[min(len(skel) - 1, int(0.95 * len(skel)))]
    return Prepared(tok, plan, min(cfg.max_response_tokens, max(q95, s95, 8)), value_pools(spec.references))


def skeleton_example(prep: Prepared, record: JSON) -> tuple[list[int], list[int]]:
    """Padded-slot tokens of `record` (arrays shortened until it fits) and its slot positions."""
    plan, tok = prep.plan, prep.tok
    tree = plan.of_record(record)

    def toks(t):  # noqa: ANN001, ANN202
        return training_tokens(segments(t), [lf.value_text or "" for lf in leaves(t)], tok.encode, tok.nul_id)

    plan.shrink(tree, lambda t: len(toks(t)[0]) <= prep.response_length)
    return toks(tree)


def value_span(text: bytes, key: str, value: str) -> tuple[int, int] | None:
    """Byte span of `value` (a hint's text) as the value of `key` in a record's JSON text, inside quotes."""
    try:
        candidates = [json.loads(value), value]
    except json.JSONDecodeError:
        candidates = [value]
    for v in candidates:
        written = json.dumps(v, ensure_ascii=False).encode()
        pair = json.dumps(key, ensure_ascii=False).encode() + b": " + written
        at = text.find(pair)
        if at >= 0:
            hi = at + len(pair)
            lo = hi - len(written)
            return (lo + 1, hi - 1) if isinstance(v, str) else (lo, hi)
    return None


def hinted_positions(
    tok: BPETokenizer, resp: list[int], record: JSON, hints: list[tuple[str, str]]
) -> set[int]:
    """Indexes of the response tokens that spell a hinted value in `record`'s JSON text.

    A hinted value is one or two tokens of a ~70-token response, and a low-entropy one (a weekday) costs
    under 2 nats when guessed: too little gradient for a small model to learn to read the hint. Weighting
    these tokens up concentrates the training signal on exactly the behaviour steering needs.
    """
    text = record_text(record).encode()
    ends, pos = [], 0
    for t in resp:
        pos += len(tok.vocab[t]) if t >= len(SPECIALS) else 0  # type: ignore[arg-type]
        ends.append(pos)
    out: set[int] = set()
    for path, value in hints:
        span = value_span(text, path.rsplit(".", 1)[-1], value)
        if span is None:
            continue
        lo, hi = span
        start = 0
        for i, end in enumerate(ends):
            if end > lo and start < hi:
                out.add(i)
            start = end
    return out


def make_batch(
    prep: Prepared, spec: TaskSpec, cfg: TrainConfig, rng: random.Random
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """ids (B, P+R), attention mask, maskable-position mask (response / slot positions), loss weights."""
    tok = prep.tok
    P, R = cfg.max_prompt_tokens, prep.response_length
    ids = torch.full((cfg.batch_size, P + R), tok.pad_id, dtype=torch.long)
    attn = torch.zeros((cfg.batch_size, P + R), dtype=torch.bool)
    maskable = torch.zeros((cfg.batch_size, P + R), dtype=torch.bool)
    weight = torch.ones((cfg.batch_size, P + R))
    for b in range(cfg.batch_size):
        parts, rec = training_example(spec, rng.choice(spec.references), rng, prep.pools, cfg.hint_swap)
        p = prompt_ids(tok, render_prompt(parts), P)
        ids[b, P - len(p) : P] = torch.tensor(p)
        attn[b, P - len(p) :] = True
        if rng.random() < cfg.skeleton_fraction:
            resp, slot_pos = skeleton_example(prep, rec)
            resp = resp[:R]
            for s in slot_pos:
                if s < R:
                    maskable[b, P + s] = True
        else:
            resp = tok.encode(record_text(rec))[:R]
            maskable[b, P:] = True
            if cfg.hint_weight != 1.0:
                for i in hinted_positions(tok, resp, rec, parts.hints):
                    weight[b, P + i] = cfg.hint_weight
        resp = resp + [tok.eos_id] * (R - len(resp))
        ids[b, P:] = torch.tensor(resp)
    return ids, attn, maskable, weight


def content_tokens(tok: BPETokenizer) -> torch.Tensor:
    """(V,) bool: ids whose text has a letter or digit, the only ones the copy head may copy.

    Hints carry values; structure (quotes, colons, commas, braces) always comes from the vocabulary
    head. Letting the copy head copy punctuation made few-shot prompts (full of `", "`) leak quote
    tokens into key positions: superni parse rate fell from 0.72 to 0.13.
    """
    out = torch.zeros(tok.vocab_size, dtype=torch.bool)
    for i in range(len(SPECIALS), tok.vocab_size):
        out[i] = any(c.isalnum() for c in tok.token_text(i))
    return out


def train_model(
    spec: TaskSpec, cfg: TrainConfig, seed: int, log: list[JSON] | None = None
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    """Train from scratch; returns (model in eval mode, prepared tokenizer/plan, seconds)."""
    t0 = time.perf_counter()
    with single_thread(cfg.threads):
        return _train(spec, cfg, seed, log, t0)


@contextmanager
def single_thread(n: int | None) -> Iterator[None]:
    """Run with `n` torch threads (1 by default: on a shared 2-core box one thread is ~4x faster)."""
    old = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _train(
    spec: TaskSpec, cfg: TrainConfig, seed: int, log: list[JSON] | None, t0: float
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prep = prepare(spec, cfg)
    mcfg = ModelConfig(
        vocab_size=prep.tok.vocab_size,
        max_len=cfg.max_prompt_tokens + prep.response_length,
        prompt_width=cfg.max_prompt_tokens if cfg.copy_head else 0,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
    )
    model = MaskedDiffusionTransformer(mcfg)
    if cfg.copy_head:
        model.copyable.copy_(content_tokens(prep.tok))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(cfg.steps):
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        ids, attn, maskable, tok_weight = make_batch(prep, spec, cfg, rng)
        t = (1 - cfg.eps) * torch.rand((ids.shape[0], 1), generator=gen) + cfg.eps
        masked = maskable & (torch.rand(ids.shape, generator=gen) < t)
        noisy = torch.where(masked, torch.full_like(ids, prep.tok.mask_id), ids)
        ce = -model.target_log_probs(noisy, attn, masked, ids[masked])
        weights = (tok_weight / t.expand_as(ids))[masked]
        denom = maskable.sum(dim=1, keepdim=True).clamp_min(1).expand_as(ids)[masked].float()
        loss = (ce * weights / denom).sum() / ids.shape[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if log is not None and (step % 100 == 0 or step == cfg.steps - 1):
            log.append(
                {
                    "step": step,
                    "loss": round(float(loss.detach()), 4),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
    model.eval()
    return model, prep, time.perf_counter() - t0
