"""One writer per run directory: `RUN_DIR/.lock`, held with flock and naming its holder.

Why: two `bench run --out D` started together, or two `--resume D`, would each see the same unfinished
cells and both run all of them (twice the model time, and files of one interleaved with the other's).
The lock is an advisory `flock` on `RUN_DIR/.lock`: the kernel drops it when the holder dies, even by
SIGKILL, so a stale lock never blocks a resume. The file's content (pid, host, start time, command)
only serves the message: who holds the run, or whose dead lock is being taken over. The file is never
unlinked (unlinking a lock file races with a process that opened it), only emptied on release.
Where the filesystem has no flock (some network filesystems), a holder on this host is checked by pid;
a holder on another host is trusted until the user removes the file.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench.errors import BenchError

LOCK_NAME = ".lock"


class RunLocked(BenchError):
    """The run directory is in use by another live process."""


def _holder_text(info: dict[str, Any]) -> str:
    started = info.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        if isinstance(started, int | float)
        else "?"
    )
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started {when}"


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Context manager: `with RunLock(run_dir): ...` (creates run_dir)."""

    def __init__(self, run_dir: Path | str, command: str | None = None):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.command = command or " ".join(sys.argv[:4])
        self.fd: int | None = None

    def _read(self, fd: int) -> dict[str, Any]:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            data = os.read(fd, 65536)
            info = json.loads(data.decode("utf-8")) if data.strip() else {}
        except (OSError, ValueError):
            return {}
        return info if isinstance(info, dict) else {}

    def acquire(self) -> RunLock:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            info = self._read(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise RunLocked(
                    f"{self.run_dir} is in use by {_holder_text(info)} ({info.get('command', '?')}); "
                    f"wait for it to finish or stop it (lock file {self.path})"
                ) from None
            # no flock here: fall back to the recorded holder
            if info and (info.get("host") != platform.node() or _pid_alive(info.get("pid"))):
                os.close(fd)
                raise RunLocked(
                    f"{self.run_dir} is in use by {_holder_text(info)} (this filesystem has no flock; "
                    f"if that process is gone, delete {self.path})"
                ) from None
        previous = self._read(fd)
        if previous.get("pid") and previous.get("pid") != os.getpid():
            print(
                f"note: taking over the stale lock of {_holder_text(previous)}, which is no longer running",
                file=sys.stderr,
            )
        info = {"pid": os.getpid(), "host": platform.node(), "started": time.time(), "command": self.command}
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, (json.dumps(info) + "\n").encode("utf-8"))
        except OSError:  # the holder's name is only for messages; a full disk must not stop here
            pass
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
        except OSError:
            pass
        try:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        finally:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
