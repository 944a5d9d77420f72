"""When AoD keeps an edit: a paired swap (sign-flip) permutation test on fresh samples.

Why a test and not "higher reward wins": one batch of 4 records is noisy, so a do-nothing edit beats the
incumbent about half the time (measured: docs/systems-aod.md), and each round of comparing against the
same stored batch lets chance gains pile up (the winner's curse). The rule here:

1. Every round draws a *fresh* evaluation seed. The incumbent is re-evaluated on it, and the candidate
   is evaluated on the same seed and sample indices (same few-shot draws, same sampler noise), so sample
   i of the two batches forms a pair that differs only by the prompt.
2. The statistic is the difference of the two *batch* rewards, D = R(candidate batch) - R(incumbent
   batch), whatever R is (it need not decompose over samples: diversity and novelty do not).
3. Under the null "the edit changes nothing", the two members of each pair are exchangeable, and pairs
   are independent (each index has its own noise and few-shot draw). So every one of the 2^b ways of
   swapping members within pairs gives an equally likely pair of batches. The p-value is the share of
   swap patterns (the identity included) whose D is at least the observed D. This is exact: under the
   null, P(p <= alpha) <= alpha for any reward function, batch size and task.
4. Accept when p <= alpha and D > min_gain.

With b = 4 there are 16 patterns, the smallest p-value is 1/16, and a continuous null is accepted
with probability exactly 1/16 at alpha = 0.1; ties (identical records on both sides) only lower it.
Above `exact_limit` pairs the patterns are drawn at random (Monte Carlo, seeded), which keeps the test
valid because the identity pattern is always counted (p = (1 + #{D_g >= D}) / (1 + m)).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class SwapTest(Generic[T]):
    """Outcome of one paired swap test."""

    observed: float
    p_value: float
    patterns: int
    exact: bool


def paired_swap_test(
    candidate: Sequence[T],
    incumbent: Sequence[T],
    statistic: Callable[[list[T], list[T]], float],
    exact_limit: int = 12,
    monte_carlo: int = 2047,
    seed: int = 0,
    tolerance: float = 1e-12,
) -> SwapTest:
    """p-value of `statistic(candidate, incumbent)` against all within-pair swaps.

    `candidate[i]` and `incumbent[i]` are the two members of pair i (same sample index). `statistic`
    gets the two (possibly swapped) batches and returns candidate-minus-incumbent.
    """
    if len(candidate) != len(incumbent):
        raise ValueError("paired swap test needs batches of equal size")
    b = len(candidate)
    observed = statistic(list(candidate), list(incumbent))

    def swapped(mask: Sequence[bool]) -> float:
        a = [incumbent[i] if m else candidate[i] for i, m in enumerate(mask)]
        c = [candidate[i] if m else incumbent[i] for i, m in enumerate(mask)]
        return statistic(a, c)

    if b <= exact_limit:
        count = 0
        total = 0
        for mask in itertools.product((False, True), repeat=b):
            total += 1
            value = observed if not any(mask) else swapped(mask)
            count += value >= observed - tolerance
        return SwapTest(observed, count / total, total, True)
    rng = random.Random(seed)
    count = 1  # the identity pattern
    for _ in range(monte_carlo):
        mask = [rng.random() < 0.5 for _ in range(b)]
        count += swapped(mask) >= observed - tolerance
    return SwapTest(observed, count / (monte_carlo + 1), monte_carlo + 1, False)


@dataclass(frozen=True)
class AcceptanceRule:
    """Keep a candidate prompt when it beats the incumbent on the same fresh samples, beyond chance.

    `test`: `swap` (the paired swap test above) or `greater` (the old rule, D > min_gain, kept to
    measure against). `alpha` bounds the false-acceptance rate of a do-nothing edit under `swap`.
    """

    test: str = "swap"
    alpha: float = 0.1
    min_gain: float = 0.0

    def decide(self, result: SwapTest | None, observed: float) -> bool:
        if observed <= self.min_gain:
            return False
        if self.test == "greater":
            return True
        return result is not None and result.p_value <= self.alpha
