"""Parse rate and schema validity of the two trained baselines on the four Table 1 families.

    python -m benchmarks.diffusion.baselines diffusion-lm|difflm [SEED] [N] [TASK ...]

Runs the system through the embedded profile (the catalog defaults of `embedded-diffusion-lm` /
`embedded-difflm`) on the Table 1 task sizes (64 references, SuperNI 10), training or loading each
per-task model from $BENCH_CACHE_DIR, and prints one JSON line per task: parse_rate, schema_valid (from
`metrics.scoring.score_cell`), training seconds, final training loss, sampling seconds, and for DiffLM the
draws it took (mean gen_attempts, share that passed the check). Needs BENCH_DATA_DIR.
"""

from __future__ import annotations

import json
import sys
import time

from bench.context import BenchContext, default_cache_dir
from bench.profiles import resolve_profile
from bench.registry import SYSTEMS
from bench.tasks import load_task
from metrics.scoring import score_cell

TASKS = {
    "multiwoz/train": 64,
    "truthfulqa": 64,
    "self_instruct": 64,
    "superni/task1192_food_flavor_profile": 10,
}


def measure(system_name: str, task: str, seed: int, n: int) -> dict:
    spec = load_task(task, n_references=TASKS.get(task, 64), n_holdout=TASKS.get(task, 64))
    ctx = BenchContext(resolve_profile("embedded"), default_cache_dir())
    role = "diffusion_lm" if system_name == "diffusion-lm" else "difflm"
    t0 = time.perf_counter()
    backend = ctx.backend(role, task=spec)
    load_s = time.perf_counter() - t0
    system = SYSTEMS.get(system_name)({})
    t1 = time.perf_counter()
    res = system.generate(spec, n, seed, ctx)
    sample_s = time.perf_counter() - t1
    score = score_cell(res.samples, spec, ["parse_rate", "schema_valid"])
    log = [r for r in backend.train_log if "loss" in r]
    out = {
        "system": system_name,
        "task": task,
        "seed": seed,
        "n": n,
        "parse_rate": round(score.values["parse_rate"], 3),
        "schema_valid": round(score.values["schema_valid"], 3),
        "train_seconds": round(float(backend.meta.get("train_seconds", 0.0)), 1),
        "loaded_from_cache": backend.loaded_from_cache,
        "load_seconds": round(load_s, 1),
        "first_loss": log[0]["loss"] if log else None,
        "final_loss": [r for r in log if r.get("stage") == log[0].get("stage")][-1]["loss"] if log else None,
        "sample_seconds": round(sample_s, 1),
    }
    if system_name == "difflm":
        att = [s.meta["gen_attempts"] for s in res.samples]
        out["mean_gen_attempts"] = round(sum(att) / len(att), 2)
        out["passed_check"] = round(sum(s.meta["passed_check"] for s in res.samples) / len(att), 3)
        out["generator_calls"] = res.usage.generator_calls
        out["vae_eval_nll"] = [r["nll_per_token"] for r in backend.train_log if r.get("stage") == "vae_eval"]
    else:
        out["n_train"], out["n_dropped"] = backend.meta.get("n_train"), backend.meta.get("n_dropped")
    return out


def main(argv: list[str]) -> None:
    system_name = argv[0]
    seed = int(argv[1]) if len(argv) > 1 else 0
    n = int(argv[2]) if len(argv) > 2 else 32
    tasks = argv[3:] or list(TASKS)
    for task in tasks:
        print(json.dumps(measure(system_name, task, seed, n)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
