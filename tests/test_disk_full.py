"""Disk full mid-run (issue 11, item 7): a clean stop with a message, and nothing lost.

ENOSPC is raised by `os.fsync` for files under one cell directory, the way a full filesystem answers
a delayed-allocation write; everything else (runner, store, executor) is the real code. The worker case
injects it in the runner process itself, where `record_failure` writes a timed-out cell.
"""

from __future__ import annotations

import errno
import os

import pytest
from filesuite import make_suite, no_html, run, stable_metrics  # noqa: F401 (autouse fixture)

from bench.cli import main
from bench.store import DiskFullError


def _full_under(monkeypatch: pytest.MonkeyPatch, fragment: str) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if fragment in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_disk_full_stops_cleanly_and_resume_gives_identical_results(tmp_path, monkeypatch, capsys):
    suite = make_suite(tmp_path, seeds=3)
    ref = run(suite, tmp_path, out=str(tmp_path / "ref"))
    run_dir = tmp_path / "run"
    with monkeypatch.context() as m:
        _full_under(m, "/seed-1/")
        code = main(
            ["run", str(suite), "--out", str(run_dir), "--workers", "0", "--no-progress", "--no-cache"]
        )
    err = capsys.readouterr().err
    assert code == 2
    assert "no space left on device" in err and "seed-1" in err and f"--resume {run_dir}" in err
    assert "Traceback" not in err
    assert not list(run_dir.rglob("*.tmp"))  # no half-written temp files left behind
    # seed 0 finished before the disk filled; seed 1 is not recorded as a (model) failure
    assert (run_dir / "cells/ext/demo__booking/seed-0/metrics.json").exists()
    assert not (run_dir / "cells/ext/demo__booking/seed-1/cell.json").exists()
    res = run(suite, tmp_path, resume=str(run_dir))
    assert res.ok and res.skipped == 1
    assert stable_metrics(run_dir) == stable_metrics(ref.run_dir)


def test_disk_full_while_recording_a_timed_out_worker_cell(tmp_path, monkeypatch):
    suite = make_suite(tmp_path, seeds=2, extra="timeout_s: 3\n")
    fifo = tmp_path / "gen" / "demo__booking" / "1.jsonl"
    fifo.unlink()
    os.mkfifo(fifo)  # seed 1 hangs in its worker until the timeout
    with monkeypatch.context() as m:
        _full_under(m, "/seed-1/")  # only this (the runner) process: the worker is a fresh interpreter
        with pytest.raises(DiskFullError, match="seed-1.*--resume"):
            run(suite, tmp_path, out=str(tmp_path / "run"), workers=1)
    assert (tmp_path / "run/cells/ext/demo__booking/seed-0/metrics.json").exists()
