"""bench.stats against independent computations (numpy / scipy on the raw observations)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from bench.stats import Stat, paired_test, welch_p

RNG = np.random.default_rng(1234)


def test_stat_matches_numpy_sample_std_and_t_interval():
    xs = RNG.normal(0.7, 0.05, size=15)
    s = Stat.of(xs.tolist())
    assert s.n == 15
    assert s.mean == pytest.approx(xs.mean(), rel=1e-12)
    assert s.std == pytest.approx(xs.std(ddof=1), rel=1e-12)
    lo, hi = s.t_interval()
    ref_lo, ref_hi = st.t.interval(0.95, 14, loc=xs.mean(), scale=st.sem(xs))
    assert (lo, hi) == pytest.approx((ref_lo, ref_hi), rel=1e-10)


def test_merge_equals_stat_of_concatenation():
    a, b = RNG.normal(size=7).tolist(), RNG.normal(3, 2, size=11).tolist()
    merged = Stat.of(a).merge(Stat.of(b))
    whole = Stat.of(a + b)
    assert merged.n == whole.n == 18
    assert merged.mean == pytest.approx(whole.mean, rel=1e-12)
    assert merged.variance == pytest.approx(whole.variance, rel=1e-12)
    assert (merged.min, merged.max) == (whole.min, whole.max)


def test_nan_is_counted_not_averaged():
    s = Stat.of([0.5, float("nan"), 0.7, None])
    assert (s.n, s.n_nan) == (2, 2)
    assert s.mean == pytest.approx(0.6)
    assert math.isnan(Stat.of([float("nan")]).mean)
    assert math.isnan(Stat.of([0.3]).std)  # one seed: no sample std


def test_paired_test_matches_scipy():
    a = RNG.normal(0.6, 0.05, size=15)
    b = a + RNG.normal(0.03, 0.02, size=15)
    r = paired_test(a.tolist(), b.tolist())
    assert r.n == 15
    assert r.p_ttest == pytest.approx(st.ttest_rel(b, a).pvalue, rel=1e-9)
    assert r.p_wilcoxon == pytest.approx(st.wilcoxon(b - a).pvalue, rel=1e-9)
    assert r.effect_size == pytest.approx((b - a).mean() / (b - a).std(ddof=1), rel=1e-12)


def test_paired_test_degenerate_cases_answer_instead_of_raising():
    same = paired_test([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert (same.p_ttest, same.p_wilcoxon, same.mean_diff) == (1.0, 1.0, 0.0)
    shifted = paired_test([0.5, 0.6, 0.7], [0.6, 0.7, 0.8])
    assert shifted.p_ttest == 0.0 and shifted.mean_diff == pytest.approx(0.1)
    dropped = paired_test([0.5, float("nan"), 0.7], [0.4, 0.9, 0.6])
    assert dropped.n == 2


def test_welch_p_matches_scipy():
    a, b = RNG.normal(0, 1, 10), RNG.normal(0.8, 2, 14)
    p = welch_p(Stat.of(a.tolist()), Stat.of(b.tolist()))
    assert p == pytest.approx(st.ttest_ind(a, b, equal_var=False).pvalue, rel=1e-9)
