"""The denoise probe's split by token class (benchmarks/diffusion/denoise_probe.py)."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.diffusion.denoise_probe import class_tally, masks


def test_class_tally_counts_hits_and_content_mass_by_the_reference_token_s_class() -> None:
    content = torch.tensor([False, False, True, True])  # ids 0, 1 structure; 2, 3 content
    logits = torch.tensor(
        [
            [3.0, 0.0, 1.0, 0.0],  # target 0 (structure), argmax 0: hit
            [0.0, 0.0, 2.0, 0.0],  # target 1 (structure), argmax 2: miss
            [0.0, 0.0, 0.0, 5.0],  # target 3 (content), argmax 3: hit
            [9.0, 0.0, 0.0, 0.0],  # target 2 (content), not scored
            [0.0, 4.0, 0.0, 0.0],  # target 2 (content), argmax 1: miss
        ]
    )
    target = torch.tensor([0, 1, 3, 2, 2])
    scored = torch.tensor([True, True, True, False, True])
    s_hits, s_n, c_hits, c_n, mass = class_tally(logits, target, scored, content).tolist()
    assert (s_hits, s_n, c_hits, c_n) == (1, 2, 1, 2)

    def content_share(row: list[float]) -> float:  # by hand, from the definition of softmax
        e = [math.exp(v) for v in row]
        return (e[2] + e[3]) / sum(e)

    assert mass == pytest.approx(content_share([3.0, 0.0, 1.0, 0.0]) + content_share([0.0, 0.0, 2.0, 0.0]))


def test_masks_score_the_masked_positions_or_the_window_after_the_prefix() -> None:
    gen = torch.Generator().manual_seed(0)
    masked, scored = masks("t=1", 10, gen)
    assert bool(masked.all()) and torch.equal(masked, scored)
    masked, scored = masks("prefix=3", 40, gen)
    assert not bool(masked[:3].any()) and bool(masked[3:].all())
    assert scored.nonzero().flatten().tolist() == list(range(3, 27))
