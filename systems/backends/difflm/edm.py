"""EDM latent diffusion (Karras et al. 2022) with an MLP denoiser, as DiffLM uses over its VAE latents.

* Preconditioning (Karras et al. 2022, Table 1): D(x; s) = c_skip(s) x + c_out(s) F(c_in(s) x, c_noise(s))
  with c_skip = sd^2 / (s^2 + sd^2), c_out = s sd / sqrt(s^2 + sd^2), c_in = 1 / sqrt(s^2 + sd^2),
  c_noise = ln(s) / 4, sd = sigma_data.
* Training: ln s ~ N(P_mean, P_std^2) = N(-1.2, 1.2^2), loss weight (s^2 + sd^2) / (s sd)^2 on
  ||D(y + s n; s) - y||^2.
* Sampling: the deterministic Heun sampler (Algorithm 1) on s_i = (smax^(1/rho) + i/(N-1) (smin^(1/rho)
  - smax^(1/rho)))^rho, s_N = 0, with smin = 0.002, smax = 80, rho = 7; N steps cost 2N - 1 evaluations.
* Denoiser F: an MLP over the latent with a sinusoidal embedding of c_noise added after the input
  projection (DiffLM: 5 layers, hidden 4096; the embedded default is smaller).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn

SIGMA_MIN, SIGMA_MAX, RHO = 0.002, 80.0, 7.0
P_MEAN, P_STD = -1.2, 1.2


@dataclass(frozen=True)
class DenoiserConfig:
    dim: int
    hidden: int = 256
    n_layers: int = 4
    sigma_data: float = 0.5

    def to_json(self) -> dict[str, float]:
        return asdict(self)


def noise_embedding(c_noise: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    args = c_noise.float()[:, None] * 1000.0 * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class MLPDenoiser(nn.Module):
    """F(x, c_noise): input projection + noise embedding, then an MLP with SiLU."""

    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.hidden
        self.inp = nn.Linear(cfg.dim, h)
        self.noise = nn.Sequential(nn.Linear(h, h), nn.SiLU(), nn.Linear(h, h))
        layers: list[nn.Module] = []
        for _ in range(cfg.n_layers - 1):
            layers += [nn.SiLU(), nn.Linear(h, h)]
        self.body = nn.Sequential(*layers, nn.SiLU(), nn.Linear(h, cfg.dim))

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor) -> torch.Tensor:
        h = self.inp(x) + self.noise(noise_embedding(c_noise, self.cfg.hidden))
        return self.body(h)


class EDMPrecond(nn.Module):
    """D(x; sigma) with Karras et al.'s preconditioning around an MLPDenoiser."""

    def __init__(self, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.net = MLPDenoiser(cfg)

    def coefficients(self, sigma: torch.Tensor) -> tuple[torch.Tensor, ...]:
        sd = self.cfg.sigma_data
        s2 = sigma**2 + sd**2
        return sd**2 / s2, sigma * sd / s2.sqrt(), 1 / s2.sqrt(), sigma.log() / 4

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        sigma = sigma.reshape(-1, 1).to(x.dtype)
        c_skip, c_out, c_in, c_noise = self.coefficients(sigma)
        return c_skip * x + c_out * self.net(c_in * x, c_noise.flatten())


def edm_loss(model: EDMPrecond, y: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Karras et al.'s training loss on clean latents y (B, D)."""
    sd = model.cfg.sigma_data
    sigma = (torch.randn((y.shape[0], 1), generator=gen) * P_STD + P_MEAN).exp()
    weight = (sigma**2 + sd**2) / (sigma * sd) ** 2
    n = torch.randn(y.shape, generator=gen) * sigma
    return (weight * (model(y + n, sigma) - y) ** 2).mean()


def sigma_steps(n: int, smin: float = SIGMA_MIN, smax: float = SIGMA_MAX, rho: float = RHO) -> torch.Tensor:
    """(n + 1,) noise levels s_0 = smax > ... > s_{n-1} = smin, s_n = 0 (float64)."""
    i = torch.arange(n, dtype=torch.float64)
    s = (smax ** (1 / rho) + i / max(1, n - 1) * (smin ** (1 / rho) - smax ** (1 / rho))) ** rho
    return torch.cat([s, torch.zeros(1, dtype=torch.float64)])


@torch.no_grad()
def heun_sample(model: EDMPrecond, noise: torch.Tensor, n_steps: int) -> tuple[torch.Tensor, int]:
    """Deterministic Heun sampler (Karras et al. 2022, Algorithm 1) from unit noise (B, D).

    Returns (latents, denoiser evaluations per row)."""
    sig = sigma_steps(n_steps)
    x = noise.double() * sig[0]
    evals = 0
    for i in range(n_steps):
        s, s_next = sig[i], sig[i + 1]
        d = (x - model(x.float(), s.float().expand(x.shape[0])).double()) / s
        x_next = x + (s_next - s) * d
        evals += 1
        if s_next > 0:
            d2 = (x_next - model(x_next.float(), s_next.float().expand(x.shape[0])).double()) / s_next
            x_next = x + (s_next - s) * 0.5 * (d + d2)
            evals += 1
        x = x_next
    return x.float(), evals
