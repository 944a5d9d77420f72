"""How often the optimizer agent's reply is unusable and AoD falls back to a template edit.

One real assessment of the initial prompt (embedded DLM batch, SmolLM2 judge, the evaluator's
sentences) is the feedback; the optimizer agent (SmolLM2-135M) is then asked for every edit kind it
writes (add_note, set_hint, vary_hint, rewrite_instruction; replace_note on a prompt with one note),
once per seed, with and without grammar-constrained replies. Reported: fallback rate per mode and kind,
and the fallback reasons. The loop's own traces record the same thing per edit (`edit_source`).

Usage: python -m benchmarks.aod.fallbacks [--task multiwoz/train] [--seeds 10] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

KINDS = ("add_note", "replace_note", "set_hint", "vary_hint", "rewrite_instruction")


def run(task: str, seeds: int, cache_dir: Path) -> dict:
    from bench.cache import CallCache
    from bench.context import BenchContext
    from bench.profiles import resolve_profile
    from bench.tasks import load_task
    from systems.optimizers.aod import AoDConfig, AoDOptimizer
    from systems.optimizers.base import (
        Agent,
        Budget,
        DiffusionPromptGenerator,
        MeteredGenerator,
        copy_prompt,
        derived_rng,
        evaluation_view,
    )
    from systems.optimizers.evaluator import NaturalLanguageEvaluator
    from systems.optimizers.judge import Judge

    spec = load_task(task, n_references=64, n_holdout=32)
    ctx = BenchContext(resolve_profile("embedded"), cache_dir, CallCache(cache_dir / "calls.sqlite"))
    gen = DiffusionPromptGenerator({"k_shots": 0})
    base = AoDOptimizer(AoDConfig(judge_limit=2, with_perplexity=False))
    view = evaluation_view(spec)
    meter = MeteredGenerator(gen, Budget(4, 4), spec, 0, ctx)
    judge = Judge(Agent(ctx, "judge", 0, 0.2, 6), base.questions(spec))
    prompt = gen.initial_prompt(spec)
    first = base.assess(
        prompt,
        meter.evaluate(prompt, meter.round_seed(1)),
        view,
        judge,
        NaturalLanguageEvaluator(True, False),
        ctx,
        None,
    )
    with_note = copy_prompt(prompt)
    with_note.notes = ["Fill every field with a realistic, specific value."]
    out: dict = {"task": task, "seeds": seeds, "feedback": first.sentences, "modes": {}}
    for constrained in (True, False):
        opt = AoDOptimizer(AoDConfig(judge_limit=2, with_perplexity=False, constrained=constrained))
        sources: Counter[str] = Counter()
        per_kind: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
        reasons: Counter[str] = Counter()
        examples: dict[str, list[str]] = {k: [] for k in KINDS}
        for seed in range(seeds):
            agent = Agent(ctx, "optimizer", seed, 0.7, 48)
            rng = derived_rng(seed, "fallback-benchmark")
            for kind in KINDS:
                best = first
                if kind == "replace_note":
                    best = type(first)(**{**first.__dict__, "prompt": with_note})
                _, info = opt.propose(kind, spec, best, [], agent, rng, prompt.instruction)
                src = info["edit_source"]
                sources[src] += 1
                per_kind[kind][src] += 1
                if src != "agent":
                    reasons[str(info.get("fallback_reason"))[:80]] += 1
                elif len(examples[kind]) < 3:
                    examples[kind].append(str(info.get("agent_reply"))[:160])
        n = sum(sources.values())
        out["modes"]["constrained" if constrained else "free"] = {
            "edits": n,
            "fallback_rate": (n - sources["agent"]) / n,
            "sources": dict(sources),
            "per_kind": {k: dict(v) for k, v in per_kind.items()},
            "reasons": dict(reasons.most_common(8)),
            "agent_examples": examples,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--cache-dir", default=os.environ.get("BENCH_CACHE_DIR", str(Path.home() / ".cache" / "aod-bench"))
    )
    a = ap.parse_args(argv)
    result = run(a.task, a.seeds, Path(a.cache_dir))
    text = json.dumps(result, indent=2)
    if a.json:
        Path(a.json).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
