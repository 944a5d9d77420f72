"""Teacher-forced passes of the embedded DLM behind one prompt, for the probes in this folder.

The prompt's token window and line vectors are built once; each pass puts a response (EOS-padded to the
model's window) behind it with some positions masked and returns the model's logits at the response
positions. denoise_probe.py scores argmax accuracy on such canvases, slot_probe.py reads one slot.
"""

from __future__ import annotations

from typing import Any

import torch

from systems.backends.llada_sampler import left_pad


class PromptCanvas:
    """`be`'s model conditioned on `prompt`, ready for teacher-forced passes."""

    def __init__(self, be: Any, prompt: str) -> None:
        self.tok, self.width = be.tok, be.response_length
        self.prompt_ids, pmask = left_pad(
            [be._window(prompt)], self.tok.pad_id, width=be.params.max_prompt_tokens
        )
        self.attn = torch.cat([pmask, torch.ones((1, self.width), dtype=torch.bool)], dim=1)
        self.model = be._conditioned([prompt])

    def target(self, response: list[int]) -> torch.Tensor:
        """The response ids cut or EOS-padded to the window (width,)."""
        return torch.tensor((response + [self.tok.eos_id] * self.width)[: self.width])

    @torch.no_grad()
    def logits(self, response: list[int], masked: torch.Tensor) -> torch.Tensor:
        """(width, V) logits at the response positions, `masked` (width,) positions shown as the mask."""
        x = torch.where(masked, self.tok.mask_id, self.target(response)).unsqueeze(0)
        out = self.model(torch.cat([self.prompt_ids, x], dim=1), self.attn)
        return out[0, self.prompt_ids.shape[1] :]
