"""Declared coverage and compile time of the two `ar-grammar` compilers on every JSONSchemaBench schema.

No model is needed: each schema of each split is compiled as `ar-grammar` would compile it on a per-item
task (systems.item_grammar.compile_item, with llama.cpp's GBNF parser, on SmolLM2's vocabulary, as the
final check). The result is
each engine's declared coverage per split over all schemas in the data dir, beside the paper's. Run:

    BENCH_DATA_DIR=/work/shared/datasets python -m benchmarks.jsonschemabench.declared [--limit N] [--out F]
        [--sentences K]

With `--sentences K`, K random sentences are drawn from each grammar our compiler declared and judged
against the original schema (Draft 2020-12 with formats, metrics.structure): a soundness probe on real
schemas, reported as `sentences` / `unsound_sentences` per split.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter
from pathlib import Path

from bench.tasks.datadir import resolve_data_dir
from bench.tasks.jsonschemabench import JSONSCHEMABENCH
from bench.tasks.loading import load_task
from systems.ar_grammar import ARGrammarSystem
from systems.backends.llama_cpp import LlamaCppBackend
from systems.item_grammar import compile_item, llama_vocab

ENGINES = {
    "ar-grammar": {"temperature": 0.0, "k_shots": 0, "max_tokens": 192},
    "ar-grammar-llama-cpp": {"temperature": 0.0, "k_shots": 0, "max_tokens": 192, "grammar": "llama_cpp"},
}


def refusal_kind(reason: str) -> str:
    """A refusal without its schema path, so refusals can be counted by cause."""
    kind = re.sub(r" at \S+", "", reason)
    kind = re.sub(r"'[^']*'", "'…'", kind)
    return kind[:120]


def probe(spec, outcomes, k: int) -> tuple[int, list[str]]:  # noqa: ANN001
    """Draw `k` sentences from every declared grammar and judge them against the item's own schema."""
    from metrics.structure import validator_for
    from systems.backends.grammar import build_grammar
    from systems.backends.grammar.sample import sentences

    drawn, unsound = 0, []
    for i, c in enumerate(outcomes):
        if c.params is None:
            continue
        item = spec.for_sample(i)
        judge = validator_for(item.schema)
        for text in sentences(build_grammar(c.params.json_schema), k, seed=i):
            drawn += 1
            if not judge.is_valid(json.loads(text)):
                unsound.append(f"{item.meta['item_id']}: {text[:120]}")
    return drawn, unsound


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=None, help="schemas per split (default: all)")
    ap.add_argument("--out", default=str(Path(__file__).with_name("declared.json")))
    ap.add_argument("--sentences", type=int, default=0, help="sentences drawn per declared grammar (ours)")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(10_000)
    results: dict = {}
    vocab = llama_vocab(
        LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct"})
    )  # llama.cpp's GBNF parse
    for split in JSONSCHEMABENCH.variants(resolve_data_dir(None)):
        opts = {"limit": args.limit} if args.limit else {}
        spec = load_task(f"jsonschemabench/{split}", n_references=None, n_holdout=None, options=opts)
        results[split] = {}
        for name, params in ENGINES.items():
            system = ARGrammarSystem(params)
            outcomes = [
                compile_item(system, spec.for_sample(i), None, system.params.grammar, llama=True, vocab=vocab)
                for i in range(len(spec.items))
            ]
            declared = [c.params is not None for c in outcomes]
            reasons = Counter(refusal_kind(c.reason or "") for c in outcomes if c.params is None)
            results[split][name] = {
                "n": len(outcomes),
                "declared": sum(declared),
                "declared_coverage": sum(declared) / len(outcomes),
                "compile_seconds_median": statistics.median(c.seconds for c in outcomes),
                "refusals": dict(reasons.most_common()),
            }
            if args.sentences and params.get("grammar") != "llama_cpp":
                drawn, unsound = probe(spec, outcomes, args.sentences)
                results[split][name].update(sentences=drawn, unsound_sentences=unsound)
            print(split, name, results[split][name]["declared"], "/", len(outcomes), flush=True)
    Path(args.out).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
