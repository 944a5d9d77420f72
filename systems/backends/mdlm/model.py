"""A small bidirectional transformer that predicts masked tokens: the embedded masked-diffusion LM.

Same shape of model as LLaDA (no causal mask, a mask token, time-free: the model infers the noise level
from the number of masks), scaled down to train on a task's references in minutes on a CPU. It also
implements the Fast-dLLM prefix cache (`forward_with_cache` / `forward_suffix`) used by the sampler.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


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

    def to_json(self) -> dict[str, int | float]:
        return asdict(self)


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
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """h: (b, n, d). key_mask: (b, n_keys) True = attend, n_keys includes `past`. Returns (h, (k, v))."""
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
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


class MaskedDiffusionTransformer(nn.Module):
    """Token + position embeddings, bidirectional blocks, tied output head."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def _positions(self, length: int, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Column positions. Callers right-align prompts to a fixed width (`max_prompt_tokens`), so the
        response always starts at the same position whatever the prompt's length; a short (edited)
        prompt then does not move the response to positions the model never saw it at."""
        if length > self.cfg.max_len:
            raise ValueError(f"sequence of {length} tokens exceeds max_len {self.cfg.max_len}")
        return torch.arange(length).unsqueeze(0)

    def _embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.tok(x) + self.pos(pos)

    def _head(self, h: torch.Tensor) -> torch.Tensor:
        return self.ln_f(h) @ self.tok.weight.T

    def hidden(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Final hidden states (b, L, d); training applies `head` only where tokens are masked."""
        h = self._embed(x, self._positions(x.shape[1], attention_mask))
        for blk in self.blocks:
            h, _ = blk(h, attention_mask)
        return h

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return self._head(h)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """x: (b, L) ids; attention_mask: (b, L) True for real tokens. Returns logits (b, L, V)."""
        return self._head(self.hidden(x, attention_mask))

    @torch.no_grad()
    def forward_with_cache(
        self, x: torch.Tensor, attention_mask: torch.Tensor | None, prefix_length: int
    ) -> tuple[torch.Tensor, object]:
        """Full pass that also returns each layer's keys/values of positions < prefix_length."""
        h = self._embed(x, self._positions(x.shape[1], attention_mask))
        cache = []
        for blk in self.blocks:
            h, (k, v) = blk(h, attention_mask)
            cache.append((k[:, :, :prefix_length], v[:, :, :prefix_length]))
        return self._head(h), (prefix_length, cache)

    @torch.no_grad()
    def forward_suffix(
        self, cache: object, x_suffix: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Logits of the suffix positions, attending to the cached prefix keys/values and the suffix.

        `attention_mask` covers the whole sequence (prefix + suffix), as in the full pass.
        """
        prefix_length, layers = cache  # type: ignore[misc]
        total = prefix_length + x_suffix.shape[1]
        pos = self._positions(total, attention_mask)[:, prefix_length:]
        h = self._embed(x_suffix, pos)
        for blk, past in zip(self.blocks, layers, strict=True):
            h, _ = blk(h, attention_mask, past=past)
        return self._head(h)
