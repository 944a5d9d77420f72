"""Do portable kernels compute the same bits on other CPUs? Run a probe on this machine and under QEMU's
user-mode emulation of other CPU models (other vendor, ISA and cache sizes), under each library's own
kernels, under MKL's Intel-only AVX2 reproducibility branch, and under BENCH_PORTABLE_KERNELS=1.

`python -m benchmarks.kernels.portable [--probe ops|train] [--cpus Haswell,EPYC-Rome] [--json F]`

`--probe ops` (default) hashes four single operations (benchmarks/kernels/weights.py), about a minute
in all. `--probe train` trains the embedded DLM a few steps: emulation runs ~100x slower than the host,
so a default-size model takes hours there; `--params` takes a smaller configuration. Needs
`qemu-x86_64` (Debian's qemu-user). Under emulation numpy's AVX2 sort can crash QEMU 7.2, so emulated
runs keep numpy at its baseline, as the portable set does (on the host that changes no weight:
docs/reproducing.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import kernels

ROOT = Path(__file__).resolve().parents[2]
NUMPY_BASELINE = {"NPY_DISABLE_CPU_FEATURES": kernels.PORTABLE_ENV["NPY_DISABLE_CPU_FEATURES"]}


def clean_env() -> dict[str, str]:
    """This process's environment without any kernel setting, so each run chooses its own."""
    drop = {*kernels.PORTABLE_ENV, kernels.SWITCH, "MKL_ENABLE_INSTRUCTIONS"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def probe_once(cpu: str | None, env: dict[str, str], probe: str, steps: int, params: str) -> dict:
    """One probe in a fresh process (under `qemu-x86_64 -cpu CPU` when `cpu` is set)."""
    cmd = ["-m", "benchmarks.kernels.weights", "--probe", probe, "--steps", str(steps), "--params", params]
    if cpu:  # QEMU runs the interpreter's binary; -0 keeps argv[0] at the venv's python to find the venv
        cmd = ["qemu-x86_64", "-cpu", cpu, "-0", sys.executable, os.path.realpath(sys.executable), *cmd]
    else:
        cmd = [sys.executable, *cmd]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, env=clean_env() | env, capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]}
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"wall_s": round(time.perf_counter() - t0)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--probe", choices=["ops", "train"], default="ops")
    ap.add_argument("--cpus", default="Haswell,EPYC-Rome", help="QEMU CPU models, comma-separated")
    ap.add_argument("--steps", type=int, default=4, help="training steps (--probe train)")
    ap.add_argument("--params", default="{}", help="MDLMParams overrides, JSON (--probe train)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    if not shutil.which("qemu-x86_64"):
        print("qemu-x86_64 not found (Debian: apt-get install qemu-user)", file=sys.stderr)
        return 2
    settings = {
        "own kernels": NUMPY_BASELINE,
        "MKL AVX2 branch": NUMPY_BASELINE | {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"},
        "portable": {kernels.SWITCH: "1"},
    }
    cpus: list[str | None] = [None, *filter(None, args.cpus.split(","))]
    rows = []
    for name, env in settings.items():
        for cpu in cpus:
            row = {"cpu": cpu or "host", "setting": name}
            row |= probe_once(cpu, env, args.probe, args.steps, args.params)
            rows.append(row)
            print(json.dumps(row), flush=True)
    verdict = {name: _agree([r for r in rows if r["setting"] == name]) for name in settings}
    print(json.dumps({"all CPUs agree": verdict}))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "all CPUs agree": verdict}, indent=1) + "\n")
    return 0 if verdict["portable"] else 1


def _agree(rows: list[dict]) -> bool:
    """Whether every row computed the same bits (and none failed)."""
    outputs = [json.dumps(r.get("ops") or r.get("sha256")) for r in rows]
    return bool(rows) and all("error" not in r for r in rows) and len(set(outputs)) == 1


if __name__ == "__main__":
    raise SystemExit(main())
