"""Statistics over seeds as small mergeable values, plus the tests that reports and gates rely on.

Why a value object: aggregation happens at several levels (seeds -> (system, task) -> system macro mean),
and partial results from different runs or workers must merge without keeping every observation. `Stat`
keeps count, mean and the sum of squared deviations (Chan et al.'s parallel update), so merging is exact
and numerically stable. It reports the *sample* standard deviation (n - 1), the one papers quote over
seeds. NaN observations are counted separately and never enter the mean: a metric that is undefined for a
seed (no parsed record) must not be scored as 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NAN = float("nan")


def is_nan(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


@dataclass(frozen=True)
class Stat:
    """Count, mean and M2 (sum of squared deviations) of finite observations; NaNs are only counted."""

    n: int = 0
    mean: float = NAN
    m2: float = 0.0
    n_nan: int = 0
    min: float = NAN
    max: float = NAN

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stat:
        s = cls()
        for v in values:
            s = s.add(v)
        return s

    def add(self, x: float | None) -> Stat:
        """Return a new Stat with one more observation (Welford's update)."""
        if is_nan(x) or (isinstance(x, float) and math.isinf(x)):
            return Stat(self.n, self.mean, self.m2, self.n_nan + 1, self.min, self.max)
        x = float(x)  # type: ignore[arg-type]
        if self.n == 0:
            return Stat(1, x, 0.0, self.n_nan, x, x)
        n = self.n + 1
        delta = x - self.mean
        mean = self.mean + delta / n
        m2 = self.m2 + delta * (x - mean)
        return Stat(n, mean, m2, self.n_nan, min(self.min, x), max(self.max, x))

    def merge(self, other: Stat) -> Stat:
        """Combine two disjoint sets of observations exactly (Chan et al. 1979)."""
        if other.n == 0:
            return Stat(self.n, self.mean, self.m2, self.n_nan + other.n_nan, self.min, self.max)
        if self.n == 0:
            return Stat(other.n, other.mean, other.m2, self.n_nan + other.n_nan, other.min, other.max)
        n = self.n + other.n
        delta = other.mean - self.mean
        mean = self.mean + delta * other.n / n
        m2 = self.m2 + other.m2 + delta * delta * self.n * other.n / n
        return Stat(n, mean, m2, self.n_nan + other.n_nan, min(self.min, other.min), max(self.max, other.max))

    __add__ = merge

    @property
    def variance(self) -> float:
        """Sample variance (n - 1); NaN below two observations."""
        return self.m2 / (self.n - 1) if self.n >= 2 else NAN

    @property
    def std(self) -> float:
        v = self.variance
        return math.sqrt(max(v, 0.0)) if not math.isnan(v) else NAN

    @property
    def sem(self) -> float:
        """Standard error of the mean."""
        return self.std / math.sqrt(self.n) if self.n >= 2 else NAN

    def t_interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """Two-sided Student-t confidence interval for the mean; (NaN, NaN) below two observations."""
        if self.n < 2:
            return (NAN, NAN)
        half = t_quantile(0.5 + confidence / 2, self.n - 1) * self.sem
        return (self.mean - half, self.mean + half)

    def bounded_interval(
        self, bounds: tuple[float, float] = (-math.inf, math.inf), confidence: float = 0.95
    ) -> tuple[float, float]:
        """The t-interval clipped to the metric's range: a rate's interval never leaves [0, 1].

        Why clipping rather than Wilson: the observations are per-seed means (rates over a cell's
        samples, averaged), not one binomial count, so a binomial interval would claim the wrong n.
        Clipping keeps the t-interval's coverage where it is inside the range and only removes values
        the metric cannot take.
        """
        lo, hi = self.t_interval(confidence)
        if math.isnan(lo):
            return (lo, hi)
        return (min(max(lo, bounds[0]), bounds[1]), max(min(hi, bounds[1]), bounds[0]))

    def to_json(self) -> dict[str, float | int | None]:
        lo, hi = self.t_interval()

        def clean(v: float) -> float | None:
            return None if math.isnan(v) else v

        return {
            "n": self.n,
            "n_nan": self.n_nan,
            "mean": clean(self.mean),
            "std": clean(self.std),
            "sem": clean(self.sem),
            "ci95_low": clean(lo),
            "ci95_high": clean(hi),
            "min": clean(self.min),
            "max": clean(self.max),
        }


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (scipy, imported lazily so `bench list` stays fast)."""
    from scipy import stats as st

    return float(st.t.ppf(p, df))


@dataclass(frozen=True)
class PairedTest:
    """Paired comparison of B against A on shared seeds: diff = B - A."""

    n: int
    mean_diff: float
    std_diff: float
    t_stat: float
    p_ttest: float
    p_wilcoxon: float
    effect_size: float  # Cohen's d_z = mean(diff) / sd(diff)

    def to_json(self) -> dict[str, float | int | None]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in self.__dict__.items()}


def paired_test(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Paired t-test and Wilcoxon signed-rank test of b - a; pairs with a NaN on either side are dropped.

    Degenerate cases are answered rather than raised: all differences zero -> p = 1 (no evidence of a
    change), a constant non-zero difference -> p = 0 for the t-test (infinite t) and the exact Wilcoxon p.
    """
    from scipy import stats as st

    if len(a) != len(b):
        raise ValueError(f"paired_test needs equal lengths, got {len(a)} and {len(b)}")
    pairs = [(float(x), float(y)) for x, y in zip(a, b, strict=True) if not is_nan(x) and not is_nan(y)]
    n = len(pairs)
    diffs = [y - x for x, y in pairs]
    d = Stat.of(diffs)
    if n < 2:
        return PairedTest(n, d.mean, NAN, NAN, NAN, NAN, NAN)
    sd = d.std
    if sd <= 1e-12 * max(1.0, abs(d.mean)):  # constant difference up to float rounding
        if abs(d.mean) <= 1e-12:
            return PairedTest(n, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0)
        t_stat = math.copysign(math.inf, d.mean)
        p_t = 0.0
        effect = math.copysign(math.inf, d.mean)
    else:
        t_stat = d.mean / (sd / math.sqrt(n))
        p_t = float(2 * st.t.sf(abs(t_stat), n - 1))
        effect = d.mean / sd
    nonzero = [x for x in diffs if x != 0.0]
    if not nonzero:
        p_w = 1.0
    else:
        p_w = float(st.wilcoxon(diffs, zero_method="wilcox", alternative="two-sided").pvalue)
    return PairedTest(n, d.mean, sd, t_stat, p_t, p_w, effect)


def welch_p(a: Stat, b: Stat) -> float:
    """Two-sided Welch t-test p-value from two summaries (used when seeds are not shared)."""
    from scipy import stats as st

    if a.n < 2 or b.n < 2:
        return NAN
    va, vb = a.variance / a.n, b.variance / b.n
    se = math.sqrt(va + vb)
    if se == 0.0:
        return 1.0 if a.mean == b.mean else 0.0
    t = (a.mean - b.mean) / se
    df = (va + vb) ** 2 / ((va**2) / (a.n - 1) + (vb**2) / (b.n - 1))
    return float(2 * st.t.sf(abs(t), df))
