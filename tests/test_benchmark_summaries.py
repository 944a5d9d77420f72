"""The summaries the AoD and diffusion benchmarks print: counts, Wilson intervals, headroom, and what
new values are made of."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq

from benchmarks.aod.false_acceptance import accepted_plain, summarize, wilson
from benchmarks.diffusion.new_values import run_values, split_values, string_fields
from benchmarks.diffusion.steering import _means


def wilson_by_root(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson interval from its definition: the p with |k/n - p| = z sqrt(p (1 - p) / n)."""
    phat = k / n
    f = lambda p: (phat - p) ** 2 - z * z * p * (1 - p) / n  # noqa: E731
    lo = 0.0 if k == 0 else brentq(f, 1e-12, phat - 1e-12)
    hi = 1.0 if k == n else brentq(f, phat + 1e-12, 1 - 1e-12)
    return lo, hi


@pytest.mark.parametrize(("k", "n"), [(5, 160), (19, 160), (0, 40), (40, 40), (8, 160)])
def test_wilson_matches_the_root_of_its_defining_equation(k: int, n: int) -> None:
    assert wilson(k, n) == pytest.approx(wilson_by_root(k, n), abs=1e-9)


def test_summary_counts_kept_edits_per_mode_with_the_margin_in_the_rows() -> None:
    rows = [
        {
            "mode": "noop-note",
            "seed": s,
            "difference": d,
            "p_value": p,
            "accepted": a,
            "greater": d > 0,
            "accepted_plain": False,
            "min_gain": 0.03,
        }
        for s, d, p, a in [
            (0, 0.05, 0.0625, True),
            (0, 0.01, 0.0625, False),
            (1, 0.0, 1.0, False),
            (1, -0.02, 0.9, False),
        ]
    ]
    out = summarize({"noop-note": rows}, seeds=2)["noop-note"]
    assert (out["trials"], out["seeds"], out["accepted"], out["greater"], out["ties"]) == (4, 2, 1, 2, 1)
    assert out["rate"] == 0.25 and out["rate_ci95"] == pytest.approx(wilson_by_root(1, 4))
    assert out["min_p"] == 0.0625
    assert math.isnan(summarize({"x": []}, seeds=1)["x"]["rate"])


def test_the_plain_p_value_counterfactual_reads_each_look_at_its_own_level() -> None:
    """One look: plain p at alpha - second_alpha (0.07); a trial with a second look: its first look at
    0.07 or its pooled look at 0.03, each with the margin."""
    one = {"p_value": 0.0625, "paired_difference": 0.05}
    assert accepted_plain(one, 0.1, 0.03, 0.03) and not accepted_plain(
        {**one, "p_value": 0.125}, 0.1, 0.03, 0.03
    )
    # a p-value between the two levels: kept by the one-look rule (0.1), not by the first of two looks
    assert accepted_plain({**one, "p_value": 0.09}, 0.1, 0.0, 0.03)
    assert not accepted_plain({**one, "p_value": 0.09}, 0.1, 0.03, 0.03)
    pooled = {
        "p_value": 0.02,
        "paired_difference": 0.04,
        "first_look": {"p_value": 0.125, "paired_difference": 0.2},
    }
    assert accepted_plain(pooled, 0.1, 0.03, 0.03)
    assert not accepted_plain({**pooled, "p_value": 0.04}, 0.1, 0.03, 0.03)
    assert not accepted_plain({**pooled, "paired_difference": 0.01}, 0.1, 0.03, 0.03)  # the margin


def test_steering_means_report_the_headroom_the_plain_rate_leaves() -> None:
    rows = [
        {"with": 1.0, "without": 0.2, "parse_with": 1.0},
        {"with": 0.6, "without": 0.6, "parse_with": 0.5},
    ]
    m = _means(rows)
    assert m["lift"] == pytest.approx(((1.0 - 0.2) + 0.0) / 2)
    assert m["headroom"] == pytest.approx(((1 - 0.2) + (1 - 0.6)) / 2)
    assert m["lift"] <= m["headroom"]


def test_new_values_split_copies_recombinations_and_invented_words(tmp_path) -> None:
    """Hand-counted: two references' dish names; a copy, a new name made of their words, and a name
    with a word neither has. Only parsed records with a string value count, over every sealed seed
    (a damaged cell is skipped)."""

    refs = {"Jeera Aloo", "Tandoori Chicken"}
    assert split_values(["Jeera Aloo", "Jeera Chicken", "Inir", "Tandoori Inir"], refs) == {
        "copy": 1,
        "recombined": 1,
        "invented": 2,
    }
    assert string_fields([{"input": "a", "n": 1}, {"input": "b", "output": "c"}]) == ["input", "output"]
    from bench.store import CellKey, RunStore
    from bench.types import Sample

    store = RunStore(tmp_path)
    cells = [[{"input": "Jeera Chicken"}, None], [{"input": 3}, {"input": "Inir"}], [{"input": "Aloo"}]]
    for seed, rows in enumerate(cells):  # written as the runner writes cells, each sealed
        store.write_cell(
            CellKey("llada", "superni/t", seed),
            record={"hash": "h", "status": "ok"},
            samples=[Sample(i, "") for i in range(len(rows))],
            sample_rows=[{"record": r} for r in rows],
            metrics={"parse_rate": 1.0},
        )
    # seed 2's samples are changed after it was sealed: a damaged cell, skipped as the reports skip it
    damaged = store.cell_dir(CellKey("llada", "superni/t", 2)) / "samples.jsonl"
    damaged.write_text(damaged.read_text().replace("Aloo", "Alu"))
    assert run_values(tmp_path, "superni/t", "input") == {"llada": ["Jeera Chicken", "Inir"]}


def test_paired_builds_pool_every_build_task_and_seed_where_both_recipes_have_a_value() -> None:
    """`benchmarks.diffusion.paired_builds`: per (pair, task) and pooled paired tests, checked against
    scipy on the same pairs written out by hand; a cell without a value (no parsed record) leaves its
    pair out, and a failed cell never enters."""
    import pandas as pd
    from scipy import stats

    from benchmarks.diffusion.paired_builds import compare_builds, render_markdown

    a0 = [0.1, 0.3, 0.2, 0.4]
    b0 = [0.5, 0.6, 0.2, 0.9]
    a1 = [0.0, 0.2, 0.1]
    b1 = [0.3, float("nan"), 0.4]  # seed 1 of pair 1 has no value: its pair drops out
    rows = []
    for system, values, task in [("a0", a0, "t"), ("b0", b0, "t"), ("a1", a1, "u"), ("b1", b1, "u")]:
        rows += [
            {"system": system, "task": task, "seed": s, "metric": "tsr", "value": v, "status": "ok"}
            for s, v in enumerate(values)
        ]
    rows.append({"system": "b0", "task": "t", "seed": 9, "metric": "tsr", "value": 1.0, "status": "failed"})
    rows.append({"system": "a0", "task": "t", "seed": 9, "metric": "tsr", "value": 0.0, "status": "ok"})
    per, pooled = compare_builds(pd.DataFrame(rows), [("a0", "b0"), ("a1", "b1")], ("tsr",))
    assert [(c.system, c.task, c.n_shared) for c in per] == [("b0 vs a0", "t", 4), ("b1 vs a1", "u", 2)]
    xa, xb = a0 + [a1[0], a1[2]], b0 + [b1[0], b1[2]]
    (p,) = pooled
    assert (p.task, p.n_shared) == ("pooled", 6)
    assert p.diff == pytest.approx(sum(xb) / 6 - sum(xa) / 6)
    assert p.p_ttest == pytest.approx(stats.ttest_rel(xb, xa).pvalue)
    assert per[0].p_ttest == pytest.approx(stats.ttest_rel(b0, a0).pvalue)
    text = render_markdown(per, pooled)
    assert "| b0 vs a0 | t | 0.250 / 0.550 | +0.300 (" in text and "| tsr | 6 |" in text
