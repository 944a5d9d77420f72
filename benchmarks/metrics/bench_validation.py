"""Benchmark: schema validation of N parsed records, jsonschema-rs fast path against `jsonschema` alone.

Run from the repository root (BENCH_DATA_DIR pointing at the datasets):

    nice .venv/bin/python -m benchmarks.metrics.bench_validation --n 10000 --out benchmarks/metrics/validation.json

Workload: the same seeded field-wise recombinations of the task's real records as bench_metrics (parsed,
so only validation is timed), plus 10% damaged copies (a dropped key, a wrong type) so both verdicts
occur. Baseline: `metrics.structure.check_record(..., fast_engine=False)`, the `jsonschema` reference
with our bounded regex and the format checker. Ours: `check_record` with the jsonschema-rs fast engine.
Both run in the same process, alternating, best of `--repeat`; the verdicts must be identical. The
verdict alone (`is_valid` of each engine) is timed too: the fast path still asks the reference for the
diagnostics of every record it rejects, so the share of invalid records bounds the full check's gain.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any


def records_for(task: str, n: int, seed: int, damaged: float = 0.1) -> tuple[dict, list[Any]]:
    from bench.cells import load_task_cached
    from benchmarks.metrics.bench_metrics import make_outputs
    from metrics.extract import extract_record

    spec = load_task_cached({"name": task, "n_references": 64, "n_holdout": 64}, None)
    rnd = random.Random(seed)
    out: list[Any] = []
    for s in make_outputs(spec, n, seed):
        rec = extract_record(s.text, s.finish_reason).record
        if rec is None:
            rec = dict(rnd.choice(spec.references))
        if rnd.random() < damaged and rec:
            key = rnd.choice(sorted(rec))
            rec = {**rec, key: 12345} if rnd.random() < 0.5 else {k: v for k, v in rec.items() if k != key}
        out.append(rec)
    return spec.schema, out


def _time_one(schema: dict, records: list[Any], repeat: int) -> dict[str, Any]:
    """Best-of-`repeat` seconds of the full check (verdict + diagnostics) and of the verdict alone."""
    import jsonschema_rs

    from metrics.structure import check_record, fast_engine_for, validator_for

    validator, engine = validator_for(schema), fast_engine_for(schema)
    rs = jsonschema_rs.Draft202012Validator(schema, validate_formats=True)
    contenders = {
        "check, jsonschema": lambda r: check_record(r, schema, validator, False).valid,
        "check, jsonschema-rs fast path": lambda r: check_record(r, schema, validator, engine).valid,
        "verdict, jsonschema": validator.is_valid,
        "verdict, jsonschema-rs": rs.is_valid,
    }
    best = dict.fromkeys(contenders, float("inf"))
    verdicts: dict[str, list[bool]] = {}
    for _ in range(repeat):
        for name, fn in contenders.items():
            t = time.perf_counter()
            verdicts[name] = [bool(fn(r)) for r in records]
            best[name] = min(best[name], time.perf_counter() - t)
    first = verdicts["check, jsonschema"]
    return {
        "valid_share": sum(first) / len(records),
        "seconds": best,
        "speedup_check": best["check, jsonschema"] / best["check, jsonschema-rs fast path"],
        "speedup_verdict": best["verdict, jsonschema"] / best["verdict, jsonschema-rs"],
        "identical_verdicts": all(v == first for v in verdicts.values()),
        "fast_path_disagreements": engine.disagreements,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--damaged", type=float, nargs="+", default=[0.0, 0.1], help="shares of damaged records")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    runs = []
    for damaged in args.damaged:
        schema, records = records_for(args.task, args.n, args.seed, damaged)
        runs.append(_time_one(schema, records, args.repeat) | {"damaged_share": damaged})
    result = {"task": args.task, "n_records": args.n, "seconds_best_of": args.repeat, "runs": runs}
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
