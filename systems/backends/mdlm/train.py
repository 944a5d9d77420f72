"""Training the embedded masked-diffusion LM on one task's references (LLaDA's SFT objective, small).

Each example is `prompt <sep> response`, the prompt right-aligned to a fixed width (256 tokens; see
conditioning.py for how longer prompts are cut), the response filled with EOS to a fixed length (LLaDA-
Instruct fills with EOS the same way, which teaches it the length). The response is either the
record's JSON text ("natural" form, what `llada` generates) or its padded-slot skeleton form (what
`llada-skeleton` infills). Prompts carry instructions, field lists, `field: value` hints (with swaps)
and natural-language notes (systems/diffusion_notes.py) made true of the record by counterfactual
edits. A noise level t ~ U(eps, 1) masks each maskable response position with probability t; the
loss is the cross-entropy on masked positions weighted 1/t and divided by the number of maskable
positions (LLaDA Eq. 5). Everything is seeded; steps are fixed (no wall-clock stopping) so the same
data, config and seed give the same weights.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from bench.types import JSON, TaskSpec
from systems.backends.mdlm.conditioning import EMBED_DIM, LineEmbedder, batch_cond, encode_prompt
from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tokenizer import SPECIALS, BPETokenizer, train_bpe
from systems.diffusion_notes import Note, NoteSpace, get_path
from systems.skeleton import SkeletonPlan, leaves, segments
from systems.skeleton_infill import training_tokens
from systems.skeleton_prompt import (
    GENERIC_INSTRUCTIONS,
    DiffusionPrompt,
    hint_text,
    leaf_items,
    render_prompt,
    training_example,
    training_parts,
    value_pools,
)


@dataclass(frozen=True)
class TrainConfig:
    """Training knobs (all in the cache key)."""

    vocab_size: int = 1024
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 384
    max_prompt_tokens: int = 256
    max_response_tokens: int = 320
    max_slot_tokens: int = 24
    skeleton_fraction: float = 0.4
    steps: int = 900
    batch_size: int | None = None
    """None: as many examples as fit `batch_tokens` (at least 8, at most 32: MultiWOZ gets 32, as in
    mdlm-6; mdlm-7's 4096-token budget gave it 20, and hints stopped working)."""
    batch_tokens: int = 6400
    lr: float = 2e-3
    warmup: int = 50
    eps: float = 1e-3
    copy_head: bool = True
    hint_swap: float = 0.5
    """Per-hint probability that training swaps in another reference's value (see training_example)."""
    hint_weight: float = 3.0
    """Loss weight of response tokens that spell a hinted value (see hinted_positions)."""
    note_kinds: tuple[str, ...] = ()
    """Note kinds the training prompts carry (systems/diffusion_notes.KINDS); () = no notes."""
    note_prob: float = 0.6
    """Share of training prompts with 1-2 natural-language notes (when `note_kinds` is not empty)."""
    note_weight: float = 3.0
    """Loss weight of response tokens that spell a value a note constrains (see noted_values)."""
    example_prob: float = 0.3
    """Share of training batches whose prompts carry 1-2 few-shot examples (`llada` uses 2)."""
    note_embedder: str | None = None
    """Sentence embedder whose line embeddings condition the prompt (None = tokens only)."""
    note_pool: int = 600
    """With an embedder, training draws its notes from this many notes drawn once (seeded) and embedded
    up front (embedding every freshly drawn note would cost more than the training steps on a CPU);
    without one, every note is drawn fresh."""
    threads: int | None = field(default=1, compare=False, hash=False)
    """torch threads while training (speed only; not part of the cache key)."""


def record_text(record: JSON) -> str:
    """The natural response form: JSON as `json.dumps` writes it (what parsers expect)."""
    return json.dumps(record, ensure_ascii=False)


def prompt_ids(tok: BPETokenizer, prompt: str, max_tokens: int) -> list[int]:
    """Prompt tokens plus <sep>, as the model reads them (see conditioning.encode_prompt)."""
    return encode_prompt(tok, prompt, max_tokens).ids


@dataclass
class Prepared:
    """Tokenized material the training loop draws batches from."""

    tok: BPETokenizer
    plan: SkeletonPlan
    response_length: int
    pools: dict[str, list] = field(default_factory=dict)
    space: NoteSpace | None = None
    fit: list[JSON] = field(default_factory=list)
    """References whose JSON fits the response window with its EOS (natural-form training targets)."""
    pool: dict[str, list[Note]] = field(default_factory=dict)
    """Training notes by kind (training phrasings only), drawn up front when an embedder conditions them."""
    kinds: list[str] = field(default_factory=list)
    """The note kinds training draws (the configured ones the task allows)."""


def prepare(spec: TaskSpec, cfg: TrainConfig, tok: BPETokenizer | None = None) -> Prepared:
    """Train the tokenizer on the references (JSON and prompt texts) unless given; size the response window."""
    space = NoteSpace(spec)
    if tok is None:
        texts = [record_text(r) for r in spec.references]
        rng = random.Random(0)
        for r in spec.references:
            parts = training_parts(spec, r, rng)
            notes, _ = add_notes(space, parts, r, rng, 1.0)
            parts.notes = [n.text for n in notes]
            texts.append(render_prompt(parts))
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
    window = min(cfg.max_response_tokens, max(q95, s95, 8))
    fit = [r for r in spec.references if len(tok.encode(record_text(r))) <= window] or list(spec.references)
    kinds = [k for k in space.kinds() if k in cfg.note_kinds]
    pool = note_pool(space, cfg.note_pool, kinds) if cfg.note_embedder and kinds else {}
    return Prepared(tok, plan, window, value_pools(spec.references), space, fit, pool, kinds)


def note_pool(space: NoteSpace, n: int, kinds: list[str] | None = None) -> dict[str, list[Note]]:
    """`n` training notes, kinds in turn, drawn with a fixed seed (part of what the cache key fixes)."""
    rng = random.Random(1234)
    kinds = space.kinds() if kinds is None else kinds
    pool: dict[str, list[Note]] = {k: [] for k in kinds}
    for i in range(n if kinds else 0):
        note = space.draw(kinds[i % len(kinds)], rng)
        if note is not None:
            pool[note.kind].append(note)
    return {k: v for k, v in pool.items() if v}


def add_notes(
    space: NoteSpace,
    parts: DiffusionPrompt,
    record: JSON,
    rng: random.Random,
    prob: float,
    pool: dict[str, list[Note]] | None = None,
    kinds: list[str] | None = None,
) -> tuple[list[Note], JSON]:
    """With probability `prob`, 1-2 notes (training phrasings) and `record` edited so that they hold.

    Kinds are drawn uniformly among `kinds` (default: all the task allows; with a `pool`, its kinds);
    a length note is redrawn until the record already satisfies it (text cannot be edited to a length).
    Notes a later edit broke are dropped.
    """
    if kinds is None:
        kinds = list(pool) if pool else space.kinds()
    if not kinds or rng.random() >= prob:
        return [], record
    notes: list[Note] = []
    for _ in range(rng.choice((1, 1, 2))):
        kind = rng.choice(kinds)
        for _try in range(4):
            note = rng.choice(pool[kind]) if pool else space.draw(kind, rng)
            if note is None:
                break
            new = space.satisfy(note, record, rng, parts.examples)
            if new is not None:
                record = new
                notes.append(note)
                break
    kept = [n for n in notes if n.holds(record, parts.examples)]
    if kept:  # hints must stay true of the edited record
        values = dict(leaf_items(record))
        parts.hints = [(p, hint_text(values[p])) for p, _ in parts.hints if p in values]
    return kept, record


def noted_values(notes: list[Note], record: JSON) -> list[tuple[str, str]]:
    """(path, value text) of the fields the notes constrain, for the value-token loss weight."""
    out = []
    for n in notes:
        paths = [n.path] + ([n.arg[0]] if n.kind == "relation" else [])
        for p in paths:
            v = get_path(record, p)
            if v is not None and n.kind != "length":
                out.append((p, hint_text(v)))
    return out


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
        pos += len(tok.token_bytes(t)) if t >= len(SPECIALS) else 0
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


@dataclass
class Batch:
    """One training batch; prompts right-aligned to the batch's widest prompt (`offset` columns dropped)."""

    ids: torch.Tensor
    attn: torch.Tensor
    maskable: torch.Tensor
    weight: torch.Tensor
    offset: int
    cond: tuple[torch.Tensor, torch.Tensor] | None


def batch_size_for(prep: Prepared, cfg: TrainConfig) -> int:
    if cfg.batch_size:
        return cfg.batch_size
    return max(8, min(32, cfg.batch_tokens // (prep.response_length + cfg.max_prompt_tokens // 2)))


def make_batch(
    prep: Prepared,
    spec: TaskSpec,
    cfg: TrainConfig,
    rng: random.Random,
    embedder: LineEmbedder | None = None,
) -> Batch:
    """A batch of `prompt <sep> response` examples with notes, hints and few-shot examples drawn at random.

    Whether the prompts carry few-shot examples is drawn per batch, so batches without them stay short
    (the padded width is the batch's widest prompt).
    """
    tok = prep.tok
    B, P, R = batch_size_for(prep, cfg), cfg.max_prompt_tokens, prep.response_length
    k = rng.choice((1, 2, 2)) if rng.random() < cfg.example_prob else 0
    encs, resps, slots, weights = [], [], [], []
    for _ in range(B):
        skeleton = rng.random() < cfg.skeleton_fraction
        target = rng.choice(spec.references if skeleton else prep.fit)
        parts, rec = training_example(spec, target, rng, prep.pools, cfg.hint_swap, n_examples=k)
        notes, rec = (
            add_notes(prep.space, parts, rec, rng, cfg.note_prob, prep.pool, prep.kinds)
            if prep.space and prep.kinds
            else ([], rec)
        )
        parts.notes = [n.text for n in notes]
        encs.append(encode_prompt(tok, render_prompt(parts), P))
        w: dict[int, float] = {}
        if skeleton:
            resp, slot_pos = skeleton_example(prep, rec)
            resp, slot_pos = resp[:R], [s for s in slot_pos if s < R]
        else:
            resp, slot_pos = tok.encode(record_text(rec))[:R], None
            for i in hinted_positions(tok, resp, rec, parts.hints):
                w[i] = cfg.hint_weight
            for i in hinted_positions(tok, resp, rec, noted_values(notes, rec)):
                w[i] = max(w.get(i, 1.0), cfg.note_weight)
        resps.append(resp + [tok.eos_id] * (R - len(resp)))
        slots.append(slot_pos)
        weights.append(w)
    pw = max(len(e.ids) for e in encs)
    ids = torch.full((B, pw + R), tok.pad_id, dtype=torch.long)
    attn = torch.zeros((B, pw + R), dtype=torch.bool)
    maskable = torch.zeros((B, pw + R), dtype=torch.bool)
    weight = torch.ones((B, pw + R))
    for b, (e, resp, slot_pos, w) in enumerate(zip(encs, resps, slots, weights, strict=True)):
        ids[b, pw - len(e.ids) : pw] = torch.tensor(e.ids)
        attn[b, pw - len(e.ids) :] = True
        ids[b, pw:] = torch.tensor(resp)
        if slot_pos is None:
            maskable[b, pw:] = True
        else:
            maskable[b, [pw + s for s in slot_pos]] = True
        for i, wi in w.items():
            weight[b, pw + i] = wi
    return Batch(ids, attn, maskable, weight, P - pw, batch_cond(encs, pw, embedder))


def copy_alternates(tok: BPETokenizer) -> torch.Tensor:
    """(V,) ids: each token's variant without its leading space (itself when there is none)."""
    index = {tok.token_bytes(i): i for i in range(len(SPECIALS), tok.vocab_size)}
    alt = torch.arange(tok.vocab_size, dtype=torch.long)
    for i in range(len(SPECIALS), tok.vocab_size):
        b = tok.token_bytes(i)
        if b[:1] == b" " and b[1:] in index:
            alt[i] = index[b[1:]]
    return alt


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
    spec: TaskSpec,
    cfg: TrainConfig,
    seed: int,
    log: list[JSON] | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    """Train from scratch; returns (model in eval mode, prepared tokenizer/plan, seconds).

    `progress` receives a status line (step, loss, ETA) about every 5% of the steps.
    """
    t0 = time.perf_counter()
    with single_thread(cfg.threads):
        return _train(spec, cfg, seed, log, t0, progress)


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
    spec: TaskSpec,
    cfg: TrainConfig,
    seed: int,
    log: list[JSON] | None,
    t0: float,
    progress: Callable[[str], None] | None,
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prep = prepare(spec, cfg)
    embedder = LineEmbedder(cfg.note_embedder) if cfg.note_embedder else None
    if embedder is not None:
        if progress is not None:
            progress(f"embedded DLM: embedding {sum(map(len, prep.pool.values()))} training notes")
        lines = [n.text for notes in prep.pool.values() for n in notes]
        lines += [spec.instruction.strip()] + [
            g.format(name=spec.name.split("/")[-1]) for g in GENERIC_INSTRUCTIONS
        ]
        embedder.vectors([x for x in lines if x])
    mcfg = ModelConfig(
        vocab_size=prep.tok.vocab_size,
        max_len=cfg.max_prompt_tokens + prep.response_length,
        prompt_width=cfg.max_prompt_tokens if cfg.copy_head else 0,
        d_model=cfg.d_model,
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_ff=cfg.d_ff,
        note_dim=EMBED_DIM if embedder else 0,
    )
    model = MaskedDiffusionTransformer(mcfg)
    if cfg.copy_head:
        model.copyable.copy_(content_tokens(prep.tok))
        model.copy_alt.copy_(copy_alternates(prep.tok))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(cfg.steps):
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        bt = make_batch(prep, spec, cfg, rng, embedder)
        ids, maskable, tok_weight = bt.ids, bt.maskable, bt.weight
        t = (1 - cfg.eps) * torch.rand((ids.shape[0], 1), generator=gen) + cfg.eps
        masked = maskable & (torch.rand(ids.shape, generator=gen) < t)
        noisy = torch.where(masked, torch.full_like(ids, prep.tok.mask_id), ids)
        ce = -model.target_log_probs(noisy, bt.attn, masked, ids[masked], bt.cond, bt.offset)
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
        every = max(1, cfg.steps // 20)
        if progress is not None and ((step + 1) % every == 0 or step == 0):
            el = time.perf_counter() - t0
            eta = el / (step + 1) * (cfg.steps - step - 1)
            progress(
                f"embedded DLM: training on {spec.name}: step {step + 1}/{cfg.steps}, "
                f"loss {float(loss.detach()):.3f}, {el:.0f}s elapsed, ETA {eta:.0f}s"
            )
    model.eval()
    return model, prep, time.perf_counter() - t0
