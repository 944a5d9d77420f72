"""`bench compare`: paired per-seed statistics checked against scipy on the same numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats as st

from bench.cli import main
from reports.compare import compare_runs
from reports.fixtures import write_run


def test_paired_comparison_matches_scipy(tmp_path, capsys):
    rng = np.random.default_rng(3)
    a_tsr = rng.normal(0.6, 0.05, 10)
    b_tsr = a_tsr + rng.normal(0.05, 0.02, 10)
    a_sim = rng.normal(0.8, 0.02, 10)
    run_a = write_run(
        tmp_path / "a", {("ar", "truthfulqa"): {"tsr": a_tsr.tolist(), "similarity": a_sim.tolist()}}
    )
    b_sim = a_sim.copy()
    b_sim[4] = np.nan  # a NaN seed drops out of the pairs
    run_b = write_run(
        tmp_path / "b",
        {("ar", "truthfulqa"): {"tsr": b_tsr.tolist(), "similarity": b_sim.tolist()}},
        failed={("ar", "truthfulqa", 9): "crash"},
    )
    rows = {r.metric: r for r in compare_runs(run_a, run_b)}
    tsr = rows["tsr"]
    d = (b_tsr - a_tsr)[:9]  # seed 9 failed in B
    assert tsr.n_shared == 9
    assert tsr.diff == pytest.approx(d.mean())
    assert tsr.p_ttest == pytest.approx(st.ttest_rel(b_tsr[:9], a_tsr[:9]).pvalue)
    assert tsr.p_wilcoxon == pytest.approx(st.wilcoxon(d).pvalue)
    assert tsr.effect_size == pytest.approx(d.mean() / d.std(ddof=1))
    assert tsr.verdict == "better"
    sim = rows["similarity"]
    assert sim.n_shared == 8 and sim.diff == pytest.approx(0.0) and sim.p_ttest == 1.0 and sim.verdict == ""

    assert main(["compare", str(run_a), str(run_b), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["metric"] for r in data} == {"tsr", "similarity"}
    assert main(["compare", str(run_a), str(run_b)]) == 0
    text = capsys.readouterr().out
    assert "better" in text and "truthfulqa" in text


def test_systems_of_one_run_paired_by_task_and_seed(tmp_path, capsys):
    """`--against SYSTEM`: the other systems of one run against SYSTEM, the same statistics as scipy's
    on the (task, seed) pairs; a failed cell drops its seed from that system's pairs only."""
    rng = np.random.default_rng(11)
    base = rng.normal(0.5, 0.1, 10)
    aod = base + rng.normal(0.04, 0.03, 10)
    norl = base + rng.normal(0.0, 0.03, 10)
    run = write_run(
        tmp_path / "r",
        {
            ("llada", "multiwoz/train"): {"tsr": base.tolist()},
            ("aod", "multiwoz/train"): {"tsr": aod.tolist()},
            ("aod-norl", "multiwoz/train"): {"tsr": norl.tolist()},
        },
        failed={("aod-norl", "multiwoz/train", 0): "crash"},
    )
    from reports.compare import compare_systems

    rows = {r.system: r for r in compare_systems(run, "llada")}
    assert set(rows) == {"aod", "aod-norl"}
    assert rows["aod"].n_shared == 10
    assert rows["aod"].mean_a == pytest.approx(base.mean()) and rows["aod"].mean_b == pytest.approx(
        aod.mean()
    )
    assert rows["aod"].p_ttest == pytest.approx(st.ttest_rel(aod, base).pvalue)
    assert rows["aod"].p_wilcoxon == pytest.approx(st.wilcoxon(aod - base).pvalue)
    assert rows["aod-norl"].n_shared == 9
    assert rows["aod-norl"].p_ttest == pytest.approx(st.ttest_rel(norl[1:], base[1:]).pvalue)

    assert main(["compare", str(run), "--against", "aod-norl", "--systems", "aod", "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)
    assert only["system"] == "aod" and only["n_shared"] == 9
    assert only["p_ttest"] == pytest.approx(st.ttest_rel(aod[1:], norl[1:]).pvalue)
    assert main(["compare", str(run), "--against", "nobody"]) == 2
    assert "'nobody' has no finished cell" in capsys.readouterr().err
    assert main(["compare", str(run)]) == 2
    assert "--against SYSTEM" in capsys.readouterr().err
