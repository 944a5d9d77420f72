"""`bench baseline` / `bench check`: an unchanged rerun passes, a planted regression is flagged."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from bench.cli import main
from reports.check import build_baseline, check_run, junit_xml
from reports.fixtures import write_run

SEEDS = 15


def _values(shift_tsr: float = 0.0, shift_overlap: float = 0.0, seed: int = 7) -> dict:
    """15 seeds of plausible per-cell metrics from a seeded generator (a run's seed-to-seed noise)."""
    rng = np.random.default_rng(seed)
    out = {}
    for system in ("ar", "llada"):
        for task in ("multiwoz/train", "truthfulqa"):
            out[(system, task)] = {
                "tsr": (rng.normal(0.6, 0.05, SEEDS) + shift_tsr).tolist(),
                "field_overlap": (rng.normal(0.35, 0.04, SEEDS) + shift_overlap).tolist(),
                "harness_failures": rng.integers(0, 2, SEEDS).astype(float).tolist(),
            }
    return out


@pytest.fixture
def baseline_file(tmp_path):
    run = write_run(tmp_path / "base", _values())
    path = tmp_path / "baseline.json"
    assert main(["baseline", str(run), "-o", str(path)]) == 0
    return path


def test_baseline_holds_mean_std_n_per_cell(baseline_file):
    b = json.loads(baseline_file.read_text())
    e = next(
        x for x in b["entries"] if (x["system"], x["task"], x["metric"]) == ("ar", "multiwoz/train", "tsr")
    )
    ref = np.asarray(_values()[("ar", "multiwoz/train")]["tsr"])
    assert e["n"] == SEEDS and e["better"] == "up"
    assert e["mean"] == pytest.approx(ref.mean())
    assert e["sem"] == pytest.approx(ref.std(ddof=1) / math.sqrt(SEEDS))


def test_unchanged_rerun_passes(tmp_path, baseline_file, capsys):
    rerun = write_run(tmp_path / "rerun", _values())
    junit = tmp_path / "junit.xml"
    assert main(["check", str(rerun), "--baseline", str(baseline_file), "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "8 passed, 0 failed, 4 skipped" in out  # harness_failures has no direction: not gated
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("12", "0", "4")


def test_planted_regression_is_flagged_with_a_readable_diff(tmp_path, baseline_file, capsys):
    values = _values()
    values[("llada", "truthfulqa")]["tsr"] = [v - 0.1 for v in values[("llada", "truthfulqa")]["tsr"]]
    bad = write_run(tmp_path / "bad", values)
    junit = tmp_path / "junit.xml"
    assert main(["check", str(bad), "--baseline", str(baseline_file), "--junit", str(junit)]) == 1
    out = capsys.readouterr().out
    fail_lines = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(fail_lines) == 1 and "llada/truthfulqa/tsr" in fail_lines[0]
    assert "-0.100" in fail_lines[0] and "3 x s.e." in fail_lines[0]
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert len(failures) == 1 and "bad direction" in failures[0].get("message")


def test_noise_within_k_standard_errors_and_improvements_pass(tmp_path, baseline_file):
    base = json.loads(baseline_file.read_text())
    sem = max(e["sem"] for e in base["entries"] if e["metric"] == "tsr")
    # tsr up by a lot (better), field_overlap up by one s.e. at most (worse, but within 3 s.e.)
    run = write_run(tmp_path / "noisy", _values(shift_tsr=0.2, shift_overlap=sem))
    results = check_run(run, base, k=3.0)
    assert [r for r in results if r.status == "fail"] == []
    # the same move fails with k = 0 (no tolerance) and passes again with an absolute floor
    moved = check_run(run, base, k=0.0)
    assert {r.metric for r in moved if r.status == "fail"} == {"field_overlap"}
    assert [r for r in check_run(run, base, k=0.0, floor=0.05) if r.status == "fail"] == []


def test_lost_numbers_fail(tmp_path, baseline_file):
    values = _values()
    values[("ar", "truthfulqa")]["tsr"] = [None] * SEEDS
    del values[("llada", "multiwoz/train")]
    run = write_run(tmp_path / "lost", values)
    fails = {
        r.name: r.reason for r in check_run(run, json.loads(baseline_file.read_text())) if r.status == "fail"
    }
    assert "NaN now" in fails["ar/truthfulqa/tsr"]
    assert "missing" in fails["llada/multiwoz/train/tsr"]


def test_junit_escapes_hostile_names(tmp_path):
    hostile = "a&<b>\"'"
    run = write_run(tmp_path / "h", {(hostile, "t"): {"tsr": [0.5, 0.6, 0.7]}})
    base = build_baseline(run)
    base["entries"][0]["mean"] = 0.9  # plant a regression
    xml = junit_xml(check_run(run, base))
    root = ET.fromstring(xml.split("?>", 1)[1])
    assert root.find("testcase").get("classname") == f"bench.check.{hostile}"
