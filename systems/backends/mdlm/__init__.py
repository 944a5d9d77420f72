"""The embedded masked-diffusion LM: BPE tokenizer, transformer, training, caching, and its backend.

Importing this package imports torch; the registry refers to it lazily.
"""

from systems.backends.mdlm.backend import EmbeddedMDLMBackend, InfillResult, InfillRow, MDLMParams
from systems.skeleton_prompt import DiffusionPrompt, render_prompt

__all__ = [
    "EmbeddedMDLMBackend",
    "InfillResult",
    "InfillRow",
    "MDLMParams",
    "DiffusionPrompt",
    "render_prompt",
]
