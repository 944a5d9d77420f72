"""Executors run CellJobs: in this process, in a pool of worker processes, or on a Ray cluster.

The process pool keeps each worker alive across cells (models load once per worker) and enforces the
per-cell timeout by terminating the worker; a worker that dies (segfault, OOM kill) takes only its
current cell down, which is recorded as failed, and a fresh worker takes its place.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from bench.cells import CellJob, CellOutcome, execute_cell, record_failure
from bench.errors import BenchError

OnDone = Callable[[CellOutcome], None]


def run_inline(jobs: Iterable[CellJob], on_done: OnDone) -> None:
    for job in jobs:
        on_done(execute_cell(job))


def die_with_parent(parent_pid: int) -> None:
    """On Linux, ask the kernel to SIGTERM this process when its parent dies (even by SIGKILL), so an
    orphan never keeps running: a worker never keeps running a cell into a run directory that no process
    holds the lock of, and a helper process a cell started never outlives its worker."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the runner died before prctl took effect
        os._exit(0)


def _worker_main(conn: Connection, parent_pid: int | None = None) -> None:
    """Worker loop: receive a job, run it, send the outcome; None means stop.

    Ctrl-C belongs to the runner (it stops the workers), so workers ignore SIGINT; a vanished runner
    (closed pipe) ends the loop quietly instead of printing a BrokenPipeError traceback.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # also discards a Ctrl-C left pending from start-up
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked by the runner while spawning us
    if parent_pid is not None:
        die_with_parent(parent_pid)
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        outcome = execute_cell(job)
        try:
            conn.send(outcome)
        except OSError:  # BrokenPipeError: the runner is gone
            return


@dataclass
class _Worker:
    proc: Any
    conn: Connection
    job: CellJob | None = None
    started: float = 0.0


class ProcessPool:
    def __init__(self, workers: int):
        self.n = max(1, workers)
        self.ctx = mp.get_context("spawn")

    def _spawn(self) -> _Worker:
        parent, child = self.ctx.Pipe()
        # Not daemonic: a cell may start processes of its own (llada-grammar builds each token automaton
        # in a forked child it can stop at a time budget), which multiprocessing refuses to a daemonic
        # process. The runner still never leaves a worker behind: `run` stops and joins every worker on
        # the way out, and a runner killed outright takes its workers with it (die_with_parent).
        proc = self.ctx.Process(target=_worker_main, args=(child, os.getpid()), daemon=False)
        # SIGINT is blocked while the child starts: the child inherits the mask through exec, so a Ctrl-C
        # during its start-up stays pending until _worker_main ignores it (no KeyboardInterrupt traceback),
        # and the runner gets it the moment the mask is lifted. (Ignoring SIGINT here instead lost a Ctrl-C
        # that arrived during a slow start: the run then waited for its cell, seen under load in CI.)
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc.start()
        finally:
            if main_thread:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        child.close()
        return _Worker(proc, parent)

    def run(self, jobs: Iterable[CellJob], on_done: OnDone) -> None:
        # split the cores between workers so model runtimes do not oversubscribe the CPU
        os.environ.setdefault("BENCH_THREADS", str(max(1, (os.cpu_count() or 1) // self.n)))
        queue = list(jobs)
        queue.reverse()
        workers = [self._spawn() for _ in range(min(self.n, len(queue)))]
        clean = False
        try:
            while queue or any(w.job for w in workers):
                for w in workers:
                    if w.job is None and queue:
                        w.job, w.started = queue.pop(), time.monotonic()
                        w.conn.send(w.job)
                busy = [w for w in workers if w.job is not None]
                ready = wait([w.conn for w in busy], timeout=0.5)
                now = time.monotonic()
                for i, w in enumerate(workers):
                    if w.job is None:
                        continue
                    job = w.job
                    if w.conn in ready:
                        try:
                            outcome = w.conn.recv()
                        except (EOFError, OSError):
                            w.proc.join(timeout=5)
                            outcome = record_failure(
                                job, f"worker process died (exit code {w.proc.exitcode})", now - w.started
                            )
                            workers[i] = self._spawn()
                        else:
                            w.job = None
                        on_done(outcome)
                    elif job.timeout_s is not None and now - w.started > job.timeout_s:
                        w.proc.terminate()
                        w.proc.join(timeout=5)
                        on_done(record_failure(job, f"timeout after {job.timeout_s:g}s", now - w.started))
                        workers[i] = self._spawn()
            clean = True
        finally:
            for w in workers:
                if not clean and w.job is not None:  # Ctrl-C or a full disk: stop the cell now
                    w.proc.terminate()
                    continue
                try:
                    w.conn.send(None)
                except (OSError, BrokenPipeError):
                    pass
            for w in workers:
                w.proc.join(timeout=5)
                if w.proc.is_alive():
                    w.proc.terminate()


def run_ray(jobs: Iterable[CellJob], on_done: OnDone, workers: int) -> None:
    """Each cell is one Ray task (bench.ray_executor)."""
    from bench.ray_executor import run_ray as run

    run(jobs, on_done, workers)


def run_jobs(jobs: list[CellJob], on_done: OnDone, executor: str = "local", workers: int = 1) -> None:
    if executor == "local":
        if workers <= 0:
            run_inline(jobs, on_done)
        else:
            ProcessPool(workers).run(jobs, on_done)
    elif executor == "inline":
        run_inline(jobs, on_done)
    elif executor == "ray":
        run_ray(jobs, on_done, workers)
    else:
        raise BenchError(f"unknown executor {executor!r}; use local, inline or ray")
