"""Ancestral sampling for Diffusion-LM with the clamping trick (Li et al. 2022, Sec. 4.2).

From x_T ~ N(0, I), each step predicts x_0 = f(x_t, t), clamps it to the nearest word embedding (L2),
and draws x_{t-1} from the posterior q(x_{t-1} | x_t, clamp(x_0)); the last step's prediction is
rounded to words by the rounding decoder's argmax (argmax_w p(w | x_0), the decoder the loss trains). With
`steps < T` the sampler walks a respaced schedule (see schedule.py). Each row draws its noise from its
own generator, seeded by (seed, sample index), so a row's text does not depend on its batch's other rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.hashing import stable_hash
from systems.backends.diffusion_lm.model import DiffusionLM
from systems.backends.diffusion_lm.schedule import Schedule


def row_generator(seed: int, index: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(stable_hash({"seed": seed, "i": index, "rt": "dlm"}, 15), 16))


@dataclass
class SampleOut:
    ids: torch.Tensor  # (B, L) rounded token ids
    nfe: int  # forward passes per row


@torch.no_grad()
def sample(
    model: DiffusionLM,
    sched: Schedule,
    seq_len: int,
    seed: int,
    indexes: list[int],
    steps: int,
    clamp: bool = True,
) -> SampleOut:
    """Rows `indexes` of the seed's sample stream, `steps` denoising steps (respaced if < T)."""
    sub = sched.respaced(steps)
    gens = [row_generator(seed, i) for i in indexes]
    d = model.cfg.emb_dim
    x = torch.stack([torch.randn((seq_len, d), generator=g) for g in gens])
    for i in range(sub.T - 1, -1, -1):
        t = sub.timesteps[i].repeat(len(indexes))
        raw = model(x, t)
        x0 = model.embed(model.nearest(raw)) if clamp else raw
        mean, std = sub.posterior(x0, x, i)
        if i > 0:
            noise = torch.stack([torch.randn((seq_len, d), generator=g) for g in gens])
            x = mean + std * noise
        else:
            x = mean
    ids = model.logits(raw).argmax(-1)
    return SampleOut(ids, sub.T)
