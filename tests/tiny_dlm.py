"""The tests' name for the embedded DLM's smallest configuration (systems/backends/mdlm/tiny.py), and a
tiny untrained model with the copy head's options, for tests of the head's arithmetic."""

import torch

from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tiny import TINY_DLM

__all__ = ["TINY_DLM", "perturbed_head_model"]


def perturbed_head_model(seed: int, sentinel: bool, translate: bool) -> MaskedDiffusionTransformer:
    """A 40-token, 20-column model (prompt width 8) seeded with `seed`, its weights moved away from the
    zero-initialised translation so that every term of the head counts; in eval mode."""
    torch.manual_seed(seed)
    cfg = ModelConfig(
        vocab_size=40, max_len=20, d_model=16, n_layers=2, n_heads=2, d_ff=32, prompt_width=8,
        sentinel=sentinel, translate=translate,
    )  # fmt: skip
    m = MaskedDiffusionTransformer(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m
