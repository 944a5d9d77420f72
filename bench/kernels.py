"""Portable float kernels (opt-in): the same trained weights on every x86-64 CPU with AVX2.

Torch, MKL, oneDNN and numpy pick their kernels by the CPU they run on: ATen's vector loops by the
widest ISA (AVX-512 on recent Xeons, AVX2 on AMD Zen 2/3), MKL's GEMM by vendor and ISA, oneDNN's by
ISA, numpy's sort by ISA (which orders ties, and so sentence-transformers' length batches). Each choice
orders float sums differently, so one config and seed trains the embedded DLM into other weights on
each machine type, and the DLM rows of a table move with the machine (docs/reproducing.md).

`pin()` caps every library at a branch all such CPUs run alike: ATen at AVX2, MKL at its COMPATIBLE
branch (the only reproducible one it offers on non-Intel CPUs; its AVX2 branch gave another weight
gradient on an emulated AMD EPYC), oneDNN at AVX2, numpy at its x86-64-v2 baseline. It is opt-in
because the COMPATIBLE GEMM is slow: training takes 2.7x as long (measured in docs/reproducing.md).
The libraries read these variables once, when they load, so `pin()` runs on the first import of
bench, before torch, and spawned workers inherit them. A user's own setting of a variable wins; then
the process is not portable and `key_part()` says so instead of keying a model as portable.

The same weights on one machine also need the same order of sums from run to run. With more than one
thread, torch's CPU backward of indexing (`k[rows]` in the embedded DLM's copy head, an embedding's
gather) accumulates in an order that depends on thread timing, and on a loaded box a 2-thread training
came out different from run to run (docs/reproducing.md, "On one machine under load"). `training()`
therefore runs every training with torch's deterministic algorithms. On one thread they give the bits
the usual path gives (measured), so a 1-thread model (the default) keeps its key and its weights; with
more threads they give other bits, and `key_part` marks such models.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JSON = dict[str, Any]

PORTABLE_ENV: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "COMPATIBLE",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR",
}
"""The variables `pin()` sets; `PORTABLE_VERSION` names this set in cache keys."""

PORTABLE_VERSION = "portable-1"
DETERMINISTIC_BACKWARD = "deterministic-1"
"""Names, in a multi-thread model's key, the deterministic algorithms `training()` runs."""
SWITCH = "BENCH_PORTABLE_KERNELS"
"""Set to 1 (or pass `bench run --portable-kernels`) to run the portable kernels."""


def wanted() -> bool:
    """Whether this process should run portable kernels (opt-in: BENCH_PORTABLE_KERNELS=1)."""
    return os.environ.get(SWITCH, "").strip().lower() in ("1", "true", "yes", "on")


def pin() -> None:
    """Set the portable kernel variables this process has not set itself; a no-op when opted out."""
    if wanted():
        for name, value in PORTABLE_ENV.items():
            os.environ.setdefault(name, value)


def request() -> None:
    """Ask for portable kernels in this process and every process it starts (`--portable-kernels`)."""
    os.environ[SWITCH] = "1"
    pin()


def provenance() -> JSON:
    """What a run's manifest records of the kernels, without loading torch: whether portable kernels
    were asked for, each variable as set, and the CPU (vendor, model, AVX2 and AVX-512), on which the
    weights depend without them."""
    return {
        "portable": wanted(),
        "settings": {name: os.environ.get(name) for name in PORTABLE_ENV},
        "cpu": cpu_model(),
    }


def cpu_model() -> JSON:
    """The CPU's vendor and model name and whether it has AVX2 and AVX-512 (/proc/cpuinfo's first
    processor; where there is none, Python's processor string and None for the rest)."""
    try:
        first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
    except OSError:
        return {"vendor": None, "model": platform.processor() or None, "avx2": None, "avx512f": None}
    fields = {
        k.strip(): v.strip() for k, v in (line.split(":", 1) for line in first.splitlines() if ":" in line)
    }
    flags = set(fields.get("flags", "").split())
    return {
        "vendor": fields.get("vendor_id"),
        "model": fields.get("model name"),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
    }


def identity() -> JSON:
    """The kernels this process runs: the ISA ATen dispatches to and each library's setting.

    ATen's capability is read from torch itself (it is fixed on first use); the others are the
    variables the libraries read when they loaded."""
    import torch

    return {
        "aten": torch.backends.cpu.get_cpu_capability(),
        **{name: os.environ.get(name, "") for name in PORTABLE_ENV if name != "ATEN_CPU_CAPABILITY"},
    }


def portable() -> bool:
    """Whether this process runs exactly the portable kernels (and not, say, torch or numpy loaded
    before `pin()`: ATen reports its ISA, numpy the features it dispatches to)."""
    ident = identity()
    return (
        ident["aten"] == "AVX2"
        and not _numpy_dispatches_above_baseline()
        and all(ident[name] == value for name, value in PORTABLE_ENV.items() if name != "ATEN_CPU_CAPABILITY")
    )


def _numpy_dispatches_above_baseline() -> bool:
    """Whether the loaded numpy uses x86-64-v3 or wider kernels (False when numpy does not say)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        return False
    return bool(features.get("X86_V3") or features.get("X86_V4"))


def key_part(threads: int | None = 1) -> JSON:
    """What enters a trained model's cache key and identity: the portable set's name when it runs, and
    for a model trained on more than `threads` = 1 the deterministic backward (`training()`); nothing
    otherwise, so every 1-thread key from before these existed stays valid.

    Raises when portable kernels were asked for but do not run (torch loaded before `pin()`, or a
    variable set to something else by hand): such a model would be keyed portable and not be."""
    part: JSON = {"backward": DETERMINISTIC_BACKWARD} if threads and threads > 1 else {}
    if not wanted():
        return part
    if not portable():
        from bench.errors import BenchError

        numpy_note = "; numpy dispatches above its baseline" if _numpy_dispatches_above_baseline() else ""
        raise BenchError(
            f"{SWITCH}=1 but this process runs other kernels ({identity()}{numpy_note}): set it before "
            "Python starts, or import bench before torch and numpy, so the libraries load with the "
            "portable settings (an x86-64 CPU with AVX2 is needed)"
        )
    return {"kernels": PORTABLE_VERSION, **part}


@contextmanager
def training(threads: int | None) -> Iterator[None]:
    """Torch set up to train a model: `threads` torch threads (None: as they are) and torch's
    deterministic algorithms, so a loaded machine trains the bits an idle one does (module doc). Both
    are restored afterwards. A training's forward passes give the same bits either way (measured);
    only the backward's order of sums changes, and on one thread not even that."""
    import torch

    old_threads, old_deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if threads:
        torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_deterministic)
