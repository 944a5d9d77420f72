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


def test_a_narrowed_resume_keeps_the_rest_of_the_plan_for_a_later_bare_resume(tmp_path, capsys):
    """`--resume RUN --systems first` after a run that planned both systems runs `first` only, but the
    run still plans `second`: it is not marked finished, and a bare resume then runs `second`."""
    suite, out = two_system_suite(tmp_path, seeds=2, samples=4, name="narrow"), tmp_path / "run"
    run(suite, tmp_path, None, out=str(out), systems=["first"])
    (out / "manifest.json").write_text(  # an interrupted run of both systems: `second` never started
        json.dumps(
            {
                **json.loads((out / "manifest.json").read_text()),
                "cells": {f"{s}/demo/booking/seed-{i}": "h" for s in ("first", "second") for i in (0, 1)},
                "finished": None,
            }
        )
    )
    result = run(suite, tmp_path, None, resume=str(out), systems=["first"])
    assert result.skipped == 2 and set(_cells(out)) == {("first", 0), ("first", 1)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest["finished"] and manifest["cells_not_run"] == 2
    assert {"second/demo/booking/seed-0", "second/demo/booking/seed-1"} <= set(manifest["cells"])
    assert "--resume" in capsys.readouterr().err

    result = run(suite, tmp_path, None, resume=str(out))  # bare: finishes what the run planned
    assert set(_cells(out)) == {(s, i) for s in ("first", "second") for i in (0, 1)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["finished"] and manifest["cells_not_run"] == 0
