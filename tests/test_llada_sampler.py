"""LLaDA sampler behaviour pinned with deterministic toy logits functions (no trained model needed)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from bench.errors import BenchError
from systems.backends.llada_sampler import (
    SamplerConfig,
    add_gumbel_noise,
    checked,
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


# ---------------------------------------------------------------------------------------------------------
# Differential tests against an independent reference implementation of the authors' generate()
# (LLaDA, Nie et al. 2025), written here from the algorithm's description, batch size 1 as in the paper's
# loop. The noise is an input of the algorithm: `uniform(shape)` returns U(0, 1) draws; the tests feed both
# implementations the same per-row stream, consumed in the same order (per step that still has masks in the
# current block: one (block, V) draw for the Gumbel noise when temperature > 0, then one (block,) draw for
# `random` remasking), so sampling at temperature > 0 can be compared token for token.

TOY_V = 48


class RandomToy:
    """A seeded, context-dependent toy bidirectional model: each position's logits depend on its token, its
    position and the mean of every attended position's features, so a commit changes later predictions.
    `mask_bias` is added to the mask's logit, which makes the mask a likely prediction (the case the
    reference and the old sampler disagreed on)."""

    def __init__(self, seed: int, mask_bias: float = 0.0, scale: float = 2.0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn(TOY_V, 8, generator=g)
        self.pos = torch.randn(64, 8, generator=g)
        self.out = torch.randn(8, TOY_V, generator=g) * scale
        self.mask_bias = mask_bias

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = self.emb[x] + self.pos[: x.shape[1]]
        w = torch.ones(x.shape, dtype=h.dtype) if attention_mask is None else attention_mask.to(h.dtype)
        if attention_mask is not None:  # a left-padded row must see what the unpadded row sees
            pos = (attention_mask.long().cumsum(1) - 1).clamp_min(0)
            h = self.emb[x] + self.pos[pos]
        ctx = (h * w.unsqueeze(-1)).sum(1, keepdim=True) / w.sum(1).clamp_min(1).view(-1, 1, 1)
        logits = torch.tanh(h + ctx) @ self.out
        logits[..., MASK] += self.mask_bias
        return logits


def reference_generate(
    model: RandomToy,
    prompt: list[int],
    gen_length: int,
    steps: int,
    block_length: int,
    mask_id: int,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    remasking: str = "low_confidence",
    uniform: Callable[[tuple[int, ...]], torch.Tensor] | None = None,
    choice_temperature: float = 0.0,
) -> list[int]:
    """The authors' reverse process: blocks left to right, `steps // blocks` steps per block, step i
    transferring the block's initial mask count split evenly (remainder to the first steps); x0 = argmax of
    the Gumbel-noised logits over the whole vocabulary, kept only where masked; confidence p(x0) from the
    softmax of the raw logits (or a uniform draw for `random`); every masked position left of the block
    end competes; the top-k are written, a predicted mask included (it stays masked)."""
    assert gen_length % block_length == 0
    n_blocks = gen_length // block_length
    assert steps % n_blocks == 0
    per_block = steps // n_blocks
    p_len = len(prompt)
    x = torch.tensor([list(prompt) + [mask_id] * gen_length])
    prompt_index = x[0] != mask_id
    for nb in range(n_blocks):
        lo, hi = p_len + nb * block_length, p_len + (nb + 1) * block_length
        m = int((x[0, lo:hi] == mask_id).sum())
        counts = [m // per_block + (1 if i < m % per_block else 0) for i in range(per_block)]
        for i in range(per_block):
            mask_index = x[0] == mask_id
            if cfg_scale > 0:
                un = x.clone()
                un[0, prompt_index] = mask_id
                both = model(torch.cat([x, un]), None).to(torch.float64)
                logits = both[1] + (cfg_scale + 1.0) * (both[0] - both[1])
            else:
                logits = model(x, None)[0].to(torch.float64)
            has_masks = bool(mask_index[lo:hi].any())
            scores = logits.clone()
            if temperature > 0 and has_masks:
                assert uniform is not None
                u = uniform((hi - lo, TOY_V)).clamp_min(1e-300)
                scores[lo:hi] = logits[lo:hi].exp() / (-torch.log(u)) ** temperature
            x0 = scores.argmax(-1)
            if remasking == "low_confidence":
                x0_p = torch.softmax(logits, dim=-1).gather(-1, x0.unsqueeze(-1)).squeeze(-1)
            else:
                x0_p = torch.zeros(x.shape[1], dtype=torch.float64)
                if has_masks:
                    assert uniform is not None
                    x0_p[lo:hi] = uniform((hi - lo,))
            x0_p[hi:] = -math.inf
            x0 = torch.where(mask_index, x0, x[0])
            confidence = torch.where(mask_index, x0_p, torch.full_like(x0_p, -math.inf))
            if choice_temperature and has_masks and i < per_block - 1 and counts[i] > 0:
                # MaskGIT (Chang et al. 2022): log-confidence plus annealed Gumbel noise, then the top-k
                assert uniform is not None
                tau = choice_temperature * (1 - (i + 1) / per_block)
                g = -torch.log(-torch.log(uniform((hi - lo,)).clamp_min(1e-300)))
                span = confidence[lo:hi]
                confidence[lo:hi] = torch.where(
                    mask_index[lo:hi], span.clamp_min(1e-300).log() + tau * g, span
                )
            chosen = torch.topk(confidence, k=counts[i]).indices
            x[0, chosen] = x0[chosen]
    return x[0, p_len:].tolist()


def stream(seed: int) -> Callable[[tuple[int, ...]], torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return lambda shape: torch.rand(shape, generator=g, dtype=torch.float64)


def ours(model: RandomToy, prompt: list[int], cfg: SamplerConfig, seed: int) -> list[int]:
    return generate(model, [prompt], MASK, PAD, cfg, seed=[seed]).x[0, len(prompt) :].tolist()


def differential_cases() -> list[tuple[int, list[int], int, int, int, float, float, str, float]]:
    """(toy seed, prompt, gen, steps, block, temperature, cfg, remasking, mask bias), drawn at random."""
    rng = torch.Generator().manual_seed(2025)
    cases = []
    for seed in range(160):
        block = [1, 2, 3, 4][int(torch.randint(4, (1,), generator=rng))]
        n_blocks = 1 + int(torch.randint(3, (1,), generator=rng))
        per_block = 1 + int(torch.randint(5, (1,), generator=rng))
        prompt = (
            3 + torch.randint(TOY_V - 3, (1 + int(torch.randint(5, (1,), generator=rng)),), generator=rng)
        ).tolist()
        temperature = [0.0, 0.0, 0.7, 1.0][seed % 4]
        cfg = [0.0, 1.5][(seed // 4) % 2]
        remasking = "random" if seed % 10 == 9 else "low_confidence"
        bias = [0.0, 1.0, 2.5][seed % 3]
        cases.append(
            (seed, prompt, block * n_blocks, per_block * n_blocks, block, temperature, cfg, remasking, bias)
        )
    return cases


def test_reference_minimal_case_mask_prediction_handled_like_the_authors() -> None:
    """The issue's minimal case (prompt [5, 14, 6], gen 4, steps 3, block 4, CFG 0) on a toy whose mask
    logit is high: the reference spends a slot on a predicted mask and ends with a mask in its output.
    We agree with it on every position it commits to a real token and, at the one it leaves masked, commit
    that position's best non-mask token at the block's last step (the documented departure)."""
    prompt, cfg = [5, 14, 6], SamplerConfig(steps=3, gen_length=4, block_length=4)
    model = RandomToy(seed=29, mask_bias=1.0)
    ref = reference_generate(model, prompt, 4, 3, 4, MASK)
    got = ours(model, prompt, cfg, seed=0)
    assert ref == [36, MASK, 12, 26]
    assert got == [36, 5, 12, 26]
    left = [i for i, t in enumerate(ref) if t == MASK]
    assert [t for i, t in enumerate(got) if i not in left] == [t for i, t in enumerate(ref) if i not in left]
    # the departure: the last step's canvas is the reference's canvas before its last step; there every
    # leftover position takes the argmax of the model's logits with the mask excluded
    before_last = canvas_before_last_step(model, prompt, 4, 3, MASK)
    logits = model(before_last, None)[0, len(prompt) :].to(torch.float64)
    logits[:, MASK] = -math.inf
    assert [got[i] for i in left] == [int(logits[i].argmax()) for i in left]


def canvas_before_last_step(
    model: RandomToy, prompt: list[int], gen: int, steps: int, mask_id: int
) -> torch.Tensor:
    """The reference canvas after `steps - 1` steps (one block, greedy): rerun the reference with a
    schedule truncated before the last step by running it with a wrapped model that records canvases."""
    seen: list[torch.Tensor] = []

    def recording(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        seen.append(x.clone())
        return model(x, am)

    reference_generate(recording, prompt, gen, steps, gen, mask_id)  # type: ignore[arg-type]
    return seen[-1]


def test_old_sampler_behaviour_is_gone_on_the_minimal_case() -> None:
    """Setting the mask logit to -inf before the softmax changes which positions commit first; the toy of
    the minimal case shows it (this is what the old sampler did, recomputed here, and it differs)."""
    prompt = [5, 14, 6]
    model = RandomToy(seed=29, mask_bias=1.0)

    def no_mask(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        out = model(x, am)
        out[..., MASK] = -math.inf
        return out

    old = reference_generate(no_mask, prompt, 4, 3, 4, MASK)  # type: ignore[arg-type]
    got = ours(model, prompt, SamplerConfig(steps=3, gen_length=4, block_length=4), seed=0)
    assert old == [26, 26, 12, 26]
    assert got == [36, 5, 12, 26]


@pytest.mark.parametrize("case", differential_cases(), ids=lambda c: f"toy{c[0]}")
def test_matches_reference_token_for_token(case: tuple) -> None:
    """Randomized differential cases: toy seeds, blocks of 1-4, 1-5 steps per block, temperature 0 / 0.7 /
    1, CFG on and off, both remasking rules, mask biases that make mask predictions common. Wherever the
    reference's output holds no mask, ours is identical; where it does, ours agrees with it on every block
    before the first one the reference leaves incomplete and on that block's real commits, and never holds
    a mask."""
    seed, prompt, gen, steps, block, temperature, cfg_scale, remasking, bias = case
    model = RandomToy(seed, mask_bias=bias)
    got, ref = ours_and_reference(
        model, prompt, gen, steps, block, temperature, cfg_scale, remasking, 1000 + seed
    )
    assert_agrees(got, ref, block)


def ours_and_reference(
    model: RandomToy,
    prompt: list[int],
    gen: int,
    steps: int,
    block: int,
    temperature: float,
    cfg_scale: float,
    remasking: str,
    seed: int,
    choice_temperature: float = 0.0,
) -> tuple[list[int], list[int]]:
    """One case run by our sampler and by the reference, both fed the noise stream of `seed`."""
    cfg = SamplerConfig(
        steps=steps,
        gen_length=gen,
        block_length=block,
        temperature=temperature,
        cfg_scale=cfg_scale,
        remasking=remasking,  # type: ignore[arg-type]
        choice_temperature=choice_temperature,
    )
    ref = reference_generate(
        model,
        prompt,
        gen,
        steps,
        block,
        MASK,
        temperature,
        cfg_scale,
        remasking,
        stream(seed),
        choice_temperature,
    )
    return ours(model, prompt, cfg, seed=seed), ref


def assert_agrees(got: list[int], ref: list[int], block: int) -> None:
    """Ours never holds a mask and equals the reference wherever the reference's output holds none;
    where it does, blocks before the first one the reference leaves incomplete agree exactly, and in
    that block every position the reference committed to a real token agrees too."""
    assert MASK not in got
    if MASK not in ref:
        assert got == ref
        return
    first = min(i for i, t in enumerate(ref) if t == MASK) // block
    assert got[: first * block] == ref[: first * block]
    span = range(first * block, (first + 1) * block)
    assert [got[i] for i in span if ref[i] != MASK] == [ref[i] for i in span if ref[i] != MASK]


def test_differential_cases_cover_both_outcomes() -> None:
    """The randomized cases must exercise exact agreement and the departure, each often enough."""
    exact = departed = 0
    for seed, prompt, gen, steps, block, temperature, cfg_scale, remasking, bias in differential_cases():
        ref = reference_generate(
            RandomToy(seed, mask_bias=bias),
            prompt,
            gen,
            steps,
            block,
            MASK,
            temperature,
            cfg_scale,
            remasking,
            stream(1000 + seed),
        )
        if MASK in ref:
            departed += 1
        else:
            exact += 1
    assert exact >= 100 and departed >= 10


def test_batched_rows_match_the_reference_row_by_row() -> None:
    """Left padding and batching do not change a row: each row equals the batch-1 reference."""
    prompts = [[5, 14, 6], [9, 30, 31, 32, 12], [44]]
    for seed in range(8):
        model = RandomToy(seed, mask_bias=1.0)
        cfg = SamplerConfig(steps=4, gen_length=4, block_length=2, temperature=0.0)
        out = generate(model, prompts, MASK, PAD, cfg, seed=[1, 2, 3])
        for j, p in enumerate(prompts):
            ref = reference_generate(model, p, 4, 4, 2, MASK)
            if MASK not in ref:
                assert out.x[j, -4:].tolist() == ref


def test_threshold_decoding_makes_progress_when_the_mask_is_predicted() -> None:
    """Fast decoding with a model that puts most mass on the mask: positions predicting the mask stay
    masked, but a step with no real commit commits its most confident position's best non-mask token, so
    the block finishes (one token per step here) and the output holds no mask."""

    def model(x: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
        out = torch.zeros((x.shape[0], x.shape[1], V))
        out[:, :, MASK] = 8.0
        out[:, :, 3] = 1.0 + 0.1 * torch.arange(x.shape[1], dtype=torch.float32)  # later: more confident
        return out

    out = denoise(model, canvas(1, 5), 1, MASK, SamplerConfig(steps=5, threshold=0.9), 0, record_commits=True)
    assert out.x[0, 1:].tolist() == [3] * 5
    assert [int(c[0]) for c in out.commits] == [1] * 5
    # without the threshold, the schedule still ends with a complete block
    fixed = denoise(model, canvas(1, 5), 1, MASK, SamplerConfig(steps=2), 0, record_commits=True)
    assert fixed.x[0, 1:].tolist() == [3] * 5
    assert [int(c[0]) for c in fixed.commits] == [0, 5]  # step 1's three slots went to predicted masks


def choice_cases() -> list[tuple[int, list[int], int, int, int, float, float, float]]:
    """(toy seed, prompt, gen, steps, block, temperature, cfg, choice temperature), drawn at random."""
    rng = torch.Generator().manual_seed(2026)
    cases = []
    for seed in range(48):
        block = [2, 3, 4][int(torch.randint(3, (1,), generator=rng))]
        n_blocks = 1 + int(torch.randint(2, (1,), generator=rng))
        per_block = 2 + int(torch.randint(3, (1,), generator=rng))
        prompt = (3 + torch.randint(TOY_V - 3, (3,), generator=rng)).tolist()
        temperature = [0.0, 0.7][seed % 2]
        cfg = [0.0, 1.5][(seed // 2) % 2]
        choice = [1.0, 4.5][(seed // 4) % 2]
        cases.append((seed, prompt, block * n_blocks, per_block * n_blocks, block, temperature, cfg, choice))
    return cases


@pytest.mark.parametrize("case", choice_cases(), ids=lambda c: f"toy{c[0]}")
def test_choice_temperature_matches_the_maskgit_reference(case: tuple) -> None:
    """`choice_temperature` against the reference with MaskGIT's selection written in: log(confidence) +
    tau_s * Gumbel, tau_s annealed to 0 at a block's last step, the noise drawn after the token noise
    (compared as the plain differential cases are, `assert_agrees`)."""
    seed, prompt, gen, steps, block, temperature, cfg_scale, choice = case
    got, ref = ours_and_reference(
        RandomToy(seed), prompt, gen, steps, block, temperature, cfg_scale, "low_confidence", seed, choice
    )
    assert_agrees(got, ref, block)


def test_choice_cases_mostly_agree_exactly() -> None:
    """Most choice cases must be full-output comparisons, not the partial one after a left mask."""
    exact = 0
    for seed, prompt, gen, steps, block, temperature, cfg_scale, choice in choice_cases():
        ref = reference_generate(
            RandomToy(seed),
            prompt,
            gen,
            steps,
            block,
            MASK,
            temperature,
            cfg_scale,
            "low_confidence",
            stream(seed),
            choice,
        )
        exact += MASK not in ref
    assert exact >= 36


def test_choice_noise_changes_which_positions_commit_and_zero_is_llada() -> None:
    """At temperature 0 the tokens a step writes are fixed by the canvas, so only the commit order can
    differ between seeds: with choice noise greedy decoding writes several records, without it one."""
    model, prompt = RandomToy(7), [5, 14, 6]
    plain = SamplerConfig(steps=4, gen_length=8)
    noisy = SamplerConfig(steps=4, gen_length=8, choice_temperature=4.5)
    assert len({tuple(ours(model, prompt, plain, seed=s)) for s in range(12)}) == 1
    assert len({tuple(ours(model, prompt, noisy, seed=s)) for s in range(12)}) > 1
    assert "choice_temperature" not in plain.to_json()  # keys written before the knob stay valid
    assert noisy.to_json()["choice_temperature"] == 4.5


@pytest.mark.parametrize(
    "bad",
    [
        {"choice_temperature": 1.0, "threshold": 0.9},
        {"choice_temperature": 1.0, "remasking": "random"},
        {"choice_temperature": -1.0},
    ],
)
def test_choice_temperature_with_rules_it_cannot_perturb_is_a_user_error(bad: dict) -> None:
    with pytest.raises(BenchError, match="choice_temperature"):
        checked(SamplerConfig(steps=4, gen_length=8, **bad), 8)
