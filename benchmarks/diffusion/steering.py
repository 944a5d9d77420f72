"""Does the prompt steer the embedded DLM? `field: value` hints and natural-language notes, with vs without.

    python -m benchmarks.diffusion.steering [--families multiwoz/train] [--n 16] [--seeds 5]
        [--params '{"train_steps": 900}'] [--hint-fields day,leaveAt,price] [--kinds value,set]
        [--hint-shots 0] [--phrasings held_out|train] [--json out.json]

For each family the embedded DLM is trained (or loaded from $BENCH_CACHE_DIR) with the given MDLMParams
(default: the catalog defaults), then, over seeds 0..S-1 with N records per seed and condition:

* **hints** (`llada`, `k_shots: 0` unless `--hint-shots`, the protocol of
  tests/test_diffusion_quality.py): for each hint field
  the seed's value is the (37 s mod n)-th of the field's sorted reference values; the share of records
  carrying it with the `field: "value"` line and without it (the same prompts minus the line);
* **notes** (`llada` default prompt: task instruction, 2 few-shot references, field list): for every
  note kind the task allows (systems/diffusion_notes.py) one note is drawn per seed, in a **held-out
  phrasing** (the last two of its kind, which no training uses) unless `--phrasings train`; the share
  of records that satisfy it (`Note.holds`, checked in code; an unparsed record does not) with
  `notes: [note]` and without;
* **parse**: the parse rate of plain `llada` (default prompt), from the without-note records.

The prompts without a hint or note are the same for every field or kind of a seed, so they are generated
once per seed. Prints markdown tables; `--json` writes every row. Needs BENCH_DATA_DIR.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.context import default_cache_dir
from bench.tasks import load_task
from metrics.extract import extract_record
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.diffusion_notes import NoteSpace
from systems.llada import LLaDASystem

FAMILIES = ("multiwoz/train",)
HINT_FIELDS = ("day", "leaveAt", "price")


class _OneBackend:
    """Context serving one already-built backend for the `dlm` role."""

    profile_name = "embedded"

    def __init__(self, backend: Any, cache_dir: Path) -> None:
        self._backend, self.cache_dir = backend, str(cache_dir)

    def backend(self, role: str, task: Any = None) -> Any:
        return self._backend


def records(
    spec: Any, ctx: Any, params: dict, n: int, seed: int
) -> tuple[list[Any], list[list[Any]], list[str]]:
    """n records of `llada` with `params` (None where the text does not parse), each sample's few-shot
    examples, and the raw texts."""
    system = LLaDASystem(params)
    out = system.generate(spec, n, seed, ctx)
    recs = [extract_record(s.text).record for s in out.samples]
    examples = [system.prompt_parts(spec, seed, i).examples for i in range(n)]
    return recs, examples, [s.text for s in out.samples]


def hint_rates(
    spec: Any, ctx: Any, fields: list[str], n: int, seeds: int, system: dict, shots: int = 0
) -> list[dict]:
    """Per field: share of records with the hinted value, with / without the hint, and the parse rate."""
    plain = {s: records(spec, ctx, {**system, "k_shots": shots}, n, s)[0] for s in range(seeds)}
    out = []
    for field in fields:
        values = sorted({r[field] for r in spec.references if field in r})
        rows = []
        for seed in range(seeds):
            value = values[(seed * 37) % len(values)]
            recs, _, texts = records(
                spec, ctx, {**system, "k_shots": shots, "hints": {field: value}}, n, seed
            )
            rows.append(
                {
                    "seed": seed,
                    "value": value,
                    "with": sum(isinstance(r, dict) and r.get(field) == value for r in recs) / n,
                    "without": sum(isinstance(r, dict) and r.get(field) == value for r in plain[seed]) / n,
                    "parse_with": sum(isinstance(r, dict) for r in recs) / n,
                    "texts_with": texts[:4],
                }
            )
        out.append({"field": field, **_means(rows), "seeds": rows})
    return out


def note_rates(
    spec: Any, ctx: Any, space: NoteSpace, kinds: list[str], n: int, seeds: int, system: dict, held_out: bool
) -> tuple[list[dict], float]:
    """Per kind: share of records satisfying a drawn note with / without it; and the plain parse rate."""
    plain = {s: records(spec, ctx, dict(system), n, s) for s in range(seeds)}
    parse = sum(isinstance(r, dict) for s in plain.values() for r in s[0]) / (n * seeds)
    out = []
    for kind in kinds:
        rows = []
        for seed in range(seeds):
            note = space.draw(kind, random.Random(f"{spec.name}:{kind}:{seed}"), held_out=held_out)
            if note is None:
                continue
            recs, ex, texts = records(spec, ctx, {**system, "notes": [note.text]}, n, seed)
            recs0, ex0, _ = plain[seed]
            rows.append(
                {
                    "seed": seed,
                    "note": note.text,
                    "sub": note.sub,
                    "with": sum(note.holds(r, e) for r, e in zip(recs, ex, strict=True)) / n,
                    "without": sum(note.holds(r, e) for r, e in zip(recs0, ex0, strict=True)) / n,
                    "parse_with": sum(isinstance(r, dict) for r in recs) / n,
                    "texts_with": texts[:4],
                    "records_without": recs0[:4],
                }
            )
        out.append({"kind": kind, **_means(rows), "seeds": rows})
    return out, parse


def _means(rows: list[dict]) -> dict[str, float]:
    """Means over seeds. `headroom` = 1 - without, the largest lift the plain rate leaves: a kind whose
    plain records already satisfy the note (novelty on MultiWOZ, `same` stations) cannot lift 0.5."""
    k = max(1, len(rows))
    return {
        "with": sum(r["with"] for r in rows) / k,
        "without": sum(r["without"] for r in rows) / k,
        "lift": sum(r["with"] - r["without"] for r in rows) / k,
        "headroom": sum(1 - r["without"] for r in rows) / k,
        "parse_with": sum(r["parse_with"] for r in rows) / k,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--n", type=int, default=16, help="records per seed and condition")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (default: the catalog defaults)")
    ap.add_argument("--system", default="{}", help="extra llada params JSON")
    ap.add_argument("--hint-fields", default=",".join(HINT_FIELDS), help="'' = no hint rows")
    ap.add_argument("--hint-shots", type=int, default=0, help="few-shot examples in hint prompts")
    ap.add_argument("--kinds", default=None, help="note kinds (default: all the task allows; '' = none)")
    ap.add_argument("--phrasings", choices=("held_out", "train"), default="held_out")
    ap.add_argument("--json", default=None, help="also write all rows to this file")
    a = ap.parse_args(argv)
    cache = default_cache_dir()
    system = json.loads(a.system)
    results: list[dict] = []
    for family in a.families.split(","):
        spec = load_task(family, n_references=None, n_holdout=None)
        t0 = time.perf_counter()
        backend = EmbeddedMDLMBackend.from_spec(
            {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
        )
        print(
            f"## {family}: model ready in {time.perf_counter() - t0:.0f}s "
            f"(trained in {backend.train_seconds:.0f}s)",
            flush=True,
        )
        ctx = _OneBackend(backend, cache)
        t1 = time.perf_counter()
        fields = [f for f in a.hint_fields.split(",") if f and f in spec.schema.get("properties", {})]
        if fields:
            print(f"hints, k_shots {a.hint_shots}")
            print("| hint field | with hint | without | lift | parse (with) |\n|---|---:|---:|---:|---:|")
            for r in hint_rates(spec, ctx, fields, a.n, a.seeds, system, a.hint_shots):
                print(
                    f"| {r['field']} | {r['with']:.3f} | {r['without']:.3f} | {r['lift']:+.3f} "
                    f"| {r['parse_with']:.2f} |",
                    flush=True,
                )
                results.append({"family": family, "hint": r["field"], **r})
        space = NoteSpace(spec)
        kinds = space.kinds() if a.kinds is None else [k for k in a.kinds.split(",") if k in space.kinds()]
        if kinds:
            rows, parse = note_rates(spec, ctx, space, kinds, a.n, a.seeds, system, a.phrasings == "held_out")
            print(f"\nnotes ({a.phrasings} phrasings); plain `llada` parse rate {parse:.3f}")
            print("| kind | with note | without | lift | headroom | per-seed lifts | parse (with) |")
            print("|---|---:|---:|---:|---:|---|---:|")
            for r in rows:
                lifts = ", ".join(f"{s['sub']} {s['with'] - s['without']:+.2f}" for s in r["seeds"])
                print(
                    f"| {r['kind']} | {r['with']:.3f} | {r['without']:.3f} | {r['lift']:+.3f} "
                    f"| {r['headroom']:.3f} | {lifts} "
                    f"| {r['parse_with']:.2f} |",
                    flush=True,
                )
                results.append({"family": family, **r})
            results.append({"family": family, "plain_parse_rate": parse})
        print(f"(measured in {time.perf_counter() - t1:.0f}s)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
