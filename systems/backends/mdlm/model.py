"""A small bidirectional transformer that predicts masked tokens: the embedded masked-diffusion LM.

Same shape of model as LLaDA (no causal mask, a mask token, time-free: the model infers the noise level
from the number of masks), scaled down to train on a task's references in minutes on a CPU. It also
implements the Fast-dLLM prefix cache (`forward_with_cache` / `forward_suffix`) used by the sampler.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import nn

Lines = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(slot vectors (b, line_slots, line_dim), slot mask (b, line_slots), window vectors (b, W, line_dim)):
one sentence embedding per prompt line, and per token-window column its line's (conditioning.py)."""


@dataclass(frozen=True)
class ModelConfig:
    """Architecture; part of the training cache key."""

    vocab_size: int
    max_len: int = 256
    d_model: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 384
    dropout: float = 0.0
    prompt_width: int = 0
    """Columns 0..prompt_width-1 hold the (right-aligned) prompt; > 0 enables the copy head."""
    line_slots: int = 0
    """Extra positions holding one sentence vector per prompt line (conditioning.py); 0 = none."""
    line_dim: int = 384
    rope: bool = False
    """Rotary position embeddings on queries and keys (as LLaDA), on top of the learned absolute ones."""
    sentinel: bool = False
    """The copy head's gate is a sentinel key in its attention (model._pointer), not a function of the state."""
    translate: bool = False
    """The copy head may also emit a learned distribution per prompt token it attends to (a translating
    copy: "weekend" in a note to saturday or sunday); needs prompt_width > 0."""

    def to_json(self) -> dict[str, int | float]:
        return asdict(self)


Rotation = tuple[torch.Tensor, torch.Tensor]
"""(cos, sin), each (n, head_dim / 2): the rotary angles of n positions."""


def rotation(pos: torch.Tensor, head_dim: int, base: float = 10000.0) -> Rotation:
    """RoPE angles (Su et al. 2021) of integer positions `pos` (n,) for heads of `head_dim` dims."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = pos.float()[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


@lru_cache(maxsize=32)
def _span_rotation(first: int, count: int, slots: int, head_dim: int) -> Rotation:
    """`rotation` of `slots` line slots (angle 0: they have no position), then of positions
    first..first+count-1. Memoised: every training step and sampler pass asks for the same few spans
    (built outside inference mode, so a span first asked for while sampling can serve training)."""
    with torch.inference_mode(False):
        pos = torch.cat([torch.zeros(slots, dtype=torch.long), torch.arange(first, first + count)])
        return rotation(pos, head_dim)


def rotate(t: torch.Tensor, rot: Rotation) -> torch.Tensor:
    """Apply RoPE to t (b, heads, n, head_dim): each (even, odd) pair turned by its position's angle."""
    cos, sin = rot
    a, b = t[..., 0::2], t[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Block(nn.Module):
    """Pre-LN transformer layer with full (bidirectional) self-attention."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.ff = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, d = t.shape
        return t.view(b, n, self.n_heads, d // self.n_heads).transpose(1, 2)

    def forward(
        self,
        h: torch.Tensor,
        key_mask: torch.Tensor | None,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        rot: Rotation | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """h: (b, n, d). key_mask: (b, n_keys) True = attend, n_keys includes `past`. `rot`: RoPE angles
        of h's n positions (None: no rotation). Returns (h, (k, v)), k rotated, for a prefix cache."""
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if rot is not None:
            q, k = rotate(q, rot), rotate(k, rot)
        kv = (k, v)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        attn_mask = None if key_mask is None else key_mask[:, None, None, :]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        b, _, n, _ = a.shape
        h = h + self.proj(a.transpose(1, 2).reshape(b, n, -1))
        h = h + self.ff(self.ln2(h))
        return h, kv


TRANSLATE_FLOOR = 0.5
"""Share of a uniform distribution in the translation the product multiplies by (model._head): the
translation re-weights the candidates the rest of the head proposes and cannot veto them. Without it a
router that also opened on a hint line (`day: "saturday"`, whose word's translation was never trained)
took the hinted day from 0.997 to 0.305 in the slot probe; with it a copy the head is sure of survives
any translation, and a structure token the translation (content only) gives 0 keeps its mass."""


class MaskedDiffusionTransformer(nn.Module):
    """Token + position embeddings, bidirectional blocks, tied output head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        if cfg.prompt_width > 0:
            # pointer-generator copy head: a response position may copy a prompt token (hint values)
            self.copy_q = nn.Linear(cfg.d_model, cfg.d_model)
            self.copy_k = nn.Linear(cfg.d_model, cfg.d_model)
            self.copy_gate = nn.Linear(cfg.d_model, 1)
            # which token ids the copy head may copy (set from the tokenizer: content tokens only)
            self.register_buffer("copyable", torch.ones(cfg.vocab_size, dtype=torch.bool))
            # each id's variant without its leading space: " norwich" in a note is `norwich` in JSON
            self.register_buffer("alternate", torch.arange(cfg.vocab_size, dtype=torch.long))
            self.copy_alt = nn.Linear(cfg.d_model, 1)
            if cfg.translate:
                # translate attention: which prompt word a position reads a described group from
                self.trans_q = nn.Linear(cfg.d_model, cfg.d_model)
                self.trans_k = nn.Linear(cfg.d_model, cfg.d_model)
                # what that word names: its id ("weekend") plus what its context adds (its state)
                self.trans_tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
                self.trans_out = nn.Linear(cfg.d_model, cfg.d_model)
                nn.init.zeros_(self.trans_tok.weight)
                # the router: does a note constrain this position (its state and what it read)?
                self.route = nn.Linear(2 * cfg.d_model, 1)
        if cfg.line_slots > 0:
            self.line_proj = nn.Linear(cfg.line_dim, cfg.d_model)
            self.line_tok_proj = nn.Linear(cfg.line_dim, cfg.d_model, bias=False)  # no line: adds 0
            self.line_pos = nn.Embedding(cfg.line_slots, cfg.d_model)
            nn.init.normal_(self.line_pos.weight, std=0.02)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def _positions(self, length: int, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Column positions. Callers right-align prompts to a fixed width (`max_prompt_tokens`), so the
        response always starts at the same position whatever the prompt's length; a short (edited)
        prompt then does not move the response to positions the model never saw it at."""
        if length > self.cfg.max_len:
            raise ValueError(f"sequence of {length} tokens exceeds max_len {self.cfg.max_len}")
        return torch.arange(length).unsqueeze(0)

    def _rot(self, first: int, count: int, slots: int = 0) -> Rotation | None:
        """RoPE angles of `slots` line slots and then of token positions first..first+count-1; None
        without `rope`."""
        if not self.cfg.rope:
            return None
        return _span_rotation(first, count, slots, self.cfg.d_model // self.cfg.n_heads)

    def _embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.tok(x) + self.pos(pos)

    def _head(
        self,
        h: torch.Tensor,
        prompt: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
        parts: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Vocabulary logits; with the copy head, log of a mixture of vocabulary and copy distributions.

        `prompt` = (prompt hidden states (b, P, d), prompt ids (b, P), prompt key mask (b, P)). Copying
        makes following a `field: value` hint a one-step lookup that a small model learns in minutes; a
        pure vocabulary head has to route the value through every layer and did not learn it in budget.
        The result is normalised log-probabilities, so softmax / cross-entropy treat it like logits.

        With `translate`, a router gate g mixes in the product of that distribution p with the
        translation t of the prompt word the position reads (`_translation`), floored and confined to
        content tokens: q = p * t' re-normalised to p's content mass, t' = (1 - TRANSLATE_FLOOR) t +
        TRANSLATE_FLOOR / V, and q = p on structure tokens; the result is log((1 - g) p + g q). So a
        translation chooses among values and never decides whether a value or a quote comes next: a
        build whose product spanned every token wrote `" "":":cambridge` where the router opened at a
        key, and parsed 0.062.
        `parts` also returns (t, g), which training supervises (train.run_steps).
        """
        hn = self.ln_f(h)
        logits = hn @ self.tok.weight.T
        if prompt is None or self.cfg.prompt_width == 0:
            return logits
        ph, pids, pmask = prompt
        hp = self.ln_f(ph)
        q = self.copy_q(hn)
        k = self.copy_k(hp)
        scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        attn, gate, keep = self._pointer(scores.masked_fill(~pmask[:, None, :], -torch.inf), hn)
        a = torch.sigmoid(self.copy_alt(hn))
        index = pids[:, None, :].expand(-1, h.shape[1], -1)
        p_copy = torch.zeros_like(logits).scatter_add_(-1, index, attn * (1 - a))
        p_copy = p_copy.scatter_add_(-1, self.alternate[index], attn * a)
        mix = keep * torch.softmax(logits, dim=-1) + gate * p_copy
        if not self.cfg.translate:
            return torch.log(mix.clamp_min(1e-12))
        t, g = self._translation(hn, hp, pids, pmask)
        content = self.copyable
        poe = mix * ((1 - TRANSLATE_FLOOR) * t + TRANSLATE_FLOOR / t.shape[-1]) * content
        poe = poe * ((mix * content).sum(-1, keepdim=True) / poe.sum(-1, keepdim=True).clamp_min(1e-12))
        poe = torch.where(content, poe, mix)
        out = torch.log(((1 - g) * mix + g * poe).clamp_min(1e-12))
        return (out, t, g) if parts else out

    def _translation(
        self, hn: torch.Tensor, hp: torch.Tensor, pids: torch.Tensor, pmask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(t (b, L, V), g (b, L, 1)): the translation a position reads from the prompt, and the router.

        A set note names values by a description ("a weekend day"): nothing in it can be copied, and in
        900 steps the transformer body never learns to read it (benchmarks.diffusion.slot_probe). The
        translate attention picks a prompt word (alpha over content tokens); that word's translation is
        a distribution over content tokens, from its id (what the word means) plus its state (what its
        line adds). g says whether a note constrains this position at all, from the position's state and
        the state it read; both are trained on where set notes constrain the record (train.run_steps), so a
        rare note kind gets the signal a likelihood mixture would give it only once g is already open.
        """
        q, k = self.trans_q(hn), self.trans_k(hp)
        scores = (q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])).masked_fill(~pmask[:, None, :], -torch.inf)
        alpha = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (b, L, P)
        words = (self.trans_tok(pids) + self.trans_out(hp)) @ self.tok.weight.T
        words = torch.softmax(words.masked_fill(~self.copyable, -torch.inf), dim=-1)  # (b, P, V)
        g = torch.sigmoid(self.route(torch.cat([hn, alpha @ hp], dim=-1)))
        return alpha @ words, g

    def _pointer(
        self, scores: torch.Tensor, hn: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(copy attention (..., P), copy gate (..., 1), weight kept by the vocabulary head (..., 1)) from
        the copy scores, masked with -inf, and the normalised states `hn` (..., d): the head's
        distribution is keep * vocabulary + gate * sum_j attention_j * copy of token j.

        Without `sentinel` a gate from the state alone splits the mass (keep = 1 - gate): it cannot know
        whether the prompt holds anything to copy, since the state of a value slot does not depend on
        the prompt (benchmarks.diffusion.slot_probe). With it the gate is a sentinel key in the copy
        softmax (pointer sentinel mixture, Merity et al. 2016): the vocabulary keeps what no prompt
        token wins, so a note or hint that matches the slot takes the mass and a prompt without one
        leaves it alone (the attention then carries the copy mass itself, gate = 1). A variant that kept
        the state gate beside the sentinel (keep = 1 - gate * (1 - sentinel share)) did worse in three
        builds (docs/systems-diffusion.md, "A route for set notes")."""
        if not self.cfg.sentinel:
            gate = torch.sigmoid(self.copy_gate(hn))
            return torch.softmax(scores, dim=-1).nan_to_num(0.0), gate, 1 - gate
        both = torch.softmax(torch.cat([self.copy_gate(hn), scores], dim=-1), dim=-1)
        return both[..., 1:], torch.ones_like(both[..., :1]), both[..., :1]

    def _prompt_of(self, x: torch.Tensor, h: torch.Tensor, attention_mask: torch.Tensor | None):  # noqa: ANN202
        w = self.cfg.prompt_width
        if w == 0 or x.shape[1] < w:
            return None
        pids = x[:, :w]
        # real content tokens only: ids 0..4 are pad, mask, eos, nul, sep; `copyable` drops punctuation
        pmask = (pids >= 5) & self.copyable[pids]
        if attention_mask is not None:
            pmask = pmask & attention_mask[:, :w]
        return h[:, :w], pids, pmask

    def _with_lines(
        self, h: torch.Tensor, attention_mask: torch.Tensor | None, lines: Lines | None
    ) -> tuple[torch.Tensor, torch.Tensor | None, int]:
        """Token states with the line slots in front, the key mask over both, and the slot count."""
        k = self.cfg.line_slots
        if k == 0:
            return h, attention_mask, 0
        b = h.shape[0]
        if lines is None:
            vec = torch.zeros((b, k, self.cfg.line_dim))
            lmask = torch.zeros((b, k), dtype=torch.bool)
        else:
            vec, lmask, window = lines
            w = window.shape[1]
            h = torch.cat([h[:, :w] + self.line_tok_proj(window), h[:, w:]], dim=1)
        hl = self.line_proj(vec) + self.line_pos.weight[None]
        am = torch.ones(h.shape[:2], dtype=torch.bool) if attention_mask is None else attention_mask
        return torch.cat([hl, h], dim=1), torch.cat([lmask, am], dim=1), k

    def hidden(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, lines: Lines | None = None
    ) -> torch.Tensor:
        """Final hidden states of the token positions (b, L, d), conditioned on `lines` (see `Lines`)."""
        h = self._embed(x, self._positions(x.shape[1], attention_mask))
        h, am, k = self._with_lines(h, attention_mask, lines)
        rot = self._rot(0, x.shape[1], k)
        for blk in self.blocks:
            h, _ = blk(h, am, rot=rot)
        return h[:, k:]

    def head(
        self, h: torch.Tensor, x: torch.Tensor, attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self._head(h, self._prompt_of(x, h, attention_mask))

    def target_log_probs(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None,
        where: torch.Tensor,
        targets: torch.Tensor,
        lines: Lines | None = None,
    ) -> torch.Tensor:
        """log p(targets) at the positions `where` (b, L) selects, in `where.nonzero()` order (training).

        The same distribution as `forward`, evaluated only where the loss needs it: the vocabulary head
        runs on the selected rows and the copy term is a sum over prompt columns holding the target, so
        the (b, L, V) copy scatter and mixture of `_head` are never built: a training step is ~1.4x faster.
        A `translate` model needs the whole distribution for its product: it goes through
        `translate_log_probs`.
        """
        if self.cfg.translate:
            return self.translate_log_probs(x, attention_mask, where, targets, lines)[0]
        h = self.hidden(x, attention_mask, lines)
        rows, cols = where.nonzero(as_tuple=True)
        hn = self.ln_f(h[rows, cols])
        logits = hn @ self.tok.weight.T
        lp_vocab = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
        prompt = self._prompt_of(x, h, attention_mask)
        if prompt is None:
            return lp_vocab
        ph, pids, pmask = prompt
        k = self.copy_k(self.ln_f(ph))  # (b, P, d)
        q = self.copy_q(hn)  # (n, d)
        scores = torch.bmm(k[rows], q[:, :, None]).squeeze(-1) / math.sqrt(q.shape[-1])
        attn, gate, keep = self._pointer(scores.masked_fill(~pmask[rows], -torch.inf), hn)
        a = torch.sigmoid(self.copy_alt(hn))
        src = pids[rows]
        p_copy = (
            attn * ((1 - a) * (src == targets[:, None]) + a * (self.alternate[src] == targets[:, None]))
        ).sum(-1)
        return torch.log((keep.squeeze(-1) * lp_vocab.exp() + gate.squeeze(-1) * p_copy).clamp_min(1e-12))

    def translate_log_probs(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None,
        where: torch.Tensor,
        targets: torch.Tensor,
        lines: Lines | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For a `translate` model, at the positions `where` selects (in `where.nonzero()` order): log
        p(targets), log t(targets) (the translation alone) and the router's g (n,).

        The product needs whole (b, L, V) distributions, so the head runs on the response columns only:
        training masks nothing in the prompt's `prompt_width` columns (64 of MultiWOZ's 134), whose share
        of the head's work (vocabulary, copy scatter, translation) was thrown away; a step is 1.33x faster
        there (benchmarks.diffusion.translate_step)."""
        w = self.cfg.prompt_width
        if bool(where[:, :w].any()):
            raise ValueError(
                "translate_log_probs scores response positions only; `where` selects prompt columns"
            )
        h = self.hidden(x, attention_mask, lines)
        out, t, g = self._head(h[:, w:], self._prompt_of(x, h, attention_mask), parts=True)
        rows, cols = where[:, w:].nonzero(as_tuple=True)
        lp = out[rows, cols].gather(-1, targets[:, None]).squeeze(-1)
        lt = torch.log(t[rows, cols].gather(-1, targets[:, None]).squeeze(-1).clamp_min(1e-12))
        return lp, lt, g[rows, cols, 0]

    def forward(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None = None, lines: Lines | None = None
    ) -> torch.Tensor:
        """x: (b, L) ids; attention_mask: (b, L) True for real tokens. Returns logits (b, L, V)."""
        h = self.hidden(x, attention_mask, lines)
        return self.head(h, x, attention_mask)

    @torch.no_grad()
    def forward_with_cache(
        self,
        x: torch.Tensor,
        attention_mask: torch.Tensor | None,
        prefix_length: int,
        lines: Lines | None = None,
    ) -> tuple[torch.Tensor, object]:
        """Full pass that also returns each layer's keys/values of the line slots and positions < prefix_length."""
        h = self._embed(x, self._positions(x.shape[1], attention_mask))
        h, am, nl = self._with_lines(h, attention_mask, lines)
        cache = []
        rot = self._rot(0, x.shape[1], nl)
        for blk in self.blocks:
            h, (k, v) = blk(h, am, rot=rot)
            cache.append((k[:, :, : nl + prefix_length], v[:, :, : nl + prefix_length]))
        h = h[:, nl:]
        prompt = self._prompt_of(x, h, attention_mask)
        line_mask = None if am is None else am[:, :nl]
        return self._head(h, prompt), (prefix_length, cache, prompt, line_mask)

    @torch.no_grad()
    def forward_suffix(
        self, cache: object, x_suffix: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Logits of the suffix positions, attending to the cached prefix keys/values and the suffix.

        `attention_mask` covers the whole token sequence (prefix + suffix), as in the full pass.
        """
        prefix_length, layers, prompt, line_mask = cache  # type: ignore[misc]
        total = prefix_length + x_suffix.shape[1]
        pos = self._positions(total, attention_mask)[:, prefix_length:]
        h = self._embed(x_suffix, pos)
        am = attention_mask
        if self.cfg.line_slots:
            if am is None:
                am = torch.ones((x_suffix.shape[0], total), dtype=torch.bool)
            am = torch.cat([line_mask, am], dim=1)
        rot = self._rot(prefix_length, x_suffix.shape[1])
        for blk, past in zip(self.blocks, layers, strict=True):
            h, _ = blk(h, am, past=past, rot=rot)
        return self._head(h, prompt)


class Conditioned:
    """The model with one batch's line vectors bound, as the LLaDA sampler calls it (`model(x, mask)`).

    Rows beyond the bound batch are classifier-free guidance's unconditional copies (the sampler stacks
    `[x, x with the prompt masked]`): they get no lines, as they get no prompt. A bound batch of one row
    serves any number of rows (the Monte Carlo likelihood bound's draws).
    """

    def __init__(self, model: MaskedDiffusionTransformer, lines: Lines | None) -> None:
        self.model, self.lines = model, lines

    def _lines_for(self, b: int) -> Lines | None:
        if self.lines is None:
            return None
        vec, mask, window = self.lines
        n = vec.shape[0]
        if n == b:
            return vec, mask, window
        if n == 1:
            return vec.expand(b, -1, -1), mask.expand(b, -1), window.expand(b, -1, -1)
        if b == 2 * n:  # CFG: conditional rows, then unconditional ones
            z = torch.zeros_like
            return torch.cat([vec, z(vec)]), torch.cat([mask, z(mask)]), torch.cat([window, z(window)])
        raise ValueError(f"line vectors for {n} rows, model called on {b}")

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.model(x, attention_mask, self._lines_for(x.shape[0]))

    def forward_with_cache(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None, prefix_length: int
    ) -> tuple[torch.Tensor, object]:
        return self.model.forward_with_cache(x, attention_mask, prefix_length, self._lines_for(x.shape[0]))

    def forward_suffix(
        self, cache: object, x_suffix: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        return self.model.forward_suffix(cache, x_suffix, attention_mask)
