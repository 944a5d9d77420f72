"""Diffusion-LM's noise schedule, forward process, posterior and respacing (Li et al. 2022, App. A).

The sqrt schedule: alpha_bar(u) = 1 - sqrt(u + s), u = t/T in [0, 1], s = 1e-4. It adds noise quickly at
small t, where word embeddings are still recognisable, which Li et al. found works better for text than
the cosine or linear schedules. The discrete betas follow the usual construction from an alpha_bar
function, beta_t = min(1 - alpha_bar((t+1)/T) / alpha_bar(t/T), 0.999), and alphas_cumprod is their
running product, so index t = 0 is the least noisy step.

Fewer-step sampling (`respaced`) keeps K of the T steps, evenly spaced, and recomputes the betas between
them from the same alphas_cumprod (Nichol & Dhariwal 2021, the respacing Diffusion-LM's code uses); the
model is still called with the original timestep index.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

SQRT_S = 1e-4


def sqrt_alpha_bar(u: float, s: float = SQRT_S) -> float:
    """alpha_bar(u) = 1 - sqrt(u + s) (Li et al. 2022, Eq. in App. A)."""
    return 1.0 - math.sqrt(u + s)


def sqrt_betas(T: int, max_beta: float = 0.999) -> torch.Tensor:
    """(T,) float64 betas of the sqrt schedule."""
    return torch.tensor(
        [min(1 - sqrt_alpha_bar((t + 1) / T) / sqrt_alpha_bar(t / T), max_beta) for t in range(T)],
        dtype=torch.float64,
    )


@dataclass
class Schedule:
    """Everything the forward process, the loss and the sampler need, in float64."""

    betas: torch.Tensor
    timesteps: torch.Tensor  # model-facing timestep of each index (identity unless respaced)

    @classmethod
    def sqrt(cls, T: int) -> Schedule:
        return cls(sqrt_betas(T), torch.arange(T))

    def __post_init__(self) -> None:
        b = self.betas
        self.T = len(b)
        self.alphas_cumprod = torch.cumprod(1 - b, dim=0)
        prev = torch.cat([torch.ones(1, dtype=b.dtype), self.alphas_cumprod[:-1]])
        self.alphas_cumprod_prev = prev
        ac = self.alphas_cumprod
        # posterior q(x_{t-1} | x_t, x_0) = N(coef_x0 * x_0 + coef_xt * x_t, var)
        self.posterior_var = b * (1 - prev) / (1 - ac)
        self.posterior_logvar = torch.log(torch.cat([self.posterior_var[1:2], self.posterior_var[1:]]))
        self.coef_x0 = b * prev.sqrt() / (1 - ac)
        self.coef_xt = (1 - prev) * (1 - b).sqrt() / (1 - ac)

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x_t = sqrt(alpha_bar_t) x_0 + sqrt(1 - alpha_bar_t) eps; t: (B,) indexes."""
        a = self.alphas_cumprod[t].to(x0.dtype).view(-1, *([1] * (x0.dim() - 1)))
        return a.sqrt() * x0 + (1 - a).sqrt() * noise

    def prior_mean(self, x0: torch.Tensor) -> torch.Tensor:
        """Mean of q(x_T | x_0) = sqrt(alpha_bar_T) x_0: the prior term pushes it towards N(0, I)'s mean."""
        return self.alphas_cumprod[-1].sqrt().to(x0.dtype) * x0

    def posterior(self, x0: torch.Tensor, xt: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, std) of q(x_{i-1} | x_i, x_0) at index i (a Python int: the sampler's step)."""
        mean = self.coef_x0[i].to(x0.dtype) * x0 + self.coef_xt[i].to(x0.dtype) * xt
        std = torch.exp(0.5 * self.posterior_logvar[i]).to(x0.dtype)
        return mean, std

    def respaced(self, k: int) -> Schedule:
        """K evenly spaced steps of this schedule (K >= T returns self)."""
        if k >= self.T:
            return self
        if k < 1:
            raise ValueError("sampling needs at least one step")
        keep = sorted({round(x) for x in torch.linspace(0, self.T - 1, k).tolist()})
        last = 1.0
        betas = []
        for t in keep:
            ac = float(self.alphas_cumprod[t])
            betas.append(1 - ac / last)
            last = ac
        return Schedule(torch.tensor(betas, dtype=torch.float64), self.timesteps[torch.tensor(keep)])
