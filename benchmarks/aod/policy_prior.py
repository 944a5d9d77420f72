"""An edit-kind prior for AoD, learned across cells: what each kind of edit gained in other seeds' rounds.

    python -m benchmarks.aod.policy_prior RUN_DIR[=system] --task multiwoz/train --seeds 0-4 [--system aod-norl]

Why: within one cell the search keeps about two edits in 30 rounds, too few for the policy's own updates
to move it (docs/systems-aod.md, "The RL ablation at 30 rounds"); but the value of an edit kind is much the
same in every cell of a task. This reads the candidate rounds of `--system` (default `aod-norl`, whose
uniform draws give every kind an unbiased share) in the given seeds, and prints per kind the rounds, mean
and standard error of the paired reward difference D, how many were kept, and the prior
`systems.optimizers.policy.boltzmann_prior` builds from them, as the `policy_prior:` line for a suite.

Use it across folds so no seed is scored by a prior learned from its own rounds: a prior from seeds 0-4
serves seeds 5-9 and the reverse (suites/aod_rl_prior_*.yaml).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import yaml

from benchmarks.aod.comparison import candidate_events, finished_cells
from systems.optimizers.edits import EDIT_KINDS
from systems.optimizers.policy import boltzmann_prior


def parse_seeds(text: str) -> list[int]:
    """`0-4`, `5,7,9` or a mix (`0-2,6`) -> sorted seeds."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-", 1))
            if hi < lo:
                raise ValueError(f"seed range {part!r} runs backwards")
            out.update(range(lo, hi + 1))
        elif part:
            out.add(int(part))
    if not out:
        raise ValueError(f"no seeds in {text!r}")
    return sorted(out)


def kind_differences(
    runs: list[Path], system: str, task: str, seeds: list[int]
) -> tuple[dict[str, list[float]], dict[str, int], list[int]]:
    """Per edit kind, the paired differences of `system`'s candidate rounds in those seeds, the kept
    count, and the seeds found (a missing seed is reported, not guessed)."""
    cells = finished_cells(list(runs))
    diffs: dict[str, list[float]] = {}
    kept: dict[str, int] = {}
    found = []
    for seed in seeds:
        cell = cells.get((system, task, seed))
        if cell is None:
            continue
        found.append(seed)
        for ev in candidate_events(cell):
            kind, d = str(ev.get("edit_kind")), ev.get("paired_difference")
            if isinstance(d, int | float) and math.isfinite(d):
                diffs.setdefault(kind, []).append(float(d))
            kept[kind] = kept.get(kind, 0) + bool(ev.get("accepted"))
    return diffs, kept, found


def summary(diffs: dict[str, list[float]], kept: dict[str, int]) -> list[dict[str, Any]]:
    rows = []
    for kind in EDIT_KINDS:
        v = diffs.get(kind, [])
        n = len(v)
        mean = sum(v) / n if n else math.nan
        se = math.sqrt(sum((x - mean) ** 2 for x in v) / (n - 1) / n) if n > 1 else math.nan
        rows.append({"kind": kind, "rounds": n, "mean_difference": mean, "se": se, "kept": kept.get(kind, 0)})
    return rows


def prior_line(prior: dict[str, float]) -> str:
    """The `policy_prior:` line to paste into a suite: each weight to four significant digits, not four
    decimals (a kind that rounds to 0.0000 would be refused by the system's params, as a near-zero
    `remove_hint` once was), written by PyYAML's own dumper, as the suites pool_rows writes are, so
    every weight reads back as a float (`1e-05` would load as a string; the dumper writes `1.0e-05`)."""
    weights = {k: float(f"{prior[k]:.4g}") for k in EDIT_KINDS}
    return yaml.safe_dump(
        {"policy_prior": weights}, default_flow_style=None, sort_keys=False, width=1_000_000
    ).strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, nargs="+", help="run directories (DIR=sys1,sys2 takes those systems)")
    ap.add_argument("--task", required=True)
    ap.add_argument("--seeds", required=True, help="the seeds to learn from, e.g. 0-4")
    ap.add_argument("--system", default="aod-norl", help="whose rounds to read (default aod-norl)")
    ap.add_argument("--json", type=Path, help="also write the table and the prior here")
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    diffs, kept, found = kind_differences(args.run, args.system, args.task, seeds)
    missing = sorted(set(seeds) - set(found))
    if missing:
        ap.error(f"no finished {args.system} cell of {args.task} for seeds {missing}")
    prior = boltzmann_prior(diffs, EDIT_KINDS)
    rows = summary(diffs, kept)
    print(f"{args.system} on {args.task}, seeds {found}:")
    print("| kind | rounds | mean D | se | kept | prior |\n|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['rounds']} | {r['mean_difference']:+.3f} | {r['se']:.3f} | {r['kept']} "
            f"| {prior[r['kind']]:.3f} |"
        )
    print(prior_line(prior))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"system": args.system, "task": args.task, "seeds": found, "kinds": rows, "prior": prior},
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
