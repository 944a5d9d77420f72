"""The run store under crashes and damage: every file of a finished cell proves it belongs to the cell.

Issue 11, items 1 (stale metrics after a kill in a resumed, re-configured run), 4 (truncated files),
15 (closing line counts failed cells) and 16 (stale .tmp files). All on the `file` system: no model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from filesuite import bench, cell_files, make_suite, no_html, run, stable_metrics  # noqa: F401 (autouse fixture)

from bench.cli import main
from bench.store import RunStore


class _Killed(BaseException):
    """Stands in for SIGKILL: nothing after the raise runs (no `except Exception` catches it)."""


def _kill_after_renames(monkeypatch: pytest.MonkeyPatch, n: int, where: str) -> None:
    """Let the first `n` renames into cell dirs under `where` happen, then die right after the n-th."""
    real = os.replace
    count = {"n": 0}

    def replace(src, dst, *a, **kw):
        real(src, dst, *a, **kw)
        if where in str(dst):
            count["n"] += 1
            if count["n"] == n:
                raise _Killed(str(dst))

    monkeypatch.setattr(os, "replace", replace)


@pytest.mark.parametrize("renames", [1, 2, 3, 4, 5])
def test_kill_at_any_write_of_a_reconfigured_resume_never_mixes_files(tmp_path, monkeypatch, renames):
    suite = make_suite(tmp_path, seeds=1, samples=8)
    run_dir = tmp_path / "run"
    first = run(suite, tmp_path, out=str(run_dir))
    assert first.ok
    clean4 = run(suite, tmp_path, {"samples": 4}, out=str(tmp_path / "clean4"))
    assert stable_metrics(first.run_dir) != stable_metrics(clean4.run_dir)  # the two configs differ

    # resume with a changed config (4 samples instead of 8); die after the k-th file of the cell lands
    with monkeypatch.context() as m:
        _kill_after_renames(m, renames, "/cells/")
        with pytest.raises(_Killed):
            run(suite, tmp_path, {"samples": 4}, resume=str(run_dir))
    again = run(suite, tmp_path, {"samples": 4}, resume=str(run_dir))
    # only a cell whose every file landed may be kept; any earlier kill point means running it again
    assert again.skipped == (1 if renames == 5 else 0), "a half-written cell was accepted as finished"
    assert stable_metrics(run_dir) == stable_metrics(clean4.run_dir)
    assert cell_files(run_dir, "samples.jsonl") == cell_files(clean4.run_dir, "samples.jsonl")


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture()
def damaged_run(tmp_path):
    suite = make_suite(tmp_path, seeds=3, samples=8)
    res = run(suite, tmp_path, out=str(tmp_path / "run"))
    assert res.ok
    ref = stable_metrics(res.run_dir)
    d = res.run_dir / "cells" / "ext" / "demo__booking"
    _truncate(d / "seed-0" / "metrics.json")
    _truncate(d / "seed-1" / "samples.jsonl")
    return suite, res.run_dir, ref


def test_truncated_files_are_named_and_redone_on_resume(tmp_path, damaged_run, capsys):
    suite, run_dir, ref = damaged_run
    again = run(suite, tmp_path, resume=str(run_dir))
    err = capsys.readouterr().err
    assert "seed-0" in err and "metrics.json" in err
    assert "seed-1" in err and "samples.jsonl" in err
    assert again.skipped == 1 and again.ok
    assert {o.key.seed for o in again.outcomes if o.status == "ok"} == {0, 1}
    assert stable_metrics(run_dir) == ref


@pytest.mark.parametrize("command", ["report", "rescore", "baseline", "check", "compare"])
def test_readers_skip_damaged_cells_with_a_warning(tmp_path, damaged_run, command):
    _, run_dir, _ = damaged_run
    base = tmp_path / "base.json"
    args = {
        "report": ["report", str(run_dir)],
        "rescore": ["rescore", str(run_dir)],
        "baseline": ["baseline", str(run_dir), "-o", str(base)],
        "check": ["check", str(run_dir), "--baseline", str(base)],
        "compare": ["compare", str(run_dir), str(run_dir)],
    }[command]
    if command == "check":
        assert bench(tmp_path, "baseline", str(run_dir), "-o", str(base)).returncode == 0
    p = bench(tmp_path, *args)
    assert "Traceback" not in p.stderr, p.stderr
    assert "damaged" in p.stderr and "seed-0" in p.stderr and "metrics.json" in p.stderr, p.stderr
    assert "seed-1" in p.stderr and "samples.jsonl" in p.stderr
    if command == "check":
        assert p.returncode == 1  # a damaged cell is not a passing cell
    else:
        assert p.returncode == 0, p.stderr


def test_damaged_cells_are_not_counted_as_data(damaged_run):
    _, run_dir, _ = damaged_run
    ok = [c.key.seed for c in RunStore(run_dir).iter_cells(warn=False)]
    assert ok == [2]
    assert sorted(k.seed for k, _ in RunStore(run_dir).damaged_cells()) == [0, 1]


def test_truncated_manifest_is_a_clear_error(tmp_path):
    suite = make_suite(tmp_path, seeds=1)
    res = run(suite, tmp_path, out=str(tmp_path / "run"))
    _truncate(res.run_dir / "manifest.json")
    p = bench(tmp_path, "run", str(suite), "--resume", str(res.run_dir), "--workers", "0", "--no-progress")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "manifest.json" in p.stderr


def test_closing_line_counts_failed_cells_when_every_cell_failed(tmp_path, capsys):
    suite = make_suite(tmp_path, seeds=2)
    suite.write_text(suite.read_text().replace(str(tmp_path / "gen"), str(tmp_path / "nowhere")))
    code = main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--no-progress"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 1
    assert last == "0 passed, 0 failed; 2 of 2 cells failed"


def test_stale_tmp_files_are_removed_on_resume(tmp_path):
    suite = make_suite(tmp_path, seeds=1)
    res = run(suite, tmp_path, out=str(tmp_path / "run"))
    cell = res.run_dir / "cells" / "ext" / "demo__booking" / "seed-0"
    left = [cell / ".metrics.json.k2j3h4.tmp", res.run_dir / ".manifest.json.abc123.tmp"]
    for p in left:
        p.write_text('{"half')
    keep = cell / "notes.tmp"  # not one of ours: never touched
    keep.write_text("mine")
    run(suite, tmp_path, resume=str(res.run_dir))
    assert not any(p.exists() for p in left)
    assert keep.read_text() == "mine"


def test_rescore_prints_the_report_path_not_the_report(tmp_path, capsys):
    suite = make_suite(tmp_path, seeds=1)
    res = run(suite, tmp_path, out=str(tmp_path / "run"))
    capsys.readouterr()
    assert main(["rescore", str(res.run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"rescored 1 cells with 3 metrics; report: {res.run_dir / 'report.md'}"


def test_cell_json_lists_the_digest_of_every_file(tmp_path):
    suite = make_suite(tmp_path, seeds=1)
    res = run(suite, tmp_path, out=str(tmp_path / "run"))
    import hashlib

    cell = res.run_dir / "cells" / "ext" / "demo__booking" / "seed-0"
    rec = json.loads((cell / "cell.json").read_text())
    assert set(rec["files"]) == {"samples.jsonl", "trace.jsonl", "usage.json", "metrics.json"}
    for name, digest in rec["files"].items():
        assert hashlib.sha256((cell / name).read_bytes()).hexdigest() == digest


def test_resume_after_a_default_changed_runs_the_cells_again(tmp_path, monkeypatch):
    """A suite that leaves a knob at its default reads the same after the default changes, so the cell
    hash carries the params with defaults filled in: a resume made under a new default runs the cells
    again (and equals a fresh run under it), instead of keeping the cells of the old default."""
    from pydantic import Field

    import systems.file

    suite = make_suite(tmp_path, seeds=2, samples=8)
    run_dir = tmp_path / "run"
    assert run(suite, tmp_path, out=str(run_dir)).ok

    class ShortLines(systems.file.FileParams):  # a release whose default cuts lines at 40 bytes
        max_line_bytes: int = Field(40, ge=1)

    monkeypatch.setattr(systems.file, "FileParams", ShortLines)
    fresh = run(suite, tmp_path, out=str(tmp_path / "fresh"))
    assert stable_metrics(fresh.run_dir) != stable_metrics(run_dir)  # the new default changes the cells
    again = run(suite, tmp_path, resume=str(run_dir))
    assert again.skipped == 0
    assert stable_metrics(run_dir) == stable_metrics(fresh.run_dir)
    assert cell_files(run_dir, "samples.jsonl") == cell_files(fresh.run_dir, "samples.jsonl")

    monkeypatch.undo()  # the same default as the first run's cells now: a resume keeps them all
    assert run(suite, tmp_path, resume=str(tmp_path / "fresh")).skipped == 0
    assert run(suite, tmp_path, out=str(tmp_path / "old")).ok
    assert run(suite, tmp_path, resume=str(tmp_path / "old")).skipped == 2
