"""AoD's acceptance rule (systems.optimizers.acceptance) on synthetic reward processes where the truth is
known: under the null (the edit changes nothing) the paired swap test keeps the edit with probability
at most alpha, for a mean statistic and for a batch statistic that does not decompose over samples;
(exactly alpha for the randomized test, 1/16 for the plain one at b = 4); under a real effect it keeps it
most of the time; the plain "higher reward wins" rule keeps a null edit
about half the time (why it is not used). Frequencies are checked against binomial bounds (4 sigma).
"""

from __future__ import annotations

import math
import random

import pytest

from systems.optimizers.acceptance import AcceptanceRule, paired_swap_test


def mean_difference(a: list[float], b: list[float]) -> float:
    return sum(a) / len(a) - sum(b) / len(b)


def distinct_difference(a: list[int], b: list[int]) -> float:
    """A batch-level statistic like distinct-n: share of distinct values in the batch."""
    return len(set(a)) / len(a) - len(set(b)) / len(b)


def binomial_upper(p: float, n: int, sigmas: float = 4.0) -> float:
    return p + sigmas * math.sqrt(p * (1 - p) / n)


def rates(trials: int, b: int, draw, statistic, rule: AcceptanceRule, seed: int = 0) -> tuple[float, float]:  # noqa: ANN001
    """(swap-test acceptance rate, plain 'greater' acceptance rate) over `trials` paired batches."""
    rng = random.Random(seed)
    swap = greater = 0
    for t in range(trials):
        cand, inc = draw(rng, b)
        test = paired_swap_test(cand, inc, statistic, seed=t)
        swap += rule.decide(test, test.observed, rng.random())
        greater += test.observed > 0
    return swap / trials, greater / trials


def within(rate: float, p: float, n: int) -> bool:
    return abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n)


def null_gaussian(rng: random.Random, b: int) -> tuple[list[float], list[float]]:
    # shared per-index noise (common random numbers) plus independent noise on each side
    shared = [rng.gauss(0, 1) for _ in range(b)]
    return [s + rng.gauss(0, 0.3) for s in shared], [s + rng.gauss(0, 0.3) for s in shared]


def test_null_edit_is_kept_alpha_of_the_time_randomized_and_one_in_sixteen_plain_at_b4() -> None:
    trials = 4000
    swap, greater = rates(trials, 4, null_gaussian, mean_difference, AcceptanceRule(alpha=0.1))
    assert within(swap, 0.1, trials)  # randomized: level exactly alpha
    plain, _ = rates(trials, 4, null_gaussian, mean_difference, AcceptanceRule("swap-conservative", 0.1))
    # continuous null, 16 swap patterns: accepted only when the observed pattern is the best of 16
    assert within(plain, 1 / 16, trials) and plain <= binomial_upper(0.1, trials)
    assert within(greater, 0.5, trials)  # the plain rule: a coin flip


def test_null_holds_for_a_batch_statistic_that_does_not_decompose() -> None:
    def draw(rng: random.Random, b: int) -> tuple[list[int], list[int]]:
        return [rng.randrange(5) for _ in range(b)], [rng.randrange(5) for _ in range(b)]

    trials = 3000
    for b in (4, 6):
        swap, _ = rates(trials, b, draw, distinct_difference, AcceptanceRule(alpha=0.1), seed=b)
        assert swap <= binomial_upper(0.1, trials)


def test_monte_carlo_patterns_keep_the_level_for_large_batches() -> None:
    trials = 400
    rule = AcceptanceRule(alpha=0.1)
    rng = random.Random(5)
    accepted = 0
    for t in range(trials):
        cand, inc = null_gaussian(rng, 16)
        test = paired_swap_test(cand, inc, mean_difference, exact_limit=12, monte_carlo=255, seed=t)
        assert not test.exact and test.patterns == 256
        accepted += rule.decide(test, test.observed, rng.random())
    assert accepted / trials <= binomial_upper(0.1, trials)


def test_a_real_improvement_is_kept_most_of_the_time() -> None:
    def better(rng: random.Random, b: int) -> tuple[list[float], list[float]]:
        shared = [rng.gauss(0, 1) for _ in range(b)]
        return [s + 1.0 + rng.gauss(0, 0.3) for s in shared], [s + rng.gauss(0, 0.3) for s in shared]

    swap, _ = rates(1000, 4, better, mean_difference, AcceptanceRule(alpha=0.1))
    # each paired difference is N(1, 0.18): all four positive with probability ~0.9997
    assert swap > 0.95


def test_randomizing_keeps_a_second_best_edit_with_the_level_left_over() -> None:
    """One re-pairing beats the observed D: plain p = 2/16 > 0.1, randomized p = (1 + u) / 16, kept
    when u <= 0.6, i.e. 60% of the time; a best-of-16 edit is kept whatever u."""
    cand, inc = [1.0, 1.0, 1.0, -0.5], [0.0, 0.0, 0.0, 0.0]
    test = paired_swap_test(cand, inc, mean_difference)
    assert (test.greater, test.equal, test.p_value) == (1, 1, pytest.approx(2 / 16))
    rule = AcceptanceRule(alpha=0.1)
    assert not AcceptanceRule("swap-conservative", 0.1).decide(test, test.observed)
    assert rule.decide(test, test.observed, 0.59) and not rule.decide(test, test.observed, 0.61)
    u = random.Random(1)
    kept = sum(rule.decide(test, test.observed, u.random()) for _ in range(4000)) / 4000
    assert within(kept, 0.6, 4000)
    best = paired_swap_test([1.0] * 4, [0.0] * 4, mean_difference)
    assert all(rule.decide(best, best.observed, x) for x in (0.0, 0.5, 0.999))


def test_exact_p_value_by_hand() -> None:
    cand, inc = [3.0, 1.0], [1.0, 2.0]
    # patterns: none swapped: (2 + -1)/2 = 0.5; swap 0: -0.5 ... enumerate all four
    test = paired_swap_test(cand, inc, mean_difference)
    values = sorted([0.5, (-2 + -1) / 2, (2 + 1) / 2, -0.5])
    assert test.observed == pytest.approx(0.5)
    assert test.p_value == pytest.approx(sum(v >= 0.5 for v in values) / 4)
    assert test.exact and test.patterns == 4
    ties = paired_swap_test([1.0, 1.0], [1.0, 1.0], mean_difference)
    assert ties.p_value == 1.0 and (ties.greater, ties.equal) == (0, 4)
    assert not AcceptanceRule().decide(ties, ties.observed, 0.0)  # D = 0: the margin rejects it


def test_rule_needs_both_the_test_and_the_margin() -> None:
    test = paired_swap_test([2.0] * 4, [0.0] * 4, mean_difference)
    assert test.p_value == pytest.approx(1 / 16)
    assert AcceptanceRule(alpha=0.1).decide(test, test.observed)
    assert not AcceptanceRule(alpha=0.05).decide(test, test.observed, 0.9)  # (0 + 0.9) / 16 > 0.05
    assert AcceptanceRule(alpha=0.05).decide(test, test.observed, 0.7)  # 0.7 / 16 <= 0.05
    assert not AcceptanceRule(alpha=0.1, min_gain=3.0).decide(test, test.observed)
    assert AcceptanceRule(test="greater").decide(None, 0.01)
    assert not AcceptanceRule(test="greater").decide(None, 0.0)
    with pytest.raises(ValueError):
        paired_swap_test([1.0], [1.0, 2.0], mean_difference)


def two_looks(rule: AcceptanceRule, rng: random.Random, draw, t: int) -> tuple[bool, bool]:  # noqa: ANN001
    """(kept, had a second look) for one candidate under the two-look rule, as AoD's loop runs it: the
    first batch of 4 pairs, then, when `second_look` allows, a second fresh batch and all 8 pairs."""
    cand, inc = draw(rng, 4)
    test = paired_swap_test(cand, inc, mean_difference, seed=t)
    u = rng.random()
    if rule.decide(test, test.observed, u):
        return True, False
    if not rule.second_look(test, test.observed, u):
        return False, False
    more_cand, more_inc = draw(rng, 4)
    pooled = paired_swap_test(cand + more_cand, inc + more_inc, mean_difference, seed=t)
    assert pooled.patterns == 256 and pooled.exact
    return rule.decide_pooled(pooled, pooled.observed, rng.random()), True


def test_two_looks_keep_a_null_edit_at_most_alpha_of_the_time() -> None:
    """The union bound of acceptance.AOD_SECOND_ALPHA: first look at 0.07, pooled look at 0.03; under
    the exact null each randomized p is uniform, so the edit is kept at most 0.1 of the time."""
    rule = AcceptanceRule(alpha=0.1, second_alpha=0.03)
    assert rule.first_alpha == pytest.approx(0.07)
    trials = 4000
    rng = random.Random(11)
    outcomes = [two_looks(rule, rng, null_gaussian, t) for t in range(trials)]
    kept = sum(k for k, _ in outcomes) / trials
    looks = sum(s for _, s in outcomes) / trials
    assert kept <= binomial_upper(0.1, trials)
    # the first look alone keeps 0.07; the second adds at most 0.03 on top
    assert kept >= 0.07 - 4 * math.sqrt(0.07 * 0.93 / trials)
    # a second look needs p <= 0.25 and D > 0 (the margin is 0 here): about a quarter of null rounds,
    # less the 0.07 the first look kept
    assert within(looks, 0.25 - 0.07, trials)


def test_a_second_look_keeps_more_of_the_edits_that_break_a_record_now_and_then() -> None:
    """The refusal seen in AoD's traces: an edit that fixes most records and breaks one in five (an
    unparsed record). A batch with one broken record is second best of 16 re-pairings or worse. Two
    looks keep such an edit more often than one look at the same total level."""

    def fixes_most(rng: random.Random, b: int) -> tuple[list[float], list[float]]:
        inc = [rng.gauss(0, 0.1) for _ in range(b)]
        return [x + (1.0 if rng.random() < 0.8 else -1.0) + rng.gauss(0, 0.1) for x in inc], inc

    trials = 3000
    one = AcceptanceRule(alpha=0.1)
    two = AcceptanceRule(alpha=0.1, second_alpha=0.03)
    rng_one, rng_two = random.Random(3), random.Random(3)
    kept_one = sum(two_looks(one, rng_one, fixes_most, t)[0] for t in range(trials)) / trials
    kept_two = sum(two_looks(two, rng_two, fixes_most, t)[0] for t in range(trials)) / trials
    assert kept_two > kept_one + 4 * math.sqrt(0.25 / trials)


def test_the_second_look_is_off_at_zero_and_refuses_what_misses_the_gate_or_the_margin() -> None:
    second_best = paired_swap_test([1.0, 1.0, 1.0, -0.5], [0.0] * 4, mean_difference)  # p 2/16
    rule = AcceptanceRule(alpha=0.1, min_gain=0.03, second_alpha=0.03)
    assert not rule.decide(second_best, second_best.observed, 0.2)  # (1 + 0.2) / 16 = 0.075 > 0.07
    assert rule.second_look(second_best, second_best.observed, 0.2)
    assert not rule.second_look(second_best, 0.01, 0.2)  # the margin
    worse = paired_swap_test([1.0, 1.0, -0.2, -0.3], [0.0] * 4, mean_difference)  # p 4/16 at u = 1
    assert worse.p_value == pytest.approx(4 / 16)
    assert rule.second_look(worse, worse.observed, 0.5) and not AcceptanceRule(
        alpha=0.1, second_alpha=0.03, gate=0.2
    ).second_look(worse, worse.observed, 0.5)
    assert not AcceptanceRule(alpha=0.1).second_look(second_best, second_best.observed, 0.2)
    # with no second look the rule is the one-look rule, decision for decision
    one, none = AcceptanceRule(alpha=0.1), AcceptanceRule(alpha=0.1, second_alpha=0.0)
    for u in (0.0, 0.3, 0.6, 0.61, 0.99):
        assert one.decide(second_best, second_best.observed, u) == none.decide(
            second_best, second_best.observed, u
        )
    with pytest.raises(ValueError, match="second_alpha"):
        AcceptanceRule(alpha=0.1, second_alpha=0.1)
