"""The install check `.ci/run` relies on (systems/backends/llama_smoke.py): a build that runs passes, one
that dies by a signal is reported as such (not as an ordinary error)."""

from __future__ import annotations

import pytest

from systems.backends.llama_smoke import run_smoke


def test_the_installed_llama_cpp_build_evaluates_tokens_with_smollm2() -> None:
    pytest.importorskip("llama_cpp")
    ok, what = run_smoke()
    assert ok, what
    assert "tokens evaluated" in what


def test_a_child_killed_by_a_signal_is_reported_as_a_crash() -> None:
    ok, what = run_smoke(code="import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert not ok and "killed by signal 11" in what


def test_an_ordinary_error_is_reported_with_its_last_line() -> None:
    ok, what = run_smoke(code="raise SystemExit('no model here')")
    assert not ok and what == "exited 1: no model here"
