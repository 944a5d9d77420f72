"""Where a search kept a joint pool, how those cells' records fare, and which final values are copies.

    python -m benchmarks.aod.kept_pools RUN_DIR [RUN_DIR=sys1,sys2 ...] [--fields trainID,price,leaveAt,arriveBy]
        [--md out.md] [--json out.json]

Why: on multiwoz/train an AoD cell passes `tsr` only where its final prompt holds a joint pool of
reference rows (`vary_together`); in every other cell `tsr` is 0 (docs/systems-aod.md, "AoD on DLMs that
write digits in pairs or numbers whole"). So the mean over seeds mixes two things: how often the search
keeps the pool, and how well the DLM writes a record under it. This splits them, from the run directory
alone (no model):

- **kept pools**, per (system, task): the cells, those whose final prompt (the trace's `final` event)
  holds a joint pool, and for those cells' records the `tsr` share, the share failing each code check
  (`metrics.rubrics.failed_names`), and the shares that do not parse or are schema-invalid;
- **copied values**, per (system, task) and field: of the final parsed records that have the field, the
  share whose value is some reference's value of that field. Which digits a DLM memorises follows its
  tokens (docs/systems-diffusion.md, "Digit tokens"), so novelty can move between fields; this shows where.
  The references are the task's, loaded as the run loaded them (its manifest's task entries and data
  directory, `bench.cells.load_task_cached`).
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.aod.comparison import Runs, _events, _f, _runs, _split, finished_cells
from metrics.rubrics import failed_names

DEFAULT_FIELDS = ("trainID", "price", "leaveAt", "arriveBy")


def _share(count: int, n: int) -> float | None:
    return count / n if n else None


def _samples(cell: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (cell / "samples.jsonl").read_text().splitlines() if line]


def final_joint_pools(cell: Path) -> list[list[str]] | None:
    """The field lists of the joint pools in a cell's final prompt ([] when it kept none); None for a
    cell without a `final` event (plain `llada`, whose pools are fixed params, not kept by a search)."""
    finals = _events(cell, "final")
    if not finals:
        return None
    pools = (finals[-1].get("prompt_params") or {}).get("joint_pools") or []
    return [list(p["fields"]) for p in pools]


def kept_pool_cells(runs: Runs) -> list[dict[str, Any]]:
    """Per (system, task) with a `final` event: cells, cells that kept a joint pool, and those cells'
    record shares (`tsr`, each failing check, not parsed, schema-invalid)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for (system, task, _seed), cell in sorted(finished_cells(runs).items()):
        pools = final_joint_pools(cell)  # one read of the trace per cell
        if pools is None:
            continue
        row = rows.setdefault(
            (system, task),
            {
                "system": system,
                "task": task,
                "cells": 0,
                "kept": 0,
                "records": 0,
                "tsr": 0,
                "unparsed": 0,
                "invalid": 0,
                "failing": Counter(),
            },
        )
        row["cells"] += 1
        if not pools:
            continue
        row["kept"] += 1
        for s in _samples(cell):
            scored = s.get("scored") or {}
            row["records"] += 1
            if not isinstance(scored.get("record"), dict):
                row["unparsed"] += 1
                continue
            row["invalid"] += bool(scored.get("schema_errors"))
            row["tsr"] += scored.get("tsr") is True
            row["failing"].update(failed_names(scored.get("tsr_failures") or []))
    out = []
    for row in rows.values():
        n = row["records"]
        out.append(
            {
                **{k: row[k] for k in ("system", "task", "cells", "kept", "records")},
                **{k: _share(row[k], n) for k in ("tsr", "unparsed", "invalid")},
                "failing": {k: _share(v, n) for k, v in row["failing"].most_common()},
            }
        )
    return out


def copied_values(
    runs: Runs, references: Mapping[str, Sequence[Mapping[str, Any]]], fields: Sequence[str] = DEFAULT_FIELDS
) -> list[dict[str, Any]]:
    """Per (system, task): for each field, the share of final parsed records' values of it that equal
    some reference's value of it (None where no record has the field). `references`: task -> records."""
    counts: dict[tuple[str, str], dict[str, list[int]]] = {}
    known = {
        t: {f: {json.dumps(r[f]) for r in refs if f in r} for f in fields} for t, refs in references.items()
    }
    for (system, task, _seed), cell in sorted(finished_cells(runs).items()):
        if task not in known:
            continue
        per_field = counts.setdefault((system, task), {f: [0, 0] for f in fields})
        for s in _samples(cell):
            record = (s.get("scored") or {}).get("record")
            if not isinstance(record, dict):
                continue
            for f in fields:
                if f in record:
                    per_field[f][1] += 1
                    per_field[f][0] += json.dumps(record[f]) in known[task][f]
    return [
        {"system": s, "task": t, "copied": {f: (c / n if n else None) for f, (c, n) in per.items()}}
        for (s, t), per in counts.items()
    ]


def run_references(runs: Runs) -> dict[str, list[dict[str, Any]]]:
    """task -> its references, as the run's manifest loaded them (`bench.cells.load_task_cached`)."""
    from bench.cells import load_task_cached

    out: dict[str, list[dict[str, Any]]] = {}
    for run in _runs(runs):
        path, _only = _split(run)
        manifest = json.loads((path / "manifest.json").read_text())
        data_dir = os.environ.get("BENCH_DATA_DIR") or manifest.get("data_dir")
        for task in manifest["suite"]["tasks"]:
            if task["name"] not in out:
                out[task["name"]] = list(load_task_cached(task, data_dir).references)
    return out


def render_markdown(kept: list[dict[str, Any]], copied: list[dict[str, Any]], fields: Sequence[str]) -> str:
    # commonest failure first, ties by name (a set's order changes from process to process)
    checks = sorted(
        {c for r in kept for c in r["failing"]},
        key=lambda c: (-max(r["failing"].get(c) or 0 for r in kept), c),
    )
    lines = [
        "## Cells whose final prompt kept a joint pool (shares of those cells' records)",
        "",
        "| system | task | kept in | their `tsr` | " + " | ".join(f"`{c}`" for c in checks) + " | not parsed | schema invalid |",
        "|---|---|---:|---:|" + "---:|" * len(checks) + "---:|---:|",
    ]  # fmt: skip
    for r in kept:
        fails = " | ".join(_f(r["failing"].get(c, 0.0 if r["records"] else None)) for c in checks)
        lines.append(
            f"| {r['system']} | {r['task']} | {r['kept']} of {r['cells']} | {_f(r['tsr'])} | "
            + (fails + " | " if checks else "")
            + f"{_f(r['unparsed'])} | {_f(r['invalid'])} |"
        )
    lines += [
        "",
        "## Final values that are some reference's value of the field (share of parsed records)",
        "",
        "| system | task | " + " | ".join(f"`{f}`" for f in fields) + " |",
        "|---|---|" + "---:|" * len(fields),
    ]
    for r in copied:
        lines.append(
            f"| {r['system']} | {r['task']} | " + " | ".join(_f(r["copied"][f]) for f in fields) + " |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (DIR=sys1,sys2 takes only those systems)")
    ap.add_argument("--fields", default=",".join(DEFAULT_FIELDS), help="fields of the copied-values table")
    ap.add_argument("--md", default=None)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    runs = [Path(r) for r in a.runs]
    fields = [f.strip() for f in a.fields.split(",") if f.strip()]
    kept = kept_pool_cells(runs)
    copied = copied_values(runs, run_references(runs), fields)
    text = render_markdown(kept, copied, fields)
    print(text, end="")
    if a.md:
        Path(a.md).write_text(text)
    if a.json:
        Path(a.json).write_text(json.dumps({"kept_pools": kept, "copied_values": copied}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
