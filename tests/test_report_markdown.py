"""report.md and the tidy frame, on run directories written through the real RunStore."""

from __future__ import annotations

import math

import numpy as np
import pytest

from reports.aggregate import load_run, summarize
from reports.fixtures import write_run
from reports.markdown import md_escape, write_report_md

VALUES = {
    ("ar", "multiwoz/train"): {"tsr": [0.5, 0.6, 0.7], "similarity": [0.8, 0.82, 0.84]},
    ("ar", "truthfulqa"): {"tsr": [0.2, 0.3, 0.4], "similarity": [None, None, None]},
    ("llada", "multiwoz/train"): {"tsr": [0.1, 0.2, 0.3], "similarity": [0.6, None, 0.7]},
    ("llada", "truthfulqa"): {"tsr": [0.9, 0.9, 0.9], "similarity": [0.5, 0.5, 0.5]},
}


@pytest.fixture
def run_dir(tmp_path):
    return write_run(
        tmp_path / "run-1",
        VALUES,
        failed={("llada", "truthfulqa", 2): "backend error: llama.cpp crashed (exit 139)"},
    )


def test_load_run_is_tidy_and_marks_failed_cells(run_dir):
    df = load_run(run_dir)
    assert list(df.columns) == ["system", "task", "seed", "metric", "value", "status"]
    assert len(df) == 4 * 3 * 2
    failed = df[df["status"] == "failed"]
    assert set(failed["seed"]) == {2} and failed["value"].isna().all()
    v = df[(df.system == "ar") & (df.task == "multiwoz/train") & (df.metric == "tsr")]["value"]
    assert v.tolist() == [0.5, 0.6, 0.7]


def test_summary_matches_numpy_per_cell_and_macro(run_dir):
    s = summarize(load_run(run_dir)).set_index(["level", "system", "task", "metric"])
    cell = s.loc[("cell", "ar", "multiwoz/train", "tsr")]
    assert cell["mean"] == pytest.approx(0.6)
    assert cell["std"] == pytest.approx(np.std([0.5, 0.6, 0.7], ddof=1))
    # llada / truthfulqa seed 2 failed: two ok seeds, one failed
    lt = s.loc[("cell", "llada", "truthfulqa", "tsr")]
    assert (lt["n"], lt["n_failed"]) == (2, 1)
    # NaN for every seed -> NaN mean, never 0
    assert math.isnan(s.loc[("cell", "ar", "truthfulqa", "similarity")]["mean"])
    # macro over tasks per seed, then over seeds
    per_seed = [np.mean([0.5, 0.2]), np.mean([0.6, 0.3]), np.mean([0.7, 0.4])]
    macro = s.loc[("system", "ar", "", "tsr")]
    assert macro["mean"] == pytest.approx(np.mean(per_seed))
    assert macro["std"] == pytest.approx(np.std(per_seed, ddof=1))
    # llada: truthfulqa seed 2 failed -> macro of task means (as expectations compute it), while the
    # spread comes from per-seed macro means (seed 2 has multiwoz alone)
    llada = s.loc[("system", "llada", "", "tsr")]
    assert llada["mean"] == pytest.approx(np.mean([np.mean([0.1, 0.2, 0.3]), 0.9]))
    assert llada["std"] == pytest.approx(np.std([0.5, 0.55, 0.3], ddof=1))


def test_report_md_shows_mean_std_dash_and_failed_reasons(run_dir):
    text = write_report_md(run_dir)
    assert (run_dir / "report.md").read_text(encoding="utf-8") == text
    assert (run_dir / "results.csv").exists()
    assert "0.600 \u00b1 0.100" in text  # ar / multiwoz tsr
    ar_tqa = next(line for line in text.splitlines() if line.startswith("| ar | truthfulqa"))
    assert "\u2013" in ar_tqa  # similarity NaN for every seed
    assert "llama.cpp crashed (exit 139)" in text
    assert "seed 2" in text
    assert "| llada | truthfulqa | 2 (+1 failed) |" in text


def test_report_md_escapes_hostile_names(tmp_path):
    hostile = "sys_&%$#{}~^\\<script>alert(1)|"  # no "/": the store maps names to directories
    run = write_run(tmp_path / "r", {(hostile, "t|x"): {"tsr": [0.5, 0.6]}})
    text = write_report_md(run)
    assert "<script>" not in text
    assert md_escape(hostile) in text
    assert "t\\|x" in text


def test_report_of_a_run_without_cells_still_renders(tmp_path):
    from bench.store import RunStore

    RunStore(tmp_path / "empty").write_manifest(
        {"run_id": "empty", "suite": {"name": "s", "metrics": ["tsr"]}}
    )
    text = write_report_md(tmp_path / "empty")
    assert "No cells in this run yet" in text and "Failed cells (0)" in text
    assert load_run(tmp_path / "empty").empty
