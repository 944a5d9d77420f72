"""Decoding benchmark of the embedded diffusion LM: throughput and NFE of LLaDA sampling variants.

One run compares, on the same trained model, task, prompts and seed:
  * one-at-a-time vs batched sampling (same outputs, different records/s),
  * step-count decoding (T = 12, the paper's setting, and T = response length, one token per step)
    vs Fast-dLLM style confidence-threshold decoding, with and without the block-wise prefix cache.
Each row reports records/s, tokens/s, NFE per record, forward passes, parse_rate and schema_valid.
The claim checked: threshold decoding cuts NFE at least 2x against the step-count baseline it replaces
(one token per step) with parse_rate within 0.05.

Usage: python -m benchmarks.diffusion.decoding [--task multiwoz/train] [--n 32] [--cache-dir DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench.types import GenerationRequest, Sample, SamplingParams, TaskSpec


@dataclass
class DecodingRow:
    """One decoding variant's measurements (per record unless stated)."""

    variant: str
    knobs: dict[str, Any]
    batch_size: int
    n: int
    seconds: float
    records_per_s: float
    tokens_per_s: float
    nfe_per_record: float
    parse_rate: float
    schema_valid: float


def variants(response_length: int) -> list[tuple[str, dict[str, Any], int]]:
    """(name, diffusion knobs, sampler batch size) of every variant in one run."""
    half = (response_length + 1) // 2
    return [
        ("T=12 one-at-a-time", {"steps": 12}, 1),
        ("T=12 batched", {"steps": 12}, 16),
        (f"T={response_length} (1 token/step)", {"steps": response_length}, 16),
        ("threshold 0.9", {"steps": response_length, "threshold": 0.9}, 16),
        (f"T={response_length}, blocks of {half}", {"steps": response_length, "block_length": half}, 16),
        (
            f"threshold 0.9, blocks of {half}, prefix cache",
            {"steps": response_length, "threshold": 0.9, "block_length": half, "prefix_cache": True},
            16,
        ),
    ]


def run_variant(
    backend: Any, spec: TaskSpec, prompt: str, name: str, knobs: dict[str, Any], batch: int, n: int, seed: int
) -> DecodingRow:
    from metrics.scoring import score_cell

    sp = SamplingParams(temperature=backend.params.temperature, extra=tuple(sorted(knobs.items())))
    old = backend.params.gen_batch_size
    backend.params.gen_batch_size = batch
    try:
        reqs = [GenerationRequest.chat(prompt, sp, seed, i) for i in range(n)]
        t0 = time.perf_counter()
        comps = backend.generate(reqs)
        secs = time.perf_counter() - t0
    finally:
        backend.params.gen_batch_size = old
    samples = [Sample(i, c.text, c.finish_reason) for i, c in enumerate(comps)]
    score = score_cell(samples, spec, ["parse_rate", "schema_valid"], None).values
    return DecodingRow(
        variant=name,
        knobs=knobs,
        batch_size=batch,
        n=n,
        seconds=round(secs, 3),
        records_per_s=round(n / secs, 3),
        tokens_per_s=round(sum(c.tokens_out for c in comps) / secs, 1),
        nfe_per_record=sum(c.nfe for c in comps) / n,
        parse_rate=score["parse_rate"],
        schema_valid=score["schema_valid"],
    )


def run_decoding_benchmark(
    backend: Any, spec: TaskSpec, n: int = 32, seed: int = 0, only: tuple[str, ...] = ()
) -> list[DecodingRow]:
    """All variants (or those whose name ends with one of `only`) on one model; prompts are the
    `llada` system's default prompt (no few-shot)."""
    from systems.skeleton_prompt import default_parts, render_prompt

    prompt = render_prompt(default_parts(spec))
    chosen = [v for v in variants(backend.response_length) if not only or v[0].endswith(only)]
    return [run_variant(backend, spec, prompt, name, k, b, n, seed) for name, k, b in chosen]


def threshold_claim(rows: list[DecodingRow]) -> dict[str, float | bool]:
    """NFE cut and parse-rate gap of threshold decoding against one-token-per-step decoding."""
    base = next(r for r in rows if r.variant.endswith("(1 token/step)"))
    fast = next(r for r in rows if r.variant == "threshold 0.9")
    cut = base.nfe_per_record / fast.nfe_per_record
    gap = abs(base.parse_rate - fast.parse_rate)
    return {"nfe_cut": round(cut, 2), "parse_gap": round(gap, 3), "holds": cut >= 2.0 and gap <= 0.05}


def markdown(rows: list[DecodingRow]) -> str:
    lines = [
        "| variant | batch | records/s | tokens/s | NFE/record | parse_rate | schema_valid |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.variant} | {r.batch_size} | {r.records_per_s:.2f} | {r.tokens_per_s:.0f} | {r.nfe_per_record:.1f} "
            f"| {r.parse_rate:.3f} | {r.schema_valid:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cache-dir", default=os.environ.get("BENCH_CACHE_DIR", str(Path.home() / ".cache" / "aod-bench"))
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args(argv)

    import torch

    from bench.tasks import load_task
    from systems.backends.mdlm import EmbeddedMDLMBackend

    torch.set_num_threads(args.threads)
    spec = load_task(args.task, n_references=None, n_holdout=None)
    env = SimpleNamespace(cache_dir=Path(args.cache_dir), task=spec, seed=0)
    backend = EmbeddedMDLMBackend.from_spec({"params": {}}, env)
    rows = run_decoding_benchmark(backend, spec, args.n, args.seed)
    claim = threshold_claim(rows)
    print(
        f"task {args.task}, n={args.n}, response length {backend.response_length}, torch threads {args.threads}"
    )
    print(markdown(rows))
    print(
        f"threshold decoding: NFE cut {claim['nfe_cut']}x, parse_rate gap {claim['parse_gap']} -> {'holds' if claim['holds'] else 'FAILS'}"
    )
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps({"rows": [asdict(r) for r in rows], "claim": claim}, indent=1)
        )
    return 0 if claim["holds"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
