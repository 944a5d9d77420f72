"""DiffLM's VAE: a small encoder maps a serialised record to a latent, a soft-prompt projector turns the
latent into prompt vectors for a frozen causal LM, and the frozen LM is the decoder (Zhou et al. 2024).

* Encoder (paper: bert-base): the record's tokens are embedded with the frozen LM's own input embedding,
  projected to a small width, passed through a 2-layer bidirectional transformer and mean-pooled into
  (mu, log sigma^2) of a diagonal Gaussian.
* Projector: z -> MLP -> `n_soft` vectors of the LM's hidden size, prepended to the decoder input
  (paper: latent 1024, adapter size 32).
* Decoder input: [soft prompt] + a fixed text prefix + record tokens + `<|im_end|>`; the LM's weights
  never change (`requires_grad` False), gradients reach only the encoder and the projector. The prefix
  is the chat turn "One JSON record with the fields: a, b, c." and the assistant header (ours: DiffLM
  conditions on the latent alone; with minutes of CPU training the field list gives the frozen 135M LM
  the format, and the latent carries the record; `field_prompt: false` drops the user turn).
* Loss: token NLL of the record given the soft prompt (summed over tokens, averaged over records) +
  beta * KL(q(z|x) || N(0, I)).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ASSISTANT_PREFIX = "<|im_start|>assistant\n"


def decoder_prefix(schema: dict, field_prompt: bool = True) -> str:
    """The text between the soft prompt and the record (ChatML, the embedded decoder's chat format)."""
    if not field_prompt:
        return ASSISTANT_PREFIX
    fields = ", ".join((schema.get("properties") or {}).keys())
    user = f"One JSON record with the fields: {fields}." if fields else "One JSON record."
    return f"<|im_start|>user\n{user}<|im_end|>\n{ASSISTANT_PREFIX}"


@dataclass(frozen=True)
class VAEConfig:
    lm_hidden: int
    latent_dim: int = 32
    n_soft: int = 8
    enc_width: int = 128
    enc_layers: int = 2
    enc_heads: int = 4
    proj_hidden: int = 256
    emb_scale: float = 1.0  # std of the LM's input embeddings: soft vectors start at that scale

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class RecordEncoder(nn.Module):
    def __init__(self, cfg: VAEConfig) -> None:
        super().__init__()
        self.inp = nn.Linear(cfg.lm_hidden, cfg.enc_width)
        layer = nn.TransformerEncoderLayer(
            cfg.enc_width, cfg.enc_heads, 4 * cfg.enc_width, 0.0, batch_first=True, norm_first=True
        )
        self.body = nn.TransformerEncoder(layer, cfg.enc_layers, enable_nested_tensor=False)
        self.out = nn.Linear(cfg.enc_width, 2 * cfg.latent_dim)

    def forward(self, tok_emb: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tok_emb (B, L, H) from the frozen LM's embedding, mask (B, L) True = token -> (mu, logvar)."""
        h = self.body(self.inp(tok_emb), src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).float()
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1)
        mu, logvar = self.out(pooled).chunk(2, dim=-1)
        return mu, logvar.clamp(-10, 10)


class SoftPrompt(nn.Module):
    def __init__(self, cfg: VAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.mlp = nn.Sequential(
            nn.Linear(cfg.latent_dim, cfg.proj_hidden),
            nn.SiLU(),
            nn.Linear(cfg.proj_hidden, cfg.n_soft * cfg.lm_hidden),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.mlp(z).view(z.shape[0], self.cfg.n_soft, self.cfg.lm_hidden) * self.cfg.emb_scale


class DiffLMVAE(nn.Module):
    """Encoder + projector (the trainable part); the frozen LM is passed in where needed."""

    def __init__(self, cfg: VAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = RecordEncoder(cfg)
        self.soft = SoftPrompt(cfg)


def kl_standard_normal(mu: torch.Tensor, logvar: torch.Tensor) -> torch.Tensor:
    """KL(N(mu, diag exp(logvar)) || N(0, I)) per row."""
    return 0.5 * (mu**2 + logvar.exp() - 1 - logvar).sum(-1)


def decoder_nll(
    lm: Any, soft: torch.Tensor, prefix_ids: list[int], rec_ids: torch.Tensor, rec_mask: torch.Tensor
) -> torch.Tensor:
    """Per-row summed NLL of the record tokens under the frozen LM given [soft; prefix] (B,)."""
    emb = lm.get_input_embeddings()
    B = rec_ids.shape[0]
    pre = emb(torch.tensor(prefix_ids, dtype=torch.long)).unsqueeze(0).expand(B, -1, -1)
    x = torch.cat([soft, pre, emb(rec_ids)], dim=1)
    attn = torch.cat([torch.ones((B, soft.shape[1] + len(prefix_ids)), dtype=torch.long), rec_mask.long()], 1)
    hidden = lm.model(inputs_embeds=x, attention_mask=attn).last_hidden_state
    start = soft.shape[1] + len(prefix_ids) - 1  # the position that predicts the first record token
    h = hidden[:, start : start + rec_ids.shape[1]]
    logits = lm.lm_head(h[rec_mask])
    nll = F.cross_entropy(logits.float(), rec_ids[rec_mask], reduction="none")
    out = torch.zeros(B, dtype=nll.dtype)
    return out.index_add(0, rec_mask.nonzero()[:, 0], nll)
