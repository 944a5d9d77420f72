"""Judge calibration: how often the LLM judge agrees with the code on the questions code can decide.

The judge cluster answers decidable rubric questions in code (metrics/rubrics/) and asks the LLM the
rest. This script measures what would happen if the LLM answered the decidable ones too: for each task
it takes `--n` real records (the code mostly says yes) and `--n` copies each broken by one seeded edit
that a code check catches (destination set to the departure, a fare ten times too high, an output that
repeats the input, a miscounted set union, ...; the code says no), asks the LLM judge every question the
code answers for that record, with the judge's own prompt, system message and sampling settings, and
compares.

Reported per task and question: pairs, the LLM's accuracy against the code (an unreadable reply counts
as wrong), balanced accuracy (mean of the accuracy on code-yes and on code-no pairs), the LLM's yes-rate,
the code's yes-rate and the unreadable share.

Usage: python -m benchmarks.judge.calibration [--n 10] [--seed 0] [--tasks multiwoz/train,...] [--json OUT]
Needs BENCH_DATA_DIR for the MultiWOZ/TruthfulQA/Self-Instruct/SuperNI tasks and the embedded profile's
judge model (SmolLM2-135M-Instruct through llama.cpp); replies are cached under --cache-dir.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.types import JSON, TaskSpec
from metrics.rubrics.superni_answers import UNION_TASK

DEFAULT_TASKS = (
    "multiwoz/train",
    "multiwoz/hotel",
    "multiwoz/attraction",
    "truthfulqa",
    "self_instruct",
    UNION_TASK,
    "demo/booking",
)

Edit = Callable[[JSON, random.Random], None]


def _train_edits() -> list[Edit]:
    def same_station(r: JSON, rng: random.Random) -> None:
        r["destination"] = r["departure"]

    def swap_times(r: JSON, rng: random.Random) -> None:
        r["leaveAt"], r["arriveBy"] = r["arriveBy"], r["leaveAt"]

    def wrong_duration(r: JSON, rng: random.Random) -> None:
        r["duration"] = f"{int(r['duration'].split()[0]) + rng.choice([15, 30, 45])} minutes"

    def bad_id(r: JSON, rng: random.Random) -> None:
        r["trainID"] = f"TR{rng.randrange(10000, 99999)}"

    def bad_fare(r: JSON, rng: random.Random) -> None:
        r["price"] = f"{rng.uniform(150, 900):.2f} pounds"

    return [same_station, swap_times, wrong_duration, bad_id, bad_fare]


def _venue_edits() -> list[Edit]:
    def far_away(r: JSON, rng: random.Random) -> None:
        r["location"] = rng.choice([[48.857, 2.352], [40.713, -74.006], [51.507, -0.128], [53.48, -2.24]])

    def short_phone(r: JSON, rng: random.Random) -> None:
        r["phone"] = str(r.get("phone", "01223000000"))[: rng.choice([5, 7, 9])]

    return [far_away, short_phone]


def _truthfulqa_edits() -> list[Edit]:
    def best_is_wrong(r: JSON, rng: random.Random) -> None:
        r["best_answer"] = rng.choice(r["incorrect_answers"])

    return [best_is_wrong]


def _instruction_edits() -> list[Edit]:
    def output_copies_input(r: JSON, rng: random.Random) -> None:
        r["output"] = r["input"] if r.get("input") else r["instruction"]

    def blank_output(r: JSON, rng: random.Random) -> None:
        r["output"] = " "

    return [output_copies_input, blank_output]


def _union_count_edits() -> list[Edit]:
    def wrong_count(r: JSON, rng: random.Random) -> None:
        r["output"] = str(max(0, int(r["output"]) + rng.choice([-2, -1, 1, 2])))

    return [wrong_count]


def _booking_edits() -> list[Edit]:
    def same_city(r: JSON, rng: random.Random) -> None:
        r["arrival_city"] = r["departure_city"]

    def wrong_code(r: JSON, rng: random.Random) -> None:
        digits = "".join(ch for ch in r["flight_number"] if ch.isdigit())
        code = r["flight_number"][:2]
        r["flight_number"] = rng.choice([c for c in ("XQ", "ZZ", "QV", "JJ") if c != code]) + digits

    def fare_off(r: JSON, rng: random.Random) -> None:
        r["price"] = round(float(r["price"]) * rng.choice([0.1, 8.0, 12.0]), 2)

    return [same_city, wrong_code, fare_off]


def edits_for(task: str) -> list[Edit]:
    if task == "multiwoz/train":
        return _train_edits()
    if task.startswith("multiwoz/"):
        return _venue_edits()
    if task.startswith("truthfulqa"):
        return _truthfulqa_edits()
    if task == UNION_TASK:  # its answer is decided in code: a miscount is a broken record too
        return _instruction_edits() + _union_count_edits()
    if task in ("self_instruct",) or task.startswith("superni/"):
        return _instruction_edits()
    if task == "demo/booking":
        return _booking_edits()
    raise SystemExit(f"no edits defined for {task}")


def pairs_for(spec: TaskSpec, judge: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """(record, question, code answer) for n real and n edited records; edits must be caught by a check."""
    from metrics.rubrics import failed

    rng = random.Random(seed)
    pool = list(spec.holdout) if len(spec.holdout) >= n else list(spec.holdout) + list(spec.references)
    good = [r for r in pool if not failed(judge.checks, r)]
    rng.shuffle(good)
    picked = good[:n]
    broken: list[tuple[str, JSON]] = []
    edits = edits_for(spec.name)
    attempts = 0
    while len(broken) < n and attempts < 20 * n:
        attempts += 1
        r = copy.deepcopy(rng.choice(good))
        edit = rng.choice(edits)
        edit(r, rng)
        if failed(judge.checks, r):
            broken.append((edit.__name__, r))
    out = []
    for kind, rec in [("real", r) for r in picked] + broken:
        for q in judge.questions:
            code = judge.code_answer(rec, q)
            if code is not None:
                out.append({"record": rec, "question": q, "code": code, "kind": kind})
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    if not n:
        return {"pairs": 0}
    agree = sum(r["llm"] is r["code"] for r in rows)
    by_code = {v: [r for r in rows if r["code"] is v] for v in (True, False)}
    accs = [sum(r["llm"] is v for r in rs) / len(rs) for v, rs in by_code.items() if rs]
    return {
        "pairs": n,
        "accuracy": agree / n,
        "balanced_accuracy": sum(accs) / len(accs),
        "llm_yes_rate": sum(r["llm"] is True for r in rows) / n,
        "code_yes_rate": sum(r["code"] is True for r in rows) / n,
        "unreadable": sum(r["llm"] is None for r in rows) / n,
    }


def run(tasks: list[str], n: int, seed: int, cache_dir: Path) -> dict[str, Any]:
    from bench.cache import CallCache
    from bench.context import BenchContext
    from bench.profiles import resolve_profile
    from bench.tasks import load_task
    from systems.optimizers.base import Agent, role_temperature
    from systems.optimizers.judge import Judge, parse_yes_no, schema_questions

    cache_dir.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(
        resolve_profile("embedded"), cache_dir, CallCache(cache_dir / "judge-calibration.sqlite")
    )
    agent = Agent(ctx, "judge", seed, role_temperature(ctx, "judge", 0.2), 6)  # AoD's judge settings
    model = ctx.model_spec("judge").get("model")
    result: dict[str, Any] = {"seed": seed, "n": n, "judge_model": model, "tasks": {}}
    all_rows: list[dict[str, Any]] = []
    for task in tasks:
        spec = load_task(task, n_references=None, n_holdout=None)
        judge = Judge.for_task(agent, list(spec.rubric) + schema_questions(spec), spec)
        rows = pairs_for(spec, judge, n, seed)
        for r in rows:
            reply = judge.ask_llm(r["record"], r["question"])
            r["llm"] = parse_yes_no(reply)
            r["reply"] = reply
        per_q = {
            q: summarize([r for r in rows if r["question"] == q])
            for q in dict.fromkeys(r["question"] for r in rows)
        }
        replies = Counter(" ".join(r["reply"].split()).lower() for r in rows).most_common(3)
        result["tasks"][task] = {"overall": summarize(rows), "questions": per_q, "top_replies": replies}
        all_rows += rows
        print(f"{task}: {result['tasks'][task]['overall']}", flush=True)
    result["overall"] = summarize(all_rows)
    result["top_replies"] = Counter(" ".join(r["reply"].split()).lower() for r in all_rows).most_common(5)
    result["llm_calls"] = agent.calls
    return result


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "| task | question | pairs | LLM accuracy | balanced acc. | LLM yes-rate | code yes-rate | unreadable |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def row(task: str, q: str, s: dict[str, Any]) -> str:
        return (
            f"| {task} | {q} | {s['pairs']} | {s['accuracy']:.2f} | {s['balanced_accuracy']:.2f} | "
            f"{s['llm_yes_rate']:.2f} | {s['code_yes_rate']:.2f} | {s['unreadable']:.2f} |"
        )

    for task, t in result["tasks"].items():
        for q, s in t["questions"].items():
            if s["pairs"]:
                lines.append(row(task, q, s))
        lines.append(row(task, "**all**", t["overall"]))
    lines.append(row("**all tasks**", "", result["overall"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    ap.add_argument("--n", type=int, default=10, help="real and edited records per task (each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    cache = args.cache_dir or Path(tempfile.gettempdir()) / "aod-bench-judge-calibration"
    result = run([t for t in args.tasks.split(",") if t], args.n, args.seed, cache)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
