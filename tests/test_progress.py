"""Progress stages for long set-up work: status lines with rate and ETA in a log, a heartbeat during work
that never calls update (a model load), silence under BENCH_PROGRESS=0, and a RunContext hook."""

from __future__ import annotations

import io
import time

import pytest

from bench import progress


@pytest.fixture(autouse=True)
def _progress_enabled(monkeypatch):
    """`bench run --no-progress` run in-process by another test sets BENCH_PROGRESS=0 for the process."""
    monkeypatch.delenv("BENCH_PROGRESS", raising=False)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_status_line_has_count_rate_and_eta(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress.time, "perf_counter", clock)
    out = io.StringIO()
    with progress.stage("training embedded DLM", total=600, unit="step", stream=out, log_every_s=10) as st:
        clock.t += 60
        st.update(120, loss="0.410")  # 2 steps/s -> 480 left -> 4 minutes
        assert st.eta_s() == 240
        assert st.line() == "training embedded DLM: 120/600 step (20%), 2 step/s, ETA 4m00s, loss=0.410"
    text = out.getvalue()
    assert "[training embedded DLM: started (600 step)]" in text
    assert "[training embedded DLM: 120/600 step (20%), 2 step/s, ETA 4m00s, loss=0.410]" in text
    assert text.rstrip().endswith("[training embedded DLM: done in 1m00s]")


def test_heartbeat_speaks_during_work_without_updates():
    out = io.StringIO()
    with progress.stage("loading Qwen/Qwen3-8B", stream=out, log_every_s=0.05):
        time.sleep(0.6)  # a model load: no update() calls at all
    lines = out.getvalue().splitlines()
    assert lines[0] == "[loading Qwen/Qwen3-8B: started]"
    assert any("elapsed" in line for line in lines[1:-1])  # status lines while it was silent
    assert lines[-1].startswith("[loading Qwen/Qwen3-8B: done in")


def test_bench_progress_0_silences_stages(monkeypatch):
    monkeypatch.setenv("BENCH_PROGRESS", "0")
    out = io.StringIO()
    with progress.stage("x", total=3, stream=out, log_every_s=0) as st:
        st.update(3)
    assert out.getvalue() == ""


def test_run_context_offers_the_same_stage(tmp_path, capsys):
    from bench.context import BenchContext
    from bench.profiles import resolve_profile

    ctx = BenchContext(resolve_profile("embedded"), tmp_path)
    with ctx.progress("fitting", total=2) as st:
        st.update(2)
    assert "[fitting: done in" in capsys.readouterr().err


def test_durations_read_well():
    assert [progress.fmt_duration(s) for s in (5, 75, 3725)] == ["5s", "1m15s", "1h02m"]
