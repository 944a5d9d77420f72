"""Per-task trained models on disk, and a progress line while they train.

The embedded masked-diffusion LM (systems/backends/mdlm/backend.py) keeps its weights under
`BENCH_CACHE_DIR/mdlm/<key>/`, written to a temp folder and renamed so that concurrent workers never see
half a model. The two baselines trained per task (Diffusion-LM, DiffLM) use the same layout through
`cached_folder`: a folder per (kind, key), a `meta.json` written last, and an atomic rename.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from bench import kernels
from bench.types import JSON, TaskSpec


def data_fingerprint(spec: TaskSpec) -> str:
    """Hash of what a per-task model is trained on: task name, fingerprint, instruction, schema, references.

    The same definition as the embedded DLM's (systems/backends/mdlm/backend.py).
    """
    h = hashlib.sha256()
    h.update(
        json.dumps([spec.name, spec.fingerprint, spec.instruction, spec.schema], sort_keys=True).encode()
    )
    for r in spec.references:
        h.update(json.dumps(r, sort_keys=True, ensure_ascii=False).encode())
    return h.hexdigest()


def cache_key(parts: JSON) -> str:
    """24 hex digits of sha256 over canonical JSON of everything that decides the trained weights."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def config_key(config: object) -> JSON:
    """A training dataclass as it enters a cache key: every field, the thread count only when it is not 1.

    The thread count orders torch's float reductions, so it changes the weights (the embedded DLM's are
    2e-5 apart after 20 steps at 1 and 2 threads); 1, the default, keeps the keys models had before it
    entered them. The kernels (bench.kernels) enter the same way: only when portable ones run, or when
    more than one thread trains (the deterministic backward)."""
    fields = {k: v for k, v in asdict(config).items() if not (k == "threads" and v == 1)}  # type: ignore[call-overload]
    return {**fields, **kernels.key_part(fields.get("threads", 1))}


@contextmanager
def training_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock (`<cache>/.locks/<kind>-<key>.lock`) while checking for and training one model.

    Two workers that need the same per-task model (`llada` and `aod` on one task) used to both train it:
    seven minutes of a 2-core machine spent twice on Self-Instruct in the Table 1 run. The second worker
    now waits, then finds the first one's folder. flock is released by the kernel when its holder dies, so
    a killed worker never leaves a stale lock.
    """
    locks = folder.parent.parent / ".locks"  # beside the model folders, never inside one kind's listing
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{folder.parent.name}-{folder.name}.lock", "a+b") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            from bench.progress import stage

            with stage(f"waiting for another worker to train {folder.parent.name}/{folder.name}", unit="s"):
                fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def cached_folder(cache_dir: Path, kind: str, key: str, train: Callable[[Path], JSON]) -> tuple[Path, bool]:
    """(folder, loaded_from_cache). On a miss `train(tmp)` writes its files into `tmp` and returns the meta
    dict, which is written as `meta.json`; the folder is then renamed into place. Training runs under
    `training_lock`, so concurrent workers train a model once; the rename keeps readers from ever seeing
    half a model."""
    folder = Path(cache_dir) / kind / key
    if (folder / "meta.json").exists():
        return folder, True
    with training_lock(folder):
        if (folder / "meta.json").exists():  # another worker trained it while we waited
            return folder, True
        return _train_into(folder, key, train), False


def _train_into(folder: Path, key: str, train: Callable[[Path], JSON]) -> Path:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{key}-"))
    try:
        meta = train(tmp)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, folder)
        except OSError:  # another worker renamed its copy first
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


class TrainProgress:
    """One status line on stderr at most every `every_s` seconds: step, loss, elapsed, ETA.

    Training a per-task model takes minutes; without this the run's cell bar looks hung.
    Silenced by BENCH_QUIET=1.
    """

    def __init__(self, label: str, total: int, every_s: float = 10.0) -> None:
        self.label = label
        self.total = max(1, total)
        self.every_s = every_s
        self.t0 = time.perf_counter()
        self._last = -1e9
        self.quiet = os.environ.get("BENCH_QUIET", "") not in ("", "0")

    def update(self, step: int, loss: float, force: bool = False) -> None:
        now = time.perf_counter()
        if self.quiet or (not force and now - self._last < self.every_s):
            return
        self._last = now
        done = step + 1
        elapsed = now - self.t0
        eta = elapsed / done * (self.total - done)
        print(
            f"[{self.label}] step {done}/{self.total} loss {loss:.4f} {elapsed:.0f}s elapsed, ETA {eta:.0f}s",
            file=sys.stderr,
            flush=True,
        )
