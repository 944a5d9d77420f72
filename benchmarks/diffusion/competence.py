"""Is plain `llada` competent on a family? Parse rate and schema validity of the embedded DLM's records.

    python -m benchmarks.diffusion.competence --task truthfulqa [--n-references 32] [--n-holdout 32] [--seeds 3] [--n 16]
        [--params '{"train_steps": 1800, "threads": 2}'] [--systems '[{}, {"threshold": 0.9}]']
        [--json out.json]

Trains (or loads from $BENCH_CACHE_DIR) the embedded DLM on the task's references with the given
MDLMParams, then for each `llada` params dict in `--systems` generates `--n` records for each of seeds
0..S-1 and reports parse_rate (`metrics.extract`) and schema_valid (jsonschema, the task's schema), the
mean record length in characters against the references' median (parse and valid rates per seed too,
and with several systems paired tests of each against the first), the share of distinct texts, the
share of records that are a training reference verbatim (a model that memorised its references can meet
the bar by copying them, which a synthetic-data generator must not be credited for), the generation
seconds, and where the first EOS fell: the share of records that end within the first quarter of the
response window (the EOS cascade of systems/backends/mdlm/length.py). `--trace` prints, per denoising
step, the EOS and content tokens committed, the leftmost EOS, and the content tokens that pass committed
most. The issue's bar is parse_rate >= 0.9 and schema_valid >= 0.8, read with the verbatim share.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from types import SimpleNamespace
from typing import Any

import jsonschema

from bench.context import default_cache_dir
from bench.tasks import load_task
from benchmarks.diffusion.steering import _OneBackend
from metrics.extract import extract_record
from metrics.records import canonical
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.llada import LLaDASystem


def reference_chars(be: Any, spec: Any) -> tuple[float, float]:
    """(median characters of a reference's JSON, the response window in characters): the window's tokens
    times the references' characters per token under the model's tokenizer."""
    texts = [json.dumps(r, ensure_ascii=False) for r in spec.references]
    per_tok = statistics.fmean(len(t) / max(1, len(be.tok.encode(t))) for t in texts)
    return statistics.median(len(t) for t in texts), be.response_length * per_tok


def measure(spec: Any, ctx: Any, system: dict, n: int, seeds: int, window_chars: float) -> dict:
    """parse / valid / length / copies of `n` x `seeds` `llada` records with `system` params."""
    validator = jsonschema.Draft202012Validator(spec.schema)
    trained_on = {canonical(r) for r in spec.references}  # key order and spacing do not make a record new
    parsed = valid = short = copied = 0
    lengths: list[int] = []
    texts: list[str] = []
    examples: list[str] = []
    per_seed: list[dict[str, float]] = []
    t0 = time.perf_counter()
    for seed in range(seeds):
        parsed_before, valid_before = parsed, valid
        for s in LLaDASystem(system).generate(spec, n, seed, ctx).samples:
            rec = extract_record(s.text).record
            lengths.append(len(s.text))
            texts.append(s.text)
            short += len(s.text) < window_chars / 4
            if isinstance(rec, dict):
                parsed += 1
                valid += validator.is_valid(rec)
                copied += canonical(rec) in trained_on
            elif len(examples) < 2:
                examples.append(s.text[:240])
        per_seed.append(
            {"parse_rate": (parsed - parsed_before) / n, "schema_valid": (valid - valid_before) / n}
        )
    k = n * seeds
    return {
        "system": system,
        "per_seed": per_seed,
        "parse_rate": parsed / k,
        "schema_valid": valid / k,
        "mean_chars": statistics.fmean(lengths),
        "ended_in_first_quarter": short / k,
        "distinct": len(set(texts)) / k,
        "copied": copied / k,
        "seconds": round(time.perf_counter() - t0, 1),
        "failed_examples": examples,
        "texts": texts,
    }


def eos_trace(be: Any, spec: Any, ctx: Any, system: dict, n: int) -> list[dict]:
    """Per denoising step (seed 0, `n` records): mean EOS and content tokens committed before the step
    and the mean leftmost EOS position. The backend's natural hook is wrapped to record the canvas at
    every pass; `length_first` decoding runs through that hook too (length.LengthFirst wraps it)."""
    import torch

    eos, mask = be.tok.eos_id, be.tok.mask_id
    canvases: list[Any] = []
    natural = be._natural_hook

    def recording(p: int) -> Any:
        inner = natural(p)

        def hook(logits: Any, x: Any) -> Any:
            canvases.append(x[:, p:].clone())
            return inner(logits, x)

        return hook

    be._natural_hook = recording
    try:
        LLaDASystem(system).generate(spec, n, 0, ctx)
    finally:
        be._natural_hook = natural
    rows = []
    for step, x in enumerate(canvases):
        has = (x == eos).any(dim=1)
        left = torch.where(
            has, (x == eos).float().argmax(dim=1), torch.full_like(has, x.shape[1], dtype=torch.long)
        )
        rows.append(
            {
                "step": step,
                "eos": float((x == eos).sum(dim=1).float().mean()),
                "content": float(((x != eos) & (x != mask)).sum(dim=1).float().mean()),
                "leftmost_eos": float(left.float().mean()),
                "new_content": new_content(be.tok, canvases[step - 1], x) if step else [],
            }
        )
    return rows


def new_content(tok: Any, before: Any, after: Any, top: int = 3) -> list[tuple[str, int, float]]:
    """The content tokens (not EOS) a pass committed, most frequent first: (text, records, mean position).

    Which content a sampler commits first, on a nearly masked canvas, decides which record it writes:
    a memorised model's first content commit picks the reference (docs/systems-diffusion.md)."""
    fresh = (before == tok.mask_id) & (after != tok.mask_id) & (after != tok.eos_id)
    seen: dict[str, list[int]] = {}
    for b, i in fresh.nonzero().tolist():
        seen.setdefault(tok.token_text(int(after[b, i])), []).append(i)
    ranked = sorted(seen.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:top]
    return [(text, len(pos), sum(pos) / len(pos)) for text, pos in ranked]


def paired_table(rows: list[dict]) -> str:
    """Each system's per-seed parse and valid rates against the first system's (paired t and Wilcoxon
    over seeds, `bench.stats.paired_test`): the seeds share prompts and few-shot draws, so they pair."""
    from bench.stats import paired_test

    out = [
        "",
        "| llada params | metric | B − A (A: the first row) | p(t) | p(W) |",
        "|---|---|---:|---:|---:|",
    ]
    base = rows[0]["per_seed"]
    for r in rows[1:]:
        for m in ("parse_rate", "schema_valid"):
            t = paired_test([s[m] for s in base], [s[m] for s in r["per_seed"]])
            out.append(
                f"| `{json.dumps(r['system'])}` | {m} | {t.mean_diff:+.3f} | {t.p_ttest:.3g} | {t.p_wilcoxon:.3g} |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="truthfulqa")
    ap.add_argument("--n-references", type=int, default=32, help="Table 1's size; 0 = all")
    ap.add_argument("--n-holdout", type=int, default=32, help="records kept out of training")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (default: the catalog defaults)")
    ap.add_argument("--systems", default="[{}]", help="JSON list of llada params dicts")
    ap.add_argument("--trace", action="store_true", help="also print the EOS trace of the first system")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    spec = load_task(a.task, n_references=a.n_references or None, n_holdout=a.n_holdout)
    cache = default_cache_dir()
    t0 = time.perf_counter()
    be = EmbeddedMDLMBackend.from_spec(
        {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
    )
    ref_chars, window_chars = reference_chars(be, spec)
    loss = [(r["step"], r["loss"]) for r in be.train_log]
    print(
        f"## {a.task} ({len(spec.references)} references, median {ref_chars:.0f} chars): model ready in "
        f"{time.perf_counter() - t0:.0f}s, trained in {be.train_seconds:.0f}s; window {be.response_length} "
        f"tokens; loss {loss[0][1] if loss else '?'} -> {loss[-1][1] if loss else '?'}",
        flush=True,
    )
    ctx = _OneBackend(be, cache)
    print(
        "| llada params | parse_rate | schema_valid | mean chars | ended in first quarter | distinct "
        "| a reference verbatim | s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    # the trace first: a later identical request may be answered without a pass through the model
    trace = eos_trace(be, spec, ctx, json.loads(a.systems)[0], a.n) if a.trace else []
    rows = []
    for system in json.loads(a.systems):
        r = measure(spec, ctx, system, a.n, a.seeds, window_chars)
        rows.append(r)
        print(
            f"| `{json.dumps(system)}` | {r['parse_rate']:.3f} | {r['schema_valid']:.3f} "
            f"| {r['mean_chars']:.0f} | {r['ended_in_first_quarter']:.2f} | {r['distinct']:.2f} "
            f"| {r['copied']:.2f} | {r['seconds']:.0f} |",
            flush=True,
        )
    if len(rows) > 1 and a.seeds > 1:
        print(paired_table(rows))
    if trace:
        print(
            "\n| step | EOS committed | content committed | leftmost EOS (token) "
            "| content this pass committed most (token: times, mean position) |\n|---:|---:|---:|---:|---|"
        )
        for t in trace:
            fresh = ", ".join(f"`{txt!r}`: {k}, {pos:.0f}" for txt, k, pos in t["new_content"])
            print(
                f"| {t['step']} | {t['eos']:.1f} | {t['content']:.1f} | {t['leftmost_eos']:.0f} | {fresh} |"
            )
    if a.json:
        for r in rows:
            r.pop("texts")
        out = {"task": a.task, "params": json.loads(a.params), "train_seconds": be.train_seconds}
        with open(a.json, "w") as fh:
            json.dump({**out, "rows": rows, "trace": trace}, fh, indent=1)


if __name__ == "__main__":
    main()
