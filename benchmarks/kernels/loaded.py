"""Does one machine train the same weights when it is busy? Start several trainings of the tiny DLM at
once (each runs beside the others, so the box is loaded), under each kernel setting, and count the
distinct weight hashes.

`python -m benchmarks.kernels.loaded [--rounds 4] [--at-once 3] [--threads 2] [--json F]`

Settings: the machine's own kernels with `--threads`, with and without the deterministic algorithms
every training runs (bench/kernels.training), the usual backward on one thread, and portable kernels
with `--threads`. Measured results: docs/reproducing.md, "On one machine under load".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench import kernels
from benchmarks.kernels.portable import ROOT, clean_env
from systems.backends.mdlm.tiny import TINY_DLM


def start(
    extra_env: dict[str, str], threads: int, steps: int = 6, backward: str = "deterministic"
) -> subprocess.Popen:
    """Start `benchmarks.kernels.weights` (train `steps` steps of the tiny DLM, print its weights hash)
    in a fresh process with the kernel settings cleared and then `extra_env` set; `backward` "usual"
    trains without the deterministic algorithms (to measure what they change)."""
    params = json.dumps(TINY_DLM | {"train_steps": steps, "vocab_size": 400})
    cmd = ["-m", "benchmarks.kernels.weights", "--steps", str(steps), "--threads", str(threads)]
    cmd += ["--params", params, "--backward", backward]
    return subprocess.Popen(
        [sys.executable, *cmd],
        cwd=ROOT,
        env=clean_env() | extra_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen) -> dict:
    """A started training's last line of output: its weights hash and kernels."""
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"training failed: {err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--at-once", type=int, default=3, help="trainings started together in a round")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    n = args.threads
    settings = {
        f"own kernels, {n} threads, usual backward": ({}, n, "usual"),
        f"own kernels, {n} threads": ({}, n, "deterministic"),
        "own kernels, 1 thread, usual backward": ({}, 1, "usual"),
        f"portable kernels, {n} threads": ({kernels.SWITCH: "1"}, n, "deterministic"),
    }
    rows = []
    for name, (env, threads, backward) in settings.items():
        hashes: Counter[str] = Counter()
        for _ in range(args.rounds):
            procs = [start(env, threads, backward=backward) for _ in range(args.at_once)]
            hashes.update(result(p)["sha256"][:12] for p in procs)
        row = {"setting": name, "trainings": sum(hashes.values()), "distinct": len(hashes), "hashes": hashes}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
