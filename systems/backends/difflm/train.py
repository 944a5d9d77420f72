"""Training DiffLM on one task's references: first the VAE (frozen LM decoder), then EDM over its latents.

Stage 1 (VAE): records serialised with `json.dumps`, tokenized by the frozen LM's tokenizer, cut to
`max_train_tokens` (a CPU budget: the soft prompt must condition the record's beginning; the frozen LM
writes the rest); beta rises linearly from `beta_min` to `beta_max` over training (DiffLM anneals
1e-3 -> 0.1; its backtracking of beta is not reproduced). Stage 2 (latent diffusion): the encoder means
of all references, centred and scaled to standard deviation sigma_data = 0.5 (TabSyn's normalisation,
which DiffLM's latent model follows), train the EDM MLP denoiser. Seeded, fixed step counts.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from bench import kernels
from bench.types import JSON, TaskSpec
from systems.backends.difflm.edm import DenoiserConfig, EDMPrecond, edm_loss
from systems.backends.difflm.vae import DiffLMVAE, VAEConfig, decoder_nll, decoder_prefix, kl_standard_normal
from systems.backends.trained_cache import TrainProgress, config_key


@dataclass(frozen=True)
class DiffLMTrainConfig:
    latent_dim: int = 32
    n_soft: int = 8
    enc_width: int = 128
    max_train_tokens: int = 48
    field_prompt: bool = True
    vae_steps: int = 24
    vae_batch: int = 4
    vae_lr: float = 2e-3
    beta_min: float = 1e-3
    beta_max: float = 0.1
    denoiser_hidden: int = 256
    denoiser_layers: int = 4
    edm_steps: int = 1500
    edm_batch: int = 64
    edm_lr: float = 1e-3
    threads: int | None = field(default=1, compare=False, hash=False)

    def key(self) -> JSON:
        return config_key(self)  # the thread count only when not 1: it changes the weights


def serialise(record: JSON) -> str:
    return json.dumps(record, ensure_ascii=False)


def record_ids(tok: Any, spec: TaskSpec, cap: int | None) -> list[list[int]]:
    """Token ids of each reference + EOS (`<|im_end|>`), cut to `cap` tokens when given."""
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    out = []
    for r in spec.references:
        ids = tok(serialise(r), add_special_tokens=False).input_ids + [eos]
        out.append(ids[:cap] if cap else ids)
    return out


def pad_batch(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = True
    return ids, mask


@dataclass
class Trained:
    vae: DiffLMVAE
    denoiser: EDMPrecond
    latent_mean: torch.Tensor
    latent_scale: torch.Tensor
    log: list[JSON]
    seconds: float


def encode_means(vae: DiffLMVAE, lm: Any, rows: list[list[int]], pad: int) -> torch.Tensor:
    emb = lm.get_input_embeddings()
    mus = []
    with torch.no_grad():
        for s in range(0, len(rows), 16):
            ids, mask = pad_batch(rows[s : s + 16], pad)
            mu, _ = vae.encoder(emb(ids), mask)
            mus.append(mu)
    return torch.cat(mus)


def train_difflm(lm: Any, tok: Any, spec: TaskSpec, cfg: DiffLMTrainConfig, seed: int) -> Trained:
    """Both stages from scratch; the LM stays frozen."""
    t0 = time.perf_counter()
    with kernels.training(cfg.threads):
        return _train(lm, tok, spec, cfg, seed, t0)


def _train(lm: Any, tok: Any, spec: TaskSpec, cfg: DiffLMTrainConfig, seed: int, t0: float) -> Trained:
    if not spec.references:
        raise ValueError(f"task {spec.name!r} has no references to train DiffLM on")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for p in lm.parameters():
        p.requires_grad_(False)
    emb = lm.get_input_embeddings()
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    rows = record_ids(tok, spec, cfg.max_train_tokens)
    prefix = tok(decoder_prefix(spec.schema, cfg.field_prompt), add_special_tokens=False).input_ids
    vcfg = VAEConfig(
        lm_hidden=int(emb.weight.shape[1]),
        latent_dim=cfg.latent_dim,
        n_soft=cfg.n_soft,
        enc_width=cfg.enc_width,
        emb_scale=float(emb.weight.std()),
    )
    vae = DiffLMVAE(vcfg)
    log: list[JSON] = []
    opt = torch.optim.AdamW(vae.parameters(), lr=cfg.vae_lr, weight_decay=0.0)
    probe = list(range(min(8, len(rows))))

    def held_nll() -> float:
        """Reconstruction NLL per token of a fixed set of references with z = mu (no sampling noise):
        the deterministic number that shows whether the VAE learned, logged before and after."""
        with torch.no_grad():
            ids, mask = pad_batch([rows[i] for i in probe], pad)
            mu, _ = vae.encoder(emb(ids), mask)
            return float(decoder_nll(lm, vae.soft(mu), prefix, ids, mask).sum()) / float(mask.sum())

    vae.eval()
    log.append({"stage": "vae_eval", "step": 0, "nll_per_token": round(held_nll(), 4)})
    progress = TrainProgress(f"difflm vae {spec.name}", cfg.vae_steps)
    vae.train()
    order: list[int] = []
    for step in range(cfg.vae_steps):
        if len(order) < cfg.vae_batch:  # epochs over a shuffled order
            perm = list(range(len(rows)))
            rng.shuffle(perm)
            order += perm
        batch, order = order[: cfg.vae_batch], order[cfg.vae_batch :]
        ids, mask = pad_batch([rows[i] for i in batch], pad)
        mu, logvar = vae.encoder(emb(ids), mask)
        z = mu + (0.5 * logvar).exp() * torch.randn(mu.shape, generator=gen)
        beta = cfg.beta_min + (cfg.beta_max - cfg.beta_min) * step / max(1, cfg.vae_steps - 1)
        nll = decoder_nll(lm, vae.soft(z), prefix, ids, mask)
        kl = kl_standard_normal(mu, logvar)
        loss = (nll + beta * kl).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.parameters(), 1.0)
        opt.step()
        tokens = float(mask.sum())
        progress.update(step, float(loss.detach()), force=step == cfg.vae_steps - 1)
        log.append(
            {
                "stage": "vae",
                "step": step,
                "loss": round(float(loss.detach()), 4),
                "nll_per_token": round(float(nll.sum().detach()) / tokens, 4),
                "kl": round(float(kl.mean().detach()), 4),
                "beta": round(beta, 5),
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    vae.eval()
    log.append({"stage": "vae_eval", "step": cfg.vae_steps, "nll_per_token": round(held_nll(), 4)})
    # stage 2: EDM over the normalised encoder means
    full = record_ids(tok, spec, cfg.max_train_tokens)
    mus = encode_means(vae, lm, full, pad)
    dcfg = DenoiserConfig(dim=cfg.latent_dim, hidden=cfg.denoiser_hidden, n_layers=cfg.denoiser_layers)
    mean = mus.mean(0)
    scale = mus.std(0).clamp_min(1e-4) / dcfg.sigma_data if mus.shape[0] > 1 else torch.ones_like(mean)
    y_all = (mus - mean) / scale
    den = EDMPrecond(dcfg)
    dopt = torch.optim.AdamW(den.parameters(), lr=cfg.edm_lr, weight_decay=0.0)
    progress = TrainProgress(f"difflm edm {spec.name}", cfg.edm_steps)
    den.train()
    for step in range(cfg.edm_steps):
        lr = cfg.edm_lr * 0.5 * (1 + math.cos(math.pi * step / cfg.edm_steps))
        for g in dopt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, y_all.shape[0], (cfg.edm_batch,), generator=gen)
        loss = edm_loss(den, y_all[idx], gen)
        dopt.zero_grad(set_to_none=True)
        loss.backward()
        dopt.step()
        progress.update(step, float(loss.detach()), force=step == cfg.edm_steps - 1)
        if step % 100 == 0 or step == cfg.edm_steps - 1:
            log.append(
                {
                    "stage": "edm",
                    "step": step,
                    "loss": round(float(loss.detach()), 4),
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
    den.eval()
    return Trained(vae, den, mean, scale, log, time.perf_counter() - t0)
