"""Diffusion-LM (Li et al. 2022) re-implemented small: JSON tokenizer, sqrt schedule, x_0 denoiser,
end-to-end loss, clamped sampling, per-task training cache, and its backend.

Importing this package imports torch and tokenizers; the registry refers to it lazily.
"""

from systems.backends.diffusion_lm.backend import DiffusionLMBackend, DiffusionLMParams

__all__ = ["DiffusionLMBackend", "DiffusionLMParams"]
