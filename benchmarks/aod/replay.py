"""What is an optimized prompt worth, measured without the final batch's noise? A run's prompts, replayed.

    python -m benchmarks.aod.replay suite RUN_DIR --out /tmp/replay.yaml [--seeds 1000,1001,1002,1003]
        [--samples 32] [--candidates 2]
    bench run /tmp/replay.yaml --out runs/replay --workers 2
    python -m benchmarks.aod.replay analyze runs/replay --source RUN_DIR [--md out.md] [--json out.json]

Why: an AoD cell is scored on its final n samples (8 in suites/aod_rl*.yaml), and the `tsr` of 8
records has a binomial standard deviation of up to 0.18, as large as the differences the RL ablation
looks for (docs/systems-aod.md, "A policy learned across cells"). The prompt a search kept is a
deterministic object, so it can be scored again on fresh seeds and more samples by plain `llada` (the
steering contract carries every part of it: instruction, notes, hints, pools). That separates what the
search found from the luck of its final batch.

`suite` reads the run (its manifest holds the suite) and writes a suite of plain `llada` systems on the
run's DLM presets and task:
- one per prompt-optimization cell, `<system>-s<seed>`: the prompt the cell kept, from its `final`
  event (`prompt_params`, recorded since 2026-12-04), or rebuilt from the cell's kept edits for older
  runs (checked against the final event's text);
- every plain `llada` system of the run, unchanged (the reference on the same replay seeds);
- with `--candidates K`: for each AoD-family cell, the K rejected candidates the loop saw as best (the
  largest paired reward difference among the rounds after the cell's first kept edit) and the
  incumbent each was tested against, named `c-<hash>` by their params. These answer whether the
  acceptance test turned down edits that were in fact better.

`analyze` scores the replay run against the source run:
- per source system, the replayed metric (mean over replay seeds) against the cell's own 8-record value;
- paired tests over source seeds (t and Wilcoxon, `bench.stats.paired_test`) of every pair of source
  systems and of each against the plain reference, on the replayed values;
- for the candidates: each candidate's replayed gain over its incumbent, next to the loop's paired
  difference and p-value.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from bench.hashing import stable_hash
from benchmarks.aod.comparison import finished_cells
from reports.fmt import fmt_num, fmt_p

_f = partial(fmt_num, decimals=3, sign=True, missing="-")
_v = partial(fmt_num, decimals=3, missing="-")
_p = partial(fmt_p, spec=".3g", missing="-")

METRICS = ("tsr", "diversity", "field_overlap", "novelty")
DEFAULT_SEEDS = (1000, 1001, 1002, 1003)


def _manifest_suite(run: Path) -> dict[str, Any]:
    return json.loads((run / "manifest.json").read_text())["suite"]


def _task_entry(suite: dict[str, Any], task: str | None) -> dict[str, Any]:
    tasks = [t if isinstance(t, dict) else {"name": t} for t in suite["tasks"]]
    if task is None:
        if len(tasks) != 1:
            raise SystemExit(f"the run has {len(tasks)} tasks; name one with --task")
        return tasks[0]
    for t in tasks:
        if t["name"] == task:
            return t
    raise SystemExit(f"task {task!r} is not in the run's suite")


def load_spec(run: Path, task: dict[str, Any]) -> Any:
    """The task as the run loaded it (its data dir if it still exists, else $BENCH_DATA_DIR)."""
    from bench.tasks import load_task

    data_dir = json.loads((run / "manifest.json").read_text()).get("data_dir")
    if not data_dir or not Path(data_dir).exists():
        data_dir = os.environ.get("BENCH_DATA_DIR")
    return load_task(
        task["name"],
        n_references=task.get("n_references"),
        n_holdout=task.get("n_holdout"),
        split_seed=task.get("split_seed", 0),
        data_dir=data_dir,
        options=task.get("options") or None,
    )


def _edit(data: dict[str, Any]) -> Any:
    from systems.optimizers.edits import PromptEdit

    tuples = {"values": tuple(data.get("values", ())), "fields": tuple(data.get("fields", ()))}
    rows = tuple(tuple(r) for r in data.get("rows", ()))
    return PromptEdit(**{**data, **tuples, "rows": rows})


def rebuild_rounds(
    trace: list[dict[str, Any]], spec: Any, generator_params: dict[str, Any]
) -> list[dict[str, Any]]:
    """Round by round, the incumbent and candidate prompts of an AoD-family trace, rebuilt by applying its
    kept edits in order to the generator's initial prompt; each candidate checked against the trace's text."""
    from systems.optimizers.base import make_generator, template_text
    from systems.optimizers.edits import apply_edit

    incumbent = make_generator("llada", generator_params).initial_prompt(spec)
    out: list[dict[str, Any]] = []
    for ev in trace:
        if ev.get("event") != "aod_iteration" or ev.get("role") != "candidate":
            continue
        edit = _edit(ev["edit"]) if ev.get("edit") else None
        candidate = apply_edit(incumbent, edit) if edit else incumbent
        if template_text(candidate) != ev["prompt"]:
            raise ValueError(f"round {ev['round']}'s candidate does not rebuild from the kept edits")
        out.append({"round": ev["round"], "event": ev, "incumbent": incumbent, "candidate": candidate})
        if ev.get("accepted"):
            incumbent = candidate
    return out


def kept_params(
    trace: list[dict[str, Any]],
    spec: Any,
    generator_params: dict[str, Any],
    rounds: list[dict[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """The `llada` params of the prompt a trace's search kept: its `final` event's `prompt_params`, else
    rebuilt from the kept edits and checked against the final event's text. None for a trace that is
    not a `llada`-steering prompt optimization, or an older one of a family with nothing to rebuild from.
    `rounds`: the trace's `rebuild_rounds`, when the caller has them already."""
    from systems.optimizers.base import make_generator, steer_params, template_text

    finals = [ev for ev in trace if ev.get("event") == "final"]
    if not finals or finals[-1].get("generator") != "llada":
        return None
    final = finals[-1]
    if "prompt_params" in final:
        return final["prompt_params"]
    if rounds is None:
        rounds = rebuild_rounds(trace, spec, generator_params)
    if rounds:
        last = rounds[-1]
        prompt = last["candidate"] if last["event"].get("accepted") else last["incumbent"]
    else:
        prompt = make_generator("llada", generator_params).initial_prompt(spec)
    if template_text(prompt) != final["prompt"]:
        if not rounds:  # an older run of another family (PromptBreeder, EvoPrompt): nothing to rebuild from
            return None
        raise ValueError("the kept edits do not rebuild the final prompt")
    return steer_params(prompt)


def _trace(cell: Path) -> list[dict[str, Any]]:
    path = cell / "trace.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line] if path.exists() else []


def candidate_name(params: dict[str, Any]) -> str:
    return f"c-{stable_hash(params, 10)}"


def best_rejected(rounds: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The k rejected candidates with the largest paired difference, among rounds after the first kept edit."""
    kept = [r["round"] for r in rounds if r["event"].get("accepted")]
    if not kept:
        return []
    later = [
        r
        for r in rounds
        if r["round"] > kept[0] and not r["event"].get("accepted") and r["event"].get("edit")
    ]
    later.sort(key=lambda r: (-float(r["event"].get("paired_difference") or -math.inf), r["round"]))
    return later[:k]


def replay_plan(
    run: Path, task: str | None = None, candidates: int = 0
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(source suite, task entry, replay systems by name, candidate rows) of a run's prompts."""
    from systems.optimizers.base import steer_params

    suite = _manifest_suite(run)
    entry = _task_entry(suite, task)
    spec = load_spec(run, entry)
    systems: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    for name, sys_cfg in suite["systems"].items():
        if sys_cfg["type"] == "llada" and not sys_cfg.get("params"):
            systems[name] = {"type": "llada", "models": sys_cfg.get("models", {})}
    for (system, cell_task, seed), cell in sorted(finished_cells(run).items()):
        sys_cfg = suite["systems"].get(system)
        if cell_task != entry["name"] or sys_cfg is None or sys_cfg["type"] == "llada":
            continue
        gen_params = dict((sys_cfg.get("params") or {}).get("generator_params") or {})
        trace = _trace(cell)
        with_candidates = bool(candidates) and sys_cfg["type"].startswith("aod")
        try:  # the rounds are rebuilt once, and only where they are needed
            rounds = rebuild_rounds(trace, spec, gen_params) if with_candidates else None
            params = kept_params(trace, spec, gen_params, rounds)
        except ValueError as e:
            raise ValueError(f"{cell}: {e}") from None
        if params is None:
            print(f"skipped {cell}: no llada prompt to replay (a final event without prompt_params)")
            continue
        models = sys_cfg.get("models", {})
        systems[f"{system}-s{seed}"] = {"type": "llada", "models": models, "params": {**gen_params, **params}}
        if rounds:
            for r in best_rejected(rounds, candidates):
                pair = {}
                for role in ("incumbent", "candidate"):
                    p = {**gen_params, **steer_params(r[role])}
                    pair[role] = candidate_name(p)
                    systems.setdefault(pair[role], {"type": "llada", "models": models, "params": p})
                ev = r["event"]
                rows.append(
                    {
                        "system": system,
                        "seed": seed,
                        "round": r["round"],
                        "kind": ev.get("edit_kind") or ev["edit"]["kind"],
                        "paired_difference": ev.get("paired_difference"),
                        "p_value": ev.get("p_randomized", ev.get("p_value")),
                        **pair,
                    }
                )
    return suite, entry, systems, rows


def replay_suite(
    run: Path,
    seeds: list[int],
    samples: int,
    task: str | None = None,
    candidates: int = 0,
) -> dict[str, Any]:
    suite, entry, systems, rows = replay_plan(run, task, candidates)
    if not any(s.get("params") for s in systems.values()):
        raise SystemExit("the run has no finished prompt-optimization cell that steers llada")
    used = {m for s in systems.values() for m in s.get("models", {}).values()}
    return {
        "name": f"{suite['name']}-replay",
        "description": f"the prompts of run {run.name} replayed by plain llada on seeds {seeds}"
        + (f" ({len(rows)} rejected candidates and their incumbents)" if rows else ""),
        "profile": suite.get("profile", "embedded"),
        "seeds": list(seeds),
        "samples": samples,
        "models": {k: v for k, v in (suite.get("models") or {}).items() if k in used},
        "tasks": [entry],
        "systems": systems,
        "metrics": [m for m in suite["metrics"] if m not in ("tsr_judge", "perplexity")],
    }


# ------------------------------------------------------------------------------------------ analyze
def replay_means(replay: Path, task: str, metric: str) -> dict[str, float]:
    """Per replay system, the metric's mean over the seeds it finished."""
    from reports.aggregate import load_run

    frame = load_run(replay)
    ok = frame[(frame["status"] == "ok") & (frame["task"] == task) & (frame["metric"] == metric)]
    return {str(k): float(v) for k, v in ok.groupby("system")["value"].mean().items()}


def source_values(source: Path, task: str, metric: str) -> dict[tuple[str, int], float]:
    from reports.aggregate import load_run

    frame = load_run(source)
    ok = frame[(frame["status"] == "ok") & (frame["task"] == task) & (frame["metric"] == metric)]
    return {(str(r.system), int(r.seed)): float(r.value) for r in ok.itertuples()}


def analyze(replay: Path, source: Path, metric: str, candidates: int = 0) -> dict[str, Any]:
    from bench.stats import paired_test

    suite = _manifest_suite(replay)
    task = _task_entry(suite, None)["name"]
    means = replay_means(replay, task, metric)
    own = source_values(source, task, metric)
    by_system: dict[str, dict[int, float]] = {}
    for name, value in means.items():
        if "-s" in name and name.rsplit("-s", 1)[1].isdigit():
            system, seed = name.rsplit("-s", 1)
            by_system.setdefault(system, {})[int(seed)] = value
    references = [n for n, s in suite["systems"].items() if not s.get("params") and n in means]
    systems = []
    for system, values in sorted(by_system.items()):
        seeds = sorted(values)
        replayed = [values[s] for s in seeds]
        cell = [own.get((system, s), math.nan) for s in seeds]
        systems.append(
            {
                "system": system,
                "seeds": seeds,
                "replayed": replayed,
                "own": cell,
                "replayed_mean": sum(replayed) / len(replayed),
                "own_mean": _nanmean(cell),
            }
        )
    tests = []
    for ref in references:
        for row in systems:
            diffs = [v - means[ref] for v in row["replayed"]]
            t = paired_test([0.0] * len(diffs), diffs)
            tests.append({"a": ref, "b": row["system"], **t.to_json()})
    for i, a in enumerate(systems):
        for b in systems[i + 1 :]:
            common = sorted(set(a["seeds"]) & set(b["seeds"]))
            va = dict(zip(a["seeds"], a["replayed"], strict=True))
            vb = dict(zip(b["seeds"], b["replayed"], strict=True))
            t = paired_test([va[s] for s in common], [vb[s] for s in common])
            tests.append({"a": a["system"], "b": b["system"], **t.to_json()})
    rows = []
    if candidates:
        _, _, _, plan = replay_plan(source, task, candidates)
        for r in plan:
            inc, cand = means.get(r["incumbent"]), means.get(r["candidate"])
            gain = None if inc is None or cand is None else cand - inc
            rows.append({**r, "incumbent_value": inc, "candidate_value": cand, "replayed_gain": gain})
    return {
        "metric": metric,
        "task": task,
        "candidate_summary": candidate_summary(rows),
        "replay_seeds": suite["seeds"],
        "samples": suite["samples"],
        "references": {r: means[r] for r in references},
        "systems": systems,
        "tests": tests,
        "candidates": rows,
    }


def candidate_summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over the replayed candidates: mean and median gain, how many gain or lose more than 0.05, and
    Spearman's rank correlation of the loop's paired difference with the replayed gain (does what the
    loop saw predict what the edit is worth?)."""
    from scipy.stats import spearmanr

    done = [r for r in rows if r["replayed_gain"] is not None and r["paired_difference"] is not None]
    if not done:
        return None
    gains = sorted(r["replayed_gain"] for r in done)
    mid = len(gains) // 2
    rho = spearmanr([r["paired_difference"] for r in done], [r["replayed_gain"] for r in done])
    return {
        "n": len(done),
        "mean_gain": sum(gains) / len(gains),
        "median_gain": gains[mid] if len(gains) % 2 else (gains[mid - 1] + gains[mid]) / 2,
        "above_0.05": sum(g > 0.05 for g in gains),
        "below_-0.05": sum(g < -0.05 for g in gains),
        "spearman": None if math.isnan(rho.statistic) else float(rho.statistic),
        "spearman_p": None if math.isnan(rho.pvalue) else float(rho.pvalue),
    }


def _nanmean(xs: list[float]) -> float:
    keep = [x for x in xs if not math.isnan(x)]
    return sum(keep) / len(keep) if keep else math.nan


def render_markdown(result: dict[str, Any]) -> str:
    m = result["metric"]
    n = len(result["replay_seeds"]) * result["samples"]
    out = [
        f"## `{m}` of each kept prompt, replayed ({result['task']}; seeds {result['replay_seeds']}, "
        f"{n} records per prompt)",
        "",
        "| system | replayed mean | cell's own mean | replayed, per source seed |",
        "|---|---:|---:|---|",
    ]
    for ref, v in result["references"].items():
        out.append(f"| {ref} (reference, one prompt) | {_v(v)} | | |")
    for row in result["systems"]:
        per = ", ".join(f"{s}: {_v(v)}" for s, v in zip(row["seeds"], row["replayed"], strict=True))
        out.append(f"| {row['system']} | {_v(row['replayed_mean'])} | {_v(row['own_mean'])} | {per} |")
    out += ["", "| B - A | n | mean | t p | Wilcoxon p |", "|---|---:|---:|---:|---:|"]
    for t in result["tests"]:
        out.append(
            f"| {t['b']} - {t['a']} | {t['n']} | {_f(t['mean_diff'])} | {_p(t['p_ttest'])} | "
            f"{_p(t['p_wilcoxon'])} |"
        )
    if result["candidates"]:
        out += [
            "",
            "Rejected candidates the loop saw as best, replayed against the incumbent they were tested with:",
            "",
            "| cell | round | kind | loop's paired difference | loop's p | incumbent | candidate | replayed gain |",
            "|---|---:|---|---:|---:|---:|---:|---:|",
        ]
        for r in result["candidates"]:
            out.append(
                f"| {r['system']}/seed-{r['seed']} | {r['round']} | {r['kind']} | {_f(r['paired_difference'])} | "
                f"{_p(r['p_value'])} | {_v(r['incumbent_value'])} | {_v(r['candidate_value'])} | "
                f"{_f(r['replayed_gain'])} |"
            )
        c = result["candidate_summary"]
        if c:
            out += [
                "",
                f"Over {c['n']} candidates: mean gain {_f(c['mean_gain'])}, median {_f(c['median_gain'])}; "
                f"{c['above_0.05']} gain more than 0.05, {c['below_-0.05']} lose more; Spearman of the loop's "
                f"paired difference with the replayed gain {_f(c['spearman'], decimals=2)} (p {_p(c['spearman_p'])}).",
            ]
    return "\n".join(out) + "\n"


class _PlainDumper(yaml.SafeDumper):
    """Writes shared objects out in full (no `&id001` anchors): the suite is read by people too."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002
        return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite", help="write the replay suite")
    s.add_argument("run", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--task", default=None)
    s.add_argument("--seeds", default=",".join(map(str, DEFAULT_SEEDS)), help="replay seeds, comma-separated")
    s.add_argument("--samples", type=int, default=32)
    s.add_argument("--candidates", type=int, default=0, help="best rejected candidates per AoD cell")
    a = sub.add_parser("analyze", help="replayed values and paired tests")
    a.add_argument("replay", type=Path)
    a.add_argument("--source", type=Path, required=True)
    a.add_argument("--metric", default="tsr", choices=METRICS)
    a.add_argument("--candidates", type=int, default=0, help="as given to `suite`")
    a.add_argument("--md", type=Path)
    a.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "suite":
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        suite = replay_suite(args.run, seeds, args.samples, args.task, args.candidates)
        args.out.write_text(yaml.dump(suite, Dumper=_PlainDumper, sort_keys=False, width=1_000_000))
        print(f"{len(suite['systems'])} prompts x {len(seeds)} seeds x {args.samples} samples -> {args.out}")
        return 0
    result = analyze(args.replay, args.source, args.metric, args.candidates)
    text = render_markdown(result)
    print(text)
    if args.md:
        args.md.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
