"""Progress of long set-up work (training a DLM, loading a model) under the run's cell bar.

Why: a cell that trains the embedded DLM for minutes, or loads an 8B checkpoint, looked hung behind a
cell bar that does not move. Any backend or trainer can say what it is doing:

    from bench.progress import stage

    with stage("training embedded DLM", total=steps, unit="step") as st:
        for step in range(steps):
            ...
            st.update(1, loss=f"{loss:.3f}")        # postfix values are optional

    with stage("loading Qwen/Qwen3-8B"):            # no total: a status line with elapsed time
        model = load()

(`RunContext.progress(name, total)` is the same call for code that holds a context.) On a terminal a
stage is a nested tqdm bar with rate and ETA below the cell bar; in a log (stderr not a TTY) it is a
status line every `LOG_EVERY_S` seconds (a heartbeat thread keeps it coming even when the work does
not call `update`, e.g. during a model load) and at the end ("training embedded DLM: 120/600 step
(20%), 1.9 step/s, ETA 4m12s"). `BENCH_PROGRESS=0` (set by `--no-progress`, inherited by worker
processes) silences every stage. A stage never raises because of its display.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

LOG_EVERY_S = 15.0


def enabled() -> bool:
    return os.environ.get("BENCH_PROGRESS", "1").lower() not in ("0", "false", "no", "off")


def fmt_duration(seconds: float) -> str:
    s = int(max(0, round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Stage:
    """One named piece of work with an optional total; `update` advances it."""

    def __init__(
        self,
        name: str,
        total: int | None = None,
        unit: str = "step",
        stream: TextIO | None = None,
        tty: bool | None = None,
        log_every_s: float = LOG_EVERY_S,
    ):
        self.name, self.total, self.unit = name, total, unit
        self.done = 0
        self.postfix: dict[str, Any] = {}
        self.t0 = time.perf_counter()
        self.stream = stream or sys.stderr
        self.on = enabled()
        self.log_every_s = log_every_s
        self._last_log = self.t0
        self._bar = None
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        if self.on and is_tty:
            try:
                from tqdm import tqdm

                self._bar = tqdm(
                    total=total, desc=name, unit=unit, file=self.stream, position=1, leave=False,
                    dynamic_ncols=True,
                )  # fmt: skip
            except Exception:
                self._bar = None
        if self.on and self._bar is None:
            self._write(f"{name}: started" + (f" ({total} {unit})" if total else ""))
        self._stop = threading.Event()
        if self.on:  # a heartbeat, so that work without updates (a model load) is never silent
            threading.Thread(target=self._heartbeat, daemon=True).start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.log_every_s):
            try:
                if self._bar is not None:
                    self._bar.refresh()
                elif time.perf_counter() - self._last_log >= self.log_every_s:
                    self._last_log = time.perf_counter()
                    self._write(self.line())
            except Exception:
                return

    # -------------------------------------------------------------------------------- API
    def update(self, n: int = 1, **postfix: Any) -> None:
        """Advance by n and optionally show values (loss, ...); cheap enough to call every step."""
        self.done += n
        self.postfix.update(postfix)
        if not self.on:
            return
        try:
            if self._bar is not None:
                if postfix:
                    self._bar.set_postfix(postfix, refresh=False)
                self._bar.update(n)
            elif time.perf_counter() - self._last_log >= self.log_every_s:
                self._last_log = time.perf_counter()
                self._write(self.line())
        except Exception:  # a display problem never stops the work
            self._bar = None

    def eta_s(self) -> float | None:
        """Seconds left at the mean rate so far (None without a total or before the first step)."""
        if not self.total or self.done <= 0:
            return None
        rate = self.done / max(1e-9, time.perf_counter() - self.t0)
        return max(0.0, (self.total - self.done) / rate)

    def line(self) -> str:
        """The status line: "NAME: 120/600 step (20%), 1.9 step/s, ETA 4m12s, loss=0.41"."""
        elapsed = time.perf_counter() - self.t0
        parts = []
        if self.total:
            parts.append(f"{self.done}/{self.total} {self.unit} ({100 * self.done / self.total:.0f}%)")
        elif self.done:
            parts.append(f"{self.done} {self.unit}")
        if self.done:
            parts.append(f"{self.done / max(1e-9, elapsed):.2g} {self.unit}/s")
        eta = self.eta_s()
        parts.append(f"ETA {fmt_duration(eta)}" if eta is not None else f"{fmt_duration(elapsed)} elapsed")
        parts += [f"{k}={v}" for k, v in self.postfix.items()]
        return f"{self.name}: " + ", ".join(parts)

    def close(self) -> None:
        self._stop.set()
        if not self.on:
            return
        elapsed = fmt_duration(time.perf_counter() - self.t0)
        try:
            if self._bar is not None:
                self._bar.close()
            self._write(f"{self.name}: done in {elapsed}")
        except Exception:
            pass

    def _write(self, text: str) -> None:
        try:
            self.stream.write(f"[{text}]\n")
            self.stream.flush()
        except Exception:
            pass


@contextmanager
def stage(name: str, total: int | None = None, unit: str = "step", **kwargs: Any) -> Iterator[Stage]:
    """Context manager around a Stage (module docstring); closes it even when the work raises."""
    st = Stage(name, total, unit, **kwargs)
    try:
        yield st
    finally:
        st.close()
