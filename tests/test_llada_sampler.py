"""LLaDA sampler behaviour pinned with deterministic toy logits functions (no trained model needed)."""

from __future__ import annotations

import math

import pytest
import torch

from systems.backends.llada_sampler import (
    SamplerConfig,
    add_gumbel_noise,
    cut_at_eos,
    denoise,
    generate,
    left_pad,
    mc_nll_bound,
    num_transfer_tokens,
    split_steps,
)

MASK, PAD, EOS, V = 0, 1, 2, 16


class ToyModel:
    """Logits that depend only on position: position p predicts token 3 + p % 10 with confidence rising in p.

    Records every canvas it is called with, so tests can inspect intermediate states.
    """

    def __init__(self) -> None:
        self.calls: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        self.calls.append(x.clone())
        b, n = x.shape
        logits = torch.zeros((b, n, V), dtype=torch.float32)
        for p in range(n):
            logits[:, p, 3 + p % 10] = 1.0 + 0.25 * p  # later positions are more confident
        return logits


def canvas(prompt_len: int, gen: int, b: int = 1) -> torch.Tensor:
    x = torch.full((b, prompt_len + gen), MASK, dtype=torch.long)
    x[:, :prompt_len] = 5
    return x


def test_schedule_splits_masks_evenly_with_remainder_first() -> None:
    sched = num_transfer_tokens(torch.tensor([10, 3]), 4)
    assert sched.tolist() == [[3, 3, 2, 2], [1, 1, 1, 0]]
    assert sched.sum(dim=1).tolist() == [10, 3]
    assert split_steps(12, 5) == [3, 3, 2, 2, 2]
    with pytest.raises(ValueError):
        split_steps(2, 3)


def test_exactly_scheduled_tokens_committed_each_step() -> None:
    model = ToyModel()
    cfg = SamplerConfig(steps=4, gen_length=10)
    out = denoise(model, canvas(3, 10), 3, MASK, cfg, seed=0, record_commits=True)
    assert [int(c[0]) for c in out.commits] == [3, 3, 2, 2]
    assert out.nfe == 4 and out.steps_run == 4
    assert not bool((out.x == MASK).any())


def test_nothing_committed_outside_current_block() -> None:
    model = ToyModel()
    cfg = SamplerConfig(steps=4, gen_length=8, block_length=4)
    out = denoise(model, canvas(2, 8), 2, MASK, cfg, seed=0, record_commits=True)
    # 2 blocks x 2 steps; the passes of block 1 see block 2 fully masked
    assert len(model.calls) == 4
    for x in model.calls[:2]:
        assert bool((x[0, 6:] == MASK).all())
    # after block 1's two steps, block 1 is complete
    assert not bool((model.calls[2][0, 2:6] == MASK).any())
    assert [int(c[0]) for c in out.commits] == [2, 2, 2, 2]


def test_low_confidence_commits_most_confident_first() -> None:
    model = ToyModel()
    cfg = SamplerConfig(steps=5, gen_length=10)
    denoise(model, canvas(0, 10), 0, MASK, cfg, seed=0)
    # confidence rises with position, so the rightmost masked positions are committed first
    after1 = model.calls[1][0]
    assert (after1 != MASK).nonzero().squeeze(-1).tolist() == [8, 9]
    after2 = model.calls[2][0]
    assert (after2 != MASK).nonzero().squeeze(-1).tolist() == [6, 7, 8, 9]


def test_random_remasking_differs_from_confidence_order_but_keeps_schedule() -> None:
    model = ToyModel()
    cfg = SamplerConfig(steps=5, gen_length=10, remasking="random")
    out = denoise(model, canvas(0, 10), 0, MASK, cfg, seed=3, record_commits=True)
    assert [int(c[0]) for c in out.commits] == [2, 2, 2, 2, 2]
    first = (model.calls[1][0] != MASK).nonzero().squeeze(-1).tolist()
    assert first != [8, 9]


def test_fixed_tokens_in_response_stay_and_only_masks_are_scheduled() -> None:
    model = ToyModel()
    x = canvas(1, 6)
    x[0, 3] = 7  # a skeleton token
    out = denoise(model, x, 1, MASK, SamplerConfig(steps=5), seed=0, record_commits=True)
    assert int(out.x[0, 3]) == 7
    assert sum(int(c[0]) for c in out.commits) == 5


def test_cfg_mixes_conditional_and_unconditional_logits() -> None:
    """logits = un + (s + 1) * (cond - un), the unconditional pass having the prompt masked."""

    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        b, n = x.shape
        out = torch.zeros((b, n, V))
        prompt_visible = (x[:, :2] != MASK).all(dim=1).float()  # 1 for the conditional row
        out[:, :, 3] = 1.0
        out[:, :, 4] = 0.5 + 0.75 * prompt_visible[:, None]  # cond: 1.25, uncond: 0.5
        return out

    seen: list[torch.Tensor] = []

    def hook(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        seen.append(logits.clone())
        return logits

    s = 2.0
    out = denoise(model, canvas(2, 3), 2, MASK, SamplerConfig(steps=1, cfg_scale=s), 0, logits_hook=hook)
    assert out.nfe == 2  # the CFG step counts both passes
    expect3 = 1.0 + (s + 1) * (1.0 - 1.0)
    expect4 = 0.5 + (s + 1) * (1.25 - 0.5)
    assert seen[0][0, 2, 3].item() == pytest.approx(expect3)
    assert seen[0][0, 2, 4].item() == pytest.approx(expect4)
    assert out.x[0, 2:].tolist() == [4, 4, 4]
    # CFG off: a single conditional pass, logits passed through unchanged
    seen.clear()
    off = denoise(model, canvas(2, 3), 2, MASK, SamplerConfig(steps=1), 0, logits_hook=hook)
    assert off.nfe == 1
    assert seen[0][0, 2, 4].item() == pytest.approx(1.25)


def test_same_seed_same_output_and_seed_matters() -> None:
    torch.manual_seed(0)
    table = torch.randn(12, V)

    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        return table[: x.shape[1]].unsqueeze(0).repeat(x.shape[0], 1, 1)

    cfg = SamplerConfig(steps=4, gen_length=10, temperature=1.0)
    a = denoise(model, canvas(2, 10), 2, MASK, cfg, seed=11).x
    b = denoise(model, canvas(2, 10), 2, MASK, cfg, seed=11).x
    c = denoise(model, canvas(2, 10), 2, MASK, cfg, seed=12).x
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_gumbel_noise_is_float64_and_samples_the_softmax() -> None:
    logits = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float16)
    gen = torch.Generator().manual_seed(0)
    noisy = add_gumbel_noise(logits.repeat(20000, 1), 1.0, gen)
    assert noisy.dtype == torch.float64
    share = (noisy.argmax(-1) == 1).double().mean().item()
    assert share == pytest.approx(0.75, abs=0.015)
    assert torch.equal(add_gumbel_noise(logits, 0.0, gen).argmax(-1), logits.argmax(-1))


def test_threshold_commits_in_parallel_and_cuts_nfe() -> None:
    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        out = torch.zeros((x.shape[0], x.shape[1], V))
        out[:, :, 3] = 10.0  # every position is near-certain
        out[:, -1, 3] = 0.0  # except the last one
        return out

    fixed = denoise(model, canvas(1, 8), 1, MASK, SamplerConfig(steps=8), 0)
    fast = denoise(
        model, canvas(1, 8), 1, MASK, SamplerConfig(steps=8, threshold=0.9), 0, record_commits=True
    )
    assert fixed.nfe == 8
    assert fast.nfe == 2
    assert [int(c[0]) for c in fast.commits] == [7, 1]
    assert torch.equal(fixed.x, fast.x)


def test_batch_rows_do_not_depend_on_their_batch() -> None:
    torch.manual_seed(1)
    table = torch.randn(32, V)

    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        # logits depend on the real (unpadded) position of each token
        pos = torch.arange(x.shape[1]).unsqueeze(0).repeat(x.shape[0], 1)
        if am is not None:
            pos = (am.long().cumsum(1) - 1).clamp_min(0)
        return table[pos]

    cfg = SamplerConfig(steps=3, gen_length=6, temperature=0.8)
    alone = generate(model, [[5, 6]], MASK, PAD, cfg, seed=[42])
    batch = generate(model, [[5, 6, 7, 8], [5, 6]], MASK, PAD, cfg, seed=[7, 42])
    assert alone.x[0, -6:].tolist() == batch.x[1, -6:].tolist()
    assert batch.row_nfe.tolist() == [3, 3]


def test_left_pad_and_cut_at_eos() -> None:
    ids, mask = left_pad([[9, 9, 9], [8]], PAD)
    assert ids.tolist() == [[9, 9, 9], [PAD, PAD, 8]]
    assert mask.tolist() == [[True, True, True], [False, False, True]]
    assert cut_at_eos([4, 5, EOS, 6], [EOS]) == ([4, 5], True)
    assert cut_at_eos([4, 5], [EOS]) == ([4, 5], False)


def test_mc_bound_matches_exact_nll_for_a_context_free_model() -> None:
    """For a model whose predictions ignore context, E[bound] equals the exact NLL (independent check)."""
    probs = torch.softmax(torch.randn(V, generator=torch.Generator().manual_seed(5)), dim=0)

    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        return torch.log(probs).expand(x.shape[0], x.shape[1], V).clone()

    response = [3, 4, 5, 6, 7, 8]
    exact = float(-torch.log(probs[response]).sum())
    bound, n = mc_nll_bound(model, [9, 9], response, MASK, n_mc=4000, seed=0, batch_size=500)
    assert n == 6
    assert bound == pytest.approx(exact, rel=0.03)
