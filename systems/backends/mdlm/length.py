"""Where a record ends: its length drawn first (`LengthFirst`), or EOS kept a suffix (`EosSuffix`).

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
`EosSuffix` is the lighter rule for records that come out at the right length but are cut inside: see
its docstring.
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


class EosSuffix:
    """A logits hook for `llada_sampler.denoise`: EOS only as the response's suffix, as in training.

    Why. The embedded DLM trains on responses right-padded with EOS, so in every training canvas the EOS
    tokens form a suffix. The sampler commits several positions a pass, each from its own marginal, and
    on the `numbers` MultiWOZ model the last pass commits an EOS inside the record: in 39 of 320 plain
    records p(EOS) is 0.66 at the train ID's second digit pair while the closing `"}` to its right is
    already committed, and the record is cut after "TR98" (docs/systems-diffusion.md, "Why records stop
    after the ID's first pair").
    So, per row and from the canvas the pass sees: no EOS left of a committed content token, and only
    EOS right of a committed EOS. Two positions committed in the same pass are not constrained against
    each other; where one pass committed an EOS left of content, the second rule wins (the record is cut
    at that EOS anyway). An opt-in departure from LLaDA's sampler (`MDLMParams.eos_suffix`), like `LengthFirst`;
    `inner` (the backend's own hook) runs first."""

    def __init__(self, prompt_len: int, eos_id: int, mask_id: int, inner: LogitsHook) -> None:
        self.prompt_len, self.eos_id, self.mask_id, self.inner = prompt_len, eos_id, mask_id, inner

    def __call__(self, logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        p = self.prompt_len
        logits = self.inner(logits, x)
        resp = x[:, p:]
        width = resp.shape[1]
        pos = torch.arange(width, device=resp.device)
        content = (resp != self.mask_id) & (resp != self.eos_id)
        last_content = torch.where(content, pos, -1).max(dim=1).values  # -1: no content yet
        first_eos = torch.where(resp == self.eos_id, pos, width).min(dim=1).values  # width: no EOS yet
        no_eos = pos[None, :] < last_content[:, None]
        only_eos = pos[None, :] > first_eos[:, None]
        tail = logits[:, p:]
        tail[..., self.eos_id] = tail[..., self.eos_id].masked_fill(no_eos, -torch.inf)
        tail.masked_fill_(only_eos[..., None], -torch.inf)
        tail[..., self.eos_id] = tail[..., self.eos_id].masked_fill(only_eos, 0.0)
        return logits
