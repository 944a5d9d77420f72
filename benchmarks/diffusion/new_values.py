"""What a DLM's new string values are made of: new combinations of the references' words, or invented words.

    python -m benchmarks.diffusion.new_values RUN_DIR --task superni/task1192_food_flavor_profile \
        [--fields input] [--json out.json]

Why: novelty and the code-checked rubric count any value that is not a reference's as new, so a model
that has learned too little (it spells "Inir" for a dish) and one that recombines what it read ("Jeera
Chicken" from "Jeera Aloo" and "Tandoori Chicken") score alike. This splits the parsed records' values
of each string field, per system over all seeds of the run: copies of a reference value, new values
whose every word occurs in that field's reference values, and new values with at least one word that
does not. It chose the default training budget for few references (docs/systems-diffusion.md, "The
default training budget"). Read from the run directory only; no model.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from bench.store import RunStore, read_jsonl
from bench.tasks import load_task
from bench.types import JSON


def string_fields(references: list[JSON]) -> list[str]:
    """Top-level fields whose value is a string in every reference that has them."""
    seen: dict[str, bool] = {}
    for r in references:
        for k, v in r.items():
            seen[k] = seen.get(k, True) and isinstance(v, str)
    return sorted(k for k, ok in seen.items() if ok)


def split_values(values: list[str], reference_values: set[str]) -> Counter[str]:
    """Count `values` as "copy" (a reference value), "recombined" (new; every word in a reference value)
    or "invented" (new; some word in none)."""
    words = {w for v in reference_values for w in v.split()}
    out: Counter[str] = Counter()
    for v in values:
        if v in reference_values:
            out["copy"] += 1
        elif all(w in words for w in v.split()):
            out["recombined"] += 1
        else:
            out["invented"] += 1
    return out


def run_values(run_dir: Path, task: str, field: str) -> dict[str, list[str]]:
    """System -> the string values of `field` in its parsed records, over every finished seed of the
    run. Read through `RunStore`, so a damaged cell is skipped with a warning, as the reports do."""
    store = RunStore(run_dir)
    out: dict[str, list[str]] = {}
    for cell in store.iter_cells():
        if cell.key.task != task or cell.status != "ok":
            continue
        for row in read_jsonl(cell.path / "samples.jsonl"):
            record = (row.get("scored") or {}).get("record")
            if isinstance(record, dict) and isinstance(record.get(field), str):
                out.setdefault(cell.key.system, []).append(record[field])
    return out


def analyse(run_dir: Path, task: str, fields: list[str] | None = None) -> dict[str, Any]:
    manifest = json.loads((run_dir / "manifest.json").read_text())
    config = next(t for t in manifest["suite"]["tasks"] if t["name"] == task)
    spec = load_task(task, n_references=config["n_references"], n_holdout=config["n_holdout"])
    refs = [r for r in spec.references if isinstance(r, dict)]
    rows: dict[str, Any] = {}
    for field in fields or string_fields(refs):
        reference_values = {r[field] for r in refs if isinstance(r.get(field), str)}
        for system, values in run_values(run_dir, task, field).items():
            rows.setdefault(system, {})[field] = {
                "values": len(values),
                **split_values(values, reference_values),
            }
    return {"run": str(run_dir), "task": task, "systems": rows}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--task", required=True)
    ap.add_argument("--fields", default="", help="comma-separated string fields (default: all)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    result = analyse(a.run_dir, a.task, [f for f in a.fields.split(",") if f] or None)
    print("| system | field | parsed values | copies | new, recombined | new, invented words |")
    print("|---|---|---:|---:|---:|---:|")
    for system, by_field in result["systems"].items():
        for field, c in by_field.items():
            row = [c["values"], c.get("copy", 0), c.get("recombined", 0), c.get("invented", 0)]
            print(f"| {system} | {field} | " + " | ".join(str(x) for x in row) + " |")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
