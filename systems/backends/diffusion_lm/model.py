"""Diffusion-LM's denoiser: a bidirectional transformer that maps (x_t, t) to a prediction of x_0.

Shape as in Li et al. 2022: word embeddings of a small dimension d (E2E: 16, ROCStories: 128) are
up-projected to the transformer width, a sinusoidal timestep embedding passed through an MLP is added
with learned positions, the transformer runs without a causal mask, and the output is down-projected
back to d (the x_0 parameterisation). The rounding decoder p(w | x_0) is a softmax over `x_0 E^T`: its
weights are the word embeddings themselves (tied), which is what lets the embedding be learned end to
end with the denoiser.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DLMConfig:
    """Architecture (part of the cache key)."""

    vocab_size: int
    seq_len: int
    emb_dim: int = 16
    width: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 512
    dropout: float = 0.0

    def to_json(self) -> dict[str, int | float]:
        return asdict(self)


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """Sinusoidal embedding of integer timesteps, (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return emb if dim % 2 == 0 else torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1)


class DiffusionLM(nn.Module):
    """Word embedding E (V, d), the x_0 predictor f(x_t, t), and the tied rounding head."""

    def __init__(self, cfg: DLMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.vocab_size, cfg.emb_dim)
        nn.init.normal_(self.embedding.weight, std=1.0)
        w = cfg.width
        self.up = nn.Sequential(nn.Linear(cfg.emb_dim, w), nn.Tanh(), nn.Linear(w, w))
        self.time = nn.Sequential(nn.Linear(w, 4 * w), nn.SiLU(), nn.Linear(4 * w, w))
        self.pos = nn.Parameter(torch.zeros(cfg.seq_len, w))
        nn.init.normal_(self.pos, std=0.02)
        self.ln_in = nn.LayerNorm(w)
        layer = nn.TransformerEncoderLayer(
            w, cfg.n_heads, cfg.d_ff, cfg.dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, cfg.n_layers, enable_nested_tensor=False)
        self.ln_out = nn.LayerNorm(w)
        self.down = nn.Sequential(nn.Linear(w, w), nn.Tanh(), nn.Linear(w, cfg.emb_dim))

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.embedding(ids)

    def forward(self, xt: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """xt: (B, L, d), t: (B,) model timesteps -> predicted x_0 (B, L, d)."""
        h = self.up(xt) + self.pos[None, : xt.shape[1]]
        h = h + self.time(timestep_embedding(t, self.cfg.width))[:, None, :]
        h = self.encoder(self.ln_in(h))
        return self.down(self.ln_out(h))

    def logits(self, x0: torch.Tensor) -> torch.Tensor:
        """Rounding decoder p(w | x_0): (B, L, d) -> (B, L, V), tied to the embedding."""
        return x0 @ self.embedding.weight.T

    def nearest(self, x0: torch.Tensor) -> torch.Tensor:
        """Ids of the nearest word embedding (L2) at each position: the clamping trick's argmin."""
        e = self.embedding.weight
        d2 = (x0 * x0).sum(-1, keepdim=True) - 2 * x0 @ e.T + (e * e).sum(-1)[None, None]
        return d2.argmin(-1)
