"""`--resume` without flags finishes the run it names: that run's seeds, samples, systems and tasks."""

from __future__ import annotations

import json

from tests.filesuite import run, two_system_suite


def _cells(run_dir):
    out = {}
    for cell_json in run_dir.glob("cells/*/*/seed-*/cell.json"):
        meta = json.loads(cell_json.read_text())
        out[(meta["key"]["system"], meta["key"]["seed"])] = (meta["n_samples"], meta["finished"])
    return out


def test_a_bare_resume_keeps_the_runs_own_selection(tmp_path):
    suite, out = two_system_suite(tmp_path, seeds=3, samples=8, name="resume"), tmp_path / "run"
    run(suite, tmp_path, {"seeds": 2, "samples": 4}, out=str(out), systems=["first"])
    before = _cells(out)
    assert set(before) == {("first", 0), ("first", 1)} and all(n == 4 for n, _ in before.values())

    result = run(suite, tmp_path, None, resume=str(out))  # no flags: the suite says 3 seeds, 8, both
    assert result.skipped == 2 and not result.failed_cells
    assert _cells(out) == before  # nothing re-run with another sample count, no system added

    run(suite, tmp_path, {"seeds": 3}, resume=str(out))  # a flag still wins: one more seed
    after = _cells(out)
    assert set(after) == {("first", 0), ("first", 1), ("first", 2)}
    assert after[("first", 2)][0] == 4 and after[("first", 0)] == before[("first", 0)]
