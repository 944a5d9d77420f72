"""Is plain `llada` competent on every family when one embedded DLM is shared by the tasks?

    python -m benchmarks.diffusion.shared_model [--tasks multiwoz/train:64:32,truthfulqa:32:32,...]
        [--params '{"train_steps": 5000, "threads": 2, "rope": true, "high_noise": 0.5, "vocab_size": 2048}'] [--seeds 3] [--n 16]
        [--systems '[{}, {"choice_temperature": 0.25}]'] [--json out.json]

Trains (or loads from $BENCH_CACHE_DIR/mdlm-shared) one model on the tasks' references in turn
(systems/backends/mdlm/shared.py; `train_steps` counts all tasks' steps), then measures each task as
`benchmarks.diffusion.competence` does: parse rate, schema validity, length, distinct texts and the
share of records that are a training reference verbatim, for each `llada` params dict of `--systems`
(a backend setting such as `length_first` goes in `--params`: it is not in the cache key, so the model
is loaded, not trained again).
The default tasks are Table 1's, at its sizes (name:references:holdout). The issue's bar is parse_rate
>= 0.9 and schema_valid >= 0.8 on each, within 10 minutes of training per task.
"""

from __future__ import annotations

import argparse
import json

from bench.context import default_cache_dir
from bench.tasks import load_task
from benchmarks.diffusion.competence import measure, reference_chars
from benchmarks.diffusion.steering import _OneBackend
from systems.backends.mdlm.backend import MDLMParams
from systems.backends.mdlm.shared import shared_backends

TABLE1 = (
    "multiwoz/train:64:32,truthfulqa:32:32,self_instruct:32:32,superni/task1192_food_flavor_profile:10:10"
)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default=TABLE1, help="name:references:holdout, comma-separated")
    ap.add_argument("--params", default='{"train_steps": 3600}', help="MDLMParams JSON")
    ap.add_argument("--seed", type=int, default=0, help="training seed")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--systems", default="[{}]", help="JSON list of llada params dicts")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    specs = []
    for item in a.tasks.split(","):
        name, refs, hold = item.rsplit(":", 2)
        specs.append(load_task(name, n_references=int(refs) or None, n_holdout=int(hold)))
    cache = default_cache_dir()
    backends = shared_backends(specs, MDLMParams(**json.loads(a.params)), cache, a.seed)
    log = backends[0].train_log
    print(
        f"## one model on {len(specs)} tasks: trained in {backends[0].train_seconds:.0f}s "
        f"(cached: {backends[0].loaded_from_cache}); loss {log[0]['loss']} -> {log[-1]['loss']}",
        flush=True,
    )
    print(
        "| task (references) | window | llada params | parse_rate | schema_valid | mean chars (references' "
        "median) | ended in first quarter | distinct | a reference verbatim |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    out = []
    for spec, be in zip(specs, backends, strict=True):
        ref_chars, window_chars = reference_chars(be, spec)
        ctx = _OneBackend(be, cache)
        for system in json.loads(a.systems):
            r = measure(spec, ctx, system, a.n, a.seeds, window_chars)
            r.pop("texts")
            out.append({"task": spec.name, "references": len(spec.references), **r})
            print(
                f"| {spec.name} ({len(spec.references)}) | {be.response_length} | `{json.dumps(system)}` "
                f"| {r['parse_rate']:.3f} | {r['schema_valid']:.3f} | {r['mean_chars']:.0f} "
                f"({ref_chars:.0f}) | {r['ended_in_first_quarter']:.2f} "
                f"| {r['distinct']:.2f} | {r['copied']:.2f} |",
                flush=True,
            )
    if a.json:
        meta = {"tasks": a.tasks, "params": json.loads(a.params), "seed": a.seed}
        with open(a.json, "w") as fh:
            json.dump(
                {**meta, "train_seconds": backends[0].train_seconds, "log": log, "rows": out}, fh, indent=1
            )


if __name__ == "__main__":
    main()
