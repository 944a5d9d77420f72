"""Length first: fix each record's length from the model's own EOS probabilities, then denoise the content.

Why. The embedded DLM is trained on responses padded with EOS to the window (as LLaDA-Instruct is), so
with every response position masked, p(EOS at i) is the model's P(length <= i). Under LLaDA's
low-confidence remasking that padding becomes a cascade: once the last positions hold EOS, the position
before them is EOS with high confidence too, and the EOS frontier walks left before any content is
written. Measured on TruthfulQA (docs/systems-diffusion.md, "The EOS cascade"): at T = 12, 18 of the 22
tokens committed in the first step are EOS, and by step 9 the frontier stands at token 34 of records
whose references are ~180 tokens long; every record is cut (parse rate 0.000). Each step's conditional is
confident; their product, the probability of a 34-token record, is tiny.

What. On the first pass (every response position of the row masked) the row's length L is drawn from the
model's length distribution: L is the first position where the running maximum of p(EOS) reaches u,
u ~ U(0, 1) from the row's seed. From then on positions >= L may only be EOS and positions < L may not be
EOS. This is the length prediction of non-autoregressive decoders (Mask-Predict, Ghazvininejad et al.
2019) read off the DLM's own EOS head instead of a separate length classifier. It is an opt-in departure
from LLaDA's sampler (`MDLMParams.length_first`); the sampler itself is unchanged and still exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

LogitsHook = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def end_position(p_eos: torch.Tensor, u: float, min_length: int = 0) -> int:
    """First index whose running-max EOS probability reaches `u` (len(p_eos) when none does).

    With `min_length` m the draw is conditioned on L >= m: with F the running maximum, u is moved to
    F(m - 1) + u (1 - F(m - 1)) and the search starts at m (a constrained decoder that cannot write a
    shorter record; systems/backends/schema_dfa.py)."""
    f = torch.cummax(p_eos, dim=0).values
    if min_length > 0:
        if min_length >= f.numel():
            return int(f.numel())
        floor = float(f[min_length - 1])
        u = floor + u * (1.0 - floor)
        reached = (f[min_length:] >= u).nonzero()
        return min_length + int(reached[0]) if reached.numel() else int(f.numel())
    reached = (f >= u).nonzero()
    return int(reached[0]) if reached.numel() else int(p_eos.numel())


class LengthFirst:
    """A logits hook for `llada_sampler.denoise`: per row, draw the length once, then keep EOS behind it.

    `inner` is the backend's own hook (the token ids natural generation may use at all); it runs first,
    so the length is drawn from the distribution the sampler would otherwise see."""

    def __init__(
        self,
        prompt_len: int,
        eos_id: int,
        mask_id: int,
        inner: LogitsHook,
        seeds: Sequence[int],
        min_length: int = 0,
    ) -> None:
        self.prompt_len, self.eos_id, self.mask_id, self.inner = prompt_len, eos_id, mask_id, inner
        self.min_length = min_length  # the shortest record a constrained decoder can write (tokens)
        self.u = [float(torch.rand((), generator=torch.Generator().manual_seed(int(s)))) for s in seeds]
        self.lengths: list[int | None] = [None] * len(seeds)

    def __call__(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        p = self.prompt_len
        logits = self.inner(logits, x)
        resp = x[:, p:]
        for j in range(x.shape[0]):
            if self.lengths[j] is None and bool((resp[j] == self.mask_id).all()):
                p_eos = torch.softmax(logits[j, p:].double(), dim=-1)[:, self.eos_id]
                self.lengths[j] = end_position(p_eos, self.u[j], self.min_length)
            n = self.lengths[j]
            if n is None:
                continue
            logits[j, p + n :, :] = -torch.inf
            logits[j, p + n :, self.eos_id] = 0.0
            logits[j, p : p + n, self.eos_id] = -torch.inf
        return logits
