"""How far a `field: value` hint steers the embedded DLM, field by field, against the same prompt without it.

    python -m benchmarks.diffusion.steering ['{"train_steps": 1200}'] [SYSTEM_PARAMS_JSON]

Trains (or loads from $BENCH_CACHE_DIR) the embedded DLM on multiwoz/train with the given MDLMParams
(default: the catalog defaults), then for every field and seeds 0-4 generates 16 records with `llada`
(`k_shots: 0`) hinted with one of the references' values (the seed picks it), and 16 with the plain
prompt. Prints, per field, the share of records carrying the value with and without the hint (the
baseline) and the parse rate of the hinted prompts. The same protocol as tests/test_diffusion_quality.py.
Needs BENCH_DATA_DIR.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.context import default_cache_dir
from bench.tasks import load_task
from metrics.extract import extract_record
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.llada import LLaDASystem

FIELDS = ("day", "leaveAt", "arriveBy", "price", "duration", "trainID", "destination", "departure")
SEEDS = range(5)
N = 16


class _OneBackend:
    """Context serving one already-built backend for the `dlm` role."""

    profile_name = "embedded"

    def __init__(self, backend: Any, cache_dir: Path) -> None:
        self._backend, self.cache_dir = backend, str(cache_dir)

    def backend(self, role: str, task: Any = None) -> Any:
        return self._backend


def field_rates(spec: Any, ctx: Any, field: str, system_params: dict) -> dict[str, float]:
    """Mean share of records with the hinted value (hinted / plain prompt) and the hinted parse rate."""
    values = sorted({r[field] for r in spec.references if field in r})
    hinted = plain = parsed = 0.0
    for seed in SEEDS:
        value = values[(seed * 37) % len(values)]
        for hint in (True, False):
            sp = {"k_shots": 0, "hints": {field: value} if hint else {}, **system_params}
            records = [
                extract_record(s.text).record for s in LLaDASystem(sp).generate(spec, N, seed, ctx).samples
            ]
            hits = sum(isinstance(r, dict) and r.get(field) == value for r in records) / N
            if hint:
                hinted += hits / len(SEEDS)
                parsed += sum(isinstance(r, dict) for r in records) / N / len(SEEDS)
            else:
                plain += hits / len(SEEDS)
    return {"hinted": hinted, "plain": plain, "parse_rate_hinted": parsed}


def main(argv: list[str]) -> None:
    params = json.loads(argv[0]) if argv else {}
    system_params = json.loads(argv[1]) if len(argv) > 1 else {}
    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    cache = default_cache_dir()
    t0 = time.perf_counter()
    backend = EmbeddedMDLMBackend.from_spec(
        {"params": params}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
    )
    print(f"model ready in {time.perf_counter() - t0:.1f}s (trained in {backend.train_seconds:.0f}s)")
    ctx = _OneBackend(backend, cache)
    print(f"{'field':12s} {'hinted':>7s} {'plain':>7s} {'parse(hinted)':>14s}")
    for field in FIELDS:
        r = field_rates(spec, ctx, field, system_params)
        print(f"{field:12s} {r['hinted']:7.3f} {r['plain']:7.3f} {r['parse_rate_hinted']:14.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
