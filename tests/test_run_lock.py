"""One writer per run directory (issue 11, item 3): a lock that names its holder and survives SIGKILL.

The holder is a real `bench run` process whose only cell blocks on a FIFO, so it holds the run for as
long as the test needs; everything else is the real runner.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from filesuite import ROOT, bench_cmd, bench_env, make_suite, no_html, run, stable_metrics  # noqa: F401 (autouse fixture)

from bench.errors import BenchError


def _blocking_suite(tmp_path: Path) -> Path:
    suite = make_suite(tmp_path, seeds=2, extra="timeout_s: 60\n")
    fifo = tmp_path / "gen" / "demo__booking" / "1.jsonl"
    fifo.unlink()
    os.mkfifo(fifo)  # opening a FIFO with no writer blocks: seed 1 holds the run open
    return suite


def _wait_for(pred, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.1)


def _start(tmp_path: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        bench_cmd(*args),
        cwd=ROOT,
        env=bench_env(tmp_path),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_held_run_refuses_a_second_run_and_a_second_resume(tmp_path):
    suite = _blocking_suite(tmp_path)
    run_dir = tmp_path / "run"
    holder = _start(tmp_path, "run", str(suite), "--out", str(run_dir), "--workers", "1", "--no-progress")
    try:
        _wait_for(lambda: (run_dir / "cells/ext/demo__booking/seed-0/cell.json").exists())
        info = json.loads((run_dir / ".lock").read_text())
        assert info["pid"] == holder.pid and info["host"] and info["started"] > 0
        with pytest.raises(BenchError, match="already holds a run"):
            run(suite, tmp_path, out=str(run_dir))
        with pytest.raises(BenchError) as e:
            run(suite, tmp_path, resume=str(run_dir))
        msg = str(e.value)
        assert f"pid {holder.pid}" in msg and info["host"] in msg and "started" in msg, msg
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.communicate()
    # the holder died by SIGKILL: its lock is stale and the resume takes it over
    (tmp_path / "gen/demo__booking/1.jsonl").unlink()
    (tmp_path / "gen/demo__booking/1.jsonl").write_text((tmp_path / "gen/demo__booking/0.jsonl").read_text())
    res = run(suite, tmp_path, resume=str(run_dir))
    assert res.ok and res.skipped == 1
    assert (
        json.loads((run_dir / "cells/ext/demo__booking/seed-1/metrics.json").read_text())["parse_rate"]
        == (stable_metrics(run_dir)["cells/ext/demo__booking/seed-0"]["parse_rate"])
    )


def test_two_runs_started_together_on_one_out_do_not_both_run(tmp_path):
    suite = make_suite(tmp_path, seeds=2)
    run_dir = tmp_path / "run"
    args = ("run", str(suite), "--out", str(run_dir), "--workers", "0", "--no-progress")
    procs = [_start(tmp_path, *args) for _ in range(2)]
    results = [(p.wait(timeout=120), p.communicate()) for p in procs]
    codes = sorted(rc for rc, _ in results)
    assert codes == [0, 2], results
    loser_err = next(err for rc, (_, err) in results if rc == 2)
    assert "in use by pid" in loser_err or "already holds a run" in loser_err
    assert "Traceback" not in loser_err
    # every cell ran exactly once: one record per cell, one manifest without a resume
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["resumed"] == [] and manifest["cell_status"]["ok"] == 2
