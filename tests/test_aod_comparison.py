"""benchmarks.aod.comparison: Holm's adjustment by its definition, and the tables from a written run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.aod.comparison import holm, metric_table, paired_rows
from reports.fixtures import write_run


def _holm_by_definition(p: list[float]) -> list[float]:
    """Holm (1979): reject H_(1..k) while p_(j) <= alpha / (m - j + 1); the adjusted p-value of H_(k) is
    the smallest alpha at which it is rejected, searched over a fine grid of alphas."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [1.0] * m
    for alpha in np.linspace(0.0, 1.0, 100_001):
        for j, i in enumerate(order):
            if p[i] > alpha / (m - j):
                break
            out[i] = min(out[i], alpha)
    return out


@pytest.mark.parametrize(
    "p", [[0.01, 0.04, 0.03, 0.005], [0.2, 0.2, 0.001], [0.5], [0.03, 0.9, 0.011, 0.02, 0.4]]
)
def test_holm_matches_its_definition(p):
    assert holm(p) == pytest.approx(_holm_by_definition(p), abs=2e-5)


def test_holm_leaves_nan_out_of_the_family():
    adjusted = holm([0.01, math.nan, 0.02])
    assert (
        adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    )


def test_tables_from_a_run(tmp_path):
    rng = np.random.default_rng(5)
    base = rng.normal(0.4, 0.1, 10)
    systems = {"llada": base, "aod": base + 0.05, "aod-norl": base + rng.normal(0, 0.01, 10)}
    run = write_run(tmp_path / "r", {(s, "multiwoz/train"): {"tsr": v.tolist()} for s, v in systems.items()})
    means = {r["system"]: r for r in metric_table(run, ("tsr",))}
    assert means["aod"]["mean"] == pytest.approx(systems["aod"].mean())
    assert means["aod"]["std"] == pytest.approx(systems["aod"].std(ddof=1))
    rows = paired_rows(run, "llada", ("tsr",))
    pairs = {(r["against"], r["system"]) for r in rows}
    assert pairs == {("llada", "aod"), ("llada", "aod-norl"), ("aod-norl", "aod")}
    raw = [r["p_ttest"] for r in rows]
    assert [r["p_ttest_holm"] for r in rows] == pytest.approx(holm(raw))
    assert all(r["p_ttest_holm"] >= r["p_ttest"] for r in rows)
    (aod,) = [r for r in rows if (r["against"], r["system"]) == ("llada", "aod")]
    assert aod["diff"] == pytest.approx(0.05) and aod["n_shared"] == 10
