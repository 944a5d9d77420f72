"""Training Diffusion-LM on one task's references: embeddings and denoiser end to end (Li et al. 2022).

Each reference is serialised as compact JSON, tokenized (structural characters are their own tokens) and
padded with `<pad>` to a fixed length L (the references' 95th-percentile length, capped). The loss is the
paper's end-to-end objective with the x_0 parameterisation (Li et al. 2022, Sec. 4.1 and App. F):

    x_0 ~ q(x_0 | w) = N(EMB(w), (1 - alpha_bar_0) I)          (the embedding step)
    t ~ U{0..T-1},  x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps
    L = || f(x_t, t) - x_0 ||^2            (t > 0; at t = 0 the target is EMB(w))
      + || sqrt(alpha_bar_T) x_0 ||^2      (prior term: q(x_T | x_0) should be N(0, I))
      - log p(w | x_0)                     (rounding: softmax over x_0 E^T)

each squared norm averaged over positions and dimensions, the NLL over positions. Everything is seeded
and the step count is fixed, so the same data, config and seed give the same weights.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from bench import kernels
from bench.types import JSON, TaskSpec
from systems.backends.diffusion_lm.model import DiffusionLM, DLMConfig
from systems.backends.diffusion_lm.schedule import Schedule
from systems.backends.diffusion_lm.tokenizer import JSONTokenizer, serialise, train_tokenizer
from systems.backends.trained_cache import TrainProgress, config_key


@dataclass(frozen=True)
class DLMTrainConfig:
    """Training knobs (all in the cache key; `threads` only when not 1)."""

    vocab_size: int = 512
    max_len: int = 128
    emb_dim: int = 16
    width: int = 128
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 512
    diffusion_steps: int = 2000
    train_steps: int = 1500
    token_budget: int | None = 1_500_000
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 100
    threads: int | None = field(default=1, compare=False, hash=False)

    def steps_for(self, seq_len: int) -> int:
        """Optimizer steps for sequences of `seq_len`: `train_steps`, or fewer so that steps x batch x L
        stays within `token_budget` (a CPU budget that does not grow with the task's record length)."""
        if self.token_budget is None:
            return self.train_steps
        return max(1, min(self.train_steps, self.token_budget // (self.batch_size * seq_len)))

    def key(self) -> JSON:
        return config_key(self)  # the thread count only when not 1: it changes the weights


@dataclass
class Prepared:
    tok: JSONTokenizer
    seq_len: int
    data: torch.Tensor  # (N, L) padded ids of the references that fit
    n_dropped: int = 0

    @property
    def n_train(self) -> int:
        return int(self.data.shape[0])


def prepare(spec: TaskSpec, cfg: DLMTrainConfig, tok: JSONTokenizer | None = None) -> Prepared:
    """Tokenizer (trained on the references unless given), sequence length and the padded id matrix.

    L is the 95th percentile of the references' token lengths plus one `<pad>`, capped at `max_len`.
    References longer than L are left out of training: a cut-off record would teach the model to write
    JSON that never closes. How many were left out is kept in the model's meta.
    """
    texts = [serialise(r) for r in spec.references]
    if not texts:
        raise ValueError(f"task {spec.name!r} has no references to train Diffusion-LM on")
    if tok is None:
        tok = train_tokenizer(texts, cfg.vocab_size)
    enc = [tok.encode(t) for t in texts]
    lengths = sorted(len(e) for e in enc)
    q95 = lengths[min(len(lengths) - 1, int(0.95 * len(lengths)))]
    seq_len = max(8, min(cfg.max_len, q95 + 1))
    fit = [e for e in enc if len(e) < seq_len] or [min(enc, key=len)[: seq_len - 1]]
    data = torch.full((len(fit), seq_len), tok.pad_id, dtype=torch.long)
    for i, e in enumerate(fit):
        data[i, : len(e)] = torch.tensor(e, dtype=torch.long)
    return Prepared(tok, seq_len, data, len(enc) - len(fit))


def e2e_loss(
    model: DiffusionLM, sched: Schedule, ids: torch.Tensor, gen: torch.Generator
) -> tuple[torch.Tensor, dict[str, float]]:
    """Diffusion-LM's end-to-end loss on a batch of ids (B, L); returns (loss, its three terms)."""
    B = ids.shape[0]
    emb = model.embed(ids)
    std0 = float((1 - sched.alphas_cumprod[0]).sqrt())
    x0 = emb + std0 * torch.randn(emb.shape, generator=gen)
    t = torch.randint(0, sched.T, (B,), generator=gen)
    xt = sched.q_sample(x0, t, torch.randn(x0.shape, generator=gen))
    pred = model(xt, sched.timesteps[t])
    target = torch.where((t == 0).view(-1, 1, 1), emb, x0)
    mse = ((pred - target) ** 2).mean(dim=(1, 2))
    prior = (sched.prior_mean(x0) ** 2).mean(dim=(1, 2))
    nll = F.cross_entropy(model.logits(x0).transpose(1, 2), ids, reduction="none").mean(dim=1)
    loss = (mse + prior + nll).mean()
    return loss, {
        "mse": float(mse.mean().detach()),
        "prior": float(prior.mean().detach()),
        "nll": float(nll.mean().detach()),
    }


def train_model(
    spec: TaskSpec, cfg: DLMTrainConfig, seed: int, log: list[JSON] | None = None
) -> tuple[DiffusionLM, Prepared, float]:
    """Train from scratch on `spec.references`; returns (model in eval mode, prepared data, seconds)."""
    t0 = time.perf_counter()
    with kernels.training(cfg.threads):
        return _train(spec, cfg, seed, log, t0)


def _train(
    spec: TaskSpec, cfg: DLMTrainConfig, seed: int, log: list[JSON] | None, t0: float
) -> tuple[DiffusionLM, Prepared, float]:
    torch.manual_seed(seed)
    prep = prepare(spec, cfg)
    model = DiffusionLM(
        DLMConfig(
            vocab_size=prep.tok.vocab_size,
            seq_len=prep.seq_len,
            emb_dim=cfg.emb_dim,
            width=cfg.width,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            d_ff=cfg.d_ff,
        )
    )
    sched = Schedule.sqrt(cfg.diffusion_steps)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    n = prep.data.shape[0]
    total = cfg.steps_for(prep.seq_len)
    progress = TrainProgress(f"diffusion-lm {spec.name}", total)
    model.train()
    for step in range(total):
        warm = min(1.0, (step + 1) / cfg.warmup)
        lr = cfg.lr * warm * 0.5 * (1 + math.cos(math.pi * step / total))
        for g in opt.param_groups:
            g["lr"] = lr
        rows = [rng.randrange(n) for _ in range(cfg.batch_size)]
        loss, terms = e2e_loss(model, sched, prep.data[rows], gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = float(loss.detach())
        progress.update(step, value, force=step == total - 1)
        if log is not None and (step % 100 == 0 or step == total - 1):
            log.append(
                {
                    "step": step,
                    "loss": round(value, 4),
                    **{k: round(v, 4) for k, v in terms.items()},
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            )
    model.eval()
    return model, prep, time.perf_counter() - t0
