"""False acceptance of AoD's acceptance rule: how often a do-nothing edit is kept, on the real loop.

The loop runs with its edit source replaced by do-nothing edits (`edit_mode`):
  * `noop-resample`: the candidate is the incumbent prompt itself on independent sampler noise, the
    exact null (truth known: the two prompts are the same);
  * `noop-note`: the candidate adds a note that asks for nothing ("This line is only a separator."),
    paired with the incumbent on the same fresh seed: the do-nothing note of issue 10.
Every round is one trial; a round whose candidate got a second look (acceptance.AOD_SECOND_ALPHA) is
one trial decided by the pooled test. Reported per mode: trials, accepted by the swap test (the rule in
use: the randomized p-value), accepted by its plain p-value (`swap-conservative`, from the same
trials), second looks, and accepted by the plain rule "paired reward is higher" (what a test-free loop
would keep), with Wilson 95% intervals. Everything else is the real thing: embedded DLM generator,
SmolLM2 judge, MiniLM similarity.

Usage: python -m benchmarks.aod.false_acceptance [--task multiwoz/train] [--seeds 10] [--budget 32]
         [--judge-limit 1] [--dlm-params '{"train_steps": 1800, "threshold": 0.9}'] [--second-alpha A]
         [--modes noop-resample,noop-note] [--jsonl OUT] [--cache-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n."""
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def run(
    task: str,
    seeds: int,
    budget: int,
    batch: int,
    modes: list[str],
    out: Path,
    cache_dir: Path,
    judge_limit: int = 1,
    seed_start: int = 0,
    dlm_params: dict | None = None,
    second_alpha: float | None = None,
) -> dict:
    from bench.cache import CallCache
    from bench.context import BenchContext
    from bench.profiles import apply_overrides, resolve_profile
    from bench.tasks import load_task
    from systems.optimizers.acceptance import AOD_SECOND_ALPHA
    from systems.optimizers.aod import AoDConfig, AoDOptimizer
    from systems.optimizers.base import Budget, DiffusionPromptGenerator

    second_alpha = AOD_SECOND_ALPHA if second_alpha is None else second_alpha

    spec = load_task(task, n_references=64, n_holdout=32)
    profile = resolve_profile("embedded")
    if dlm_params:  # another embedded DLM (suites/aod_sequential.yaml's: train_steps 1800, threshold 0.9)
        dlm = {"backend": "mdlm", "model": "embedded-mdlm", "per_task": True, "params": dlm_params}
        profile = apply_overrides(profile, {"dlm": "false-acceptance-dlm"}, {"false-acceptance-dlm": dlm})
    ctx = BenchContext(profile, cache_dir, CallCache(cache_dir / "calls.sqlite"))
    generator = DiffusionPromptGenerator({"k_shots": 0})
    trials_by_mode: dict[str, list[dict]] = {m: [] for m in modes}
    with out.open("a") as fh:
        for seed in range(
            seed_start, seed_start + seeds
        ):  # seeds outside, modes inside: a cut-short run stays balanced
            for mode in modes:
                cfg = AoDConfig(
                    judge_limit=judge_limit,
                    with_perplexity=False,
                    edit_mode=mode,  # type: ignore[arg-type]
                    second_alpha=second_alpha,
                )
                trials = trials_by_mode[mode]
                t0 = time.perf_counter()
                result = AoDOptimizer(cfg).optimize(generator, spec, seed, ctx, Budget(budget, batch))
                for e in result.trace:
                    if e.get("role") == "candidate":
                        first = e.get("first_look")
                        row = {
                            "mode": mode,
                            "seed": seed,
                            "round": e["round"],
                            "difference": e["paired_difference"],
                            "p_value": e["p_value"],
                            "p_randomized": e.get("p_randomized"),
                            "accepted": e["accepted"],
                            # what the plain p-value (`swap-conservative`) would have kept, at each look
                            "accepted_plain": accepted_plain(e, cfg.alpha, cfg.second_alpha, cfg.min_gain),
                            "second_look": first is not None,
                            "first_look": first,
                            "second_alpha": cfg.second_alpha,
                            "min_gain": cfg.min_gain,
                            "dlm_params": dlm_params or {},
                            "greater": e["greater"],
                        }
                        trials.append(row)
                        fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(f"{mode} seed {seed}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return summarize(trials_by_mode, seeds)


def accepted_plain(event: dict, alpha: float, second_alpha: float, min_gain: float) -> bool:
    """Whether the plain p-value (`swap-conservative`) would have kept a trial's candidate: at the first
    look at alpha - second_alpha, or, where the trial had a second look, at the pooled look at
    second_alpha (the gate is read off the randomized p, as the loop did)."""
    first = event.get("first_look")
    if first is None:
        return event["p_value"] <= alpha - second_alpha and event["paired_difference"] > min_gain
    return (first["p_value"] <= alpha - second_alpha and first["paired_difference"] > min_gain) or (
        event["p_value"] <= second_alpha and event["paired_difference"] > min_gain
    )


def summarize(trials_by_mode: dict[str, list[dict]], seeds: int) -> dict:
    """Acceptance counts and Wilson intervals per mode (also usable on a saved JSONL)."""
    summary: dict = {}
    for mode, trials in trials_by_mode.items():
        n = len(trials)
        acc = sum(t["accepted"] for t in trials)
        gre = sum(t["greater"] for t in trials)
        summary[mode] = {
            "trials": n,
            "seeds": len({t["seed"] for t in trials}) or seeds,
            "accepted": acc,
            "rate": acc / n if n else math.nan,
            "rate_ci95": wilson(acc, n),
            "accepted_plain": sum(bool(t.get("accepted_plain")) for t in trials),
            "second_looks": sum(bool(t.get("second_look")) for t in trials),
            "greater": gre,
            "greater_rate": gre / n if n else math.nan,
            "greater_ci95": wilson(gre, n),
            "ties": sum(t["difference"] == 0 for t in trials),
            "min_p": min((t["p_value"] for t in trials), default=math.nan),
        }
    return summary


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--budget", type=int, default=32)
    ap.add_argument("--judge-limit", type=int, default=1)
    ap.add_argument("--seed-start", type=int, default=0, help="first seed (split a run over processes)")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--modes", default="noop-resample,noop-note")
    ap.add_argument("--jsonl", default="false_acceptance.jsonl")
    ap.add_argument(
        "--cache-dir", default=os.environ.get("BENCH_CACHE_DIR", str(Path.home() / ".cache" / "aod-bench"))
    )
    ap.add_argument("--summarize", default="", help="only summarize this saved JSONL")
    ap.add_argument("--dlm-params", default="", help="MDLMParams JSON for the DLM (default: the catalog's)")
    ap.add_argument(
        "--second-alpha",
        type=float,
        default=None,
        help="level of the second look (default: AoD's, acceptance.AOD_SECOND_ALPHA; 0: one look)",
    )
    a = ap.parse_args(argv)
    if a.summarize:
        rows = [json.loads(x) for x in Path(a.summarize).read_text().splitlines() if x.strip()]
        by_mode: dict[str, list[dict]] = {}
        for r in rows:
            by_mode.setdefault(r["mode"], []).append(r)
        print(json.dumps(summarize(by_mode, a.seeds), indent=2))
        return
    summary = run(
        a.task,
        a.seeds,
        a.budget,
        a.batch_size,
        a.modes.split(","),
        Path(a.jsonl),
        Path(a.cache_dir),
        a.judge_limit,
        a.seed_start,
        json.loads(a.dlm_params) if a.dlm_params else None,
        a.second_alpha,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
