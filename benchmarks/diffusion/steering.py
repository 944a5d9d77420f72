"""How far a `field: value` hint steers the embedded DLM: hits with and without the hint.

    python -m benchmarks.diffusion.steering '{"train_steps": 1200, "threads": 2}' [SYSTEM_PARAMS_JSON]

Trains (or loads from $BENCH_CACHE_DIR) the embedded DLM on multiwoz/train with the given MDLMParams,
then generates 32 records with `llada` (`k_shots: 0`) for a few (field, value) hints and prints how many
parsed records carry the hinted value, next to the same prompt without the hint. Needs BENCH_DATA_DIR.
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

PROBES = (("day", "friday"), ("departure", "stansted airport"), ("destination", "ely"))


class _OneBackend:
    """Context serving one already-built backend for the `dlm` role."""

    profile_name = "embedded"

    def __init__(self, backend: Any, cache_dir: Path) -> None:
        self._backend, self.cache_dir = backend, str(cache_dir)

    def backend(self, role: str, task: Any = None) -> Any:
        return self._backend


def main(argv: list[str]) -> None:
    params = json.loads(argv[0]) if argv else {}
    system_params = json.loads(argv[1]) if len(argv) > 1 else {}
    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    cache = default_cache_dir()
    t0 = time.perf_counter()
    backend = EmbeddedMDLMBackend.from_spec(
        {"params": params}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
    )
    print(f"model ready in {time.perf_counter() - t0:.1f}s")
    ctx = _OneBackend(backend, cache)
    for field, value in PROBES:
        for hinted in (False, True):
            sp = {"k_shots": 0, "hints": {field: value} if hinted else {}, **system_params}
            samples = LLaDASystem(sp).generate(spec, 32, 0, ctx).samples
            records = [r for r in (extract_record(s.text).record for s in samples) if isinstance(r, dict)]
            hits = sum(str(r.get(field, "")).lower() == value for r in records)
            print(
                f"{field:12s} {'hinted' if hinted else 'bare':7s} parsed {len(records):2d}/32  hits {hits:2d}"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
