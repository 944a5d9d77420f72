"""DiffLM (Zhou et al. 2024) re-implemented small: VAE with a frozen causal-LM decoder conditioned by a
soft prompt of the latent, EDM latent diffusion (MLP denoiser, Heun sampler), per-task training cache.

Importing this package imports torch (and transformers on first use); the registry refers to it lazily.
"""

from systems.backends.difflm.backend import DiffLMBackend, DiffLMParams

__all__ = ["DiffLMBackend", "DiffLMParams"]
