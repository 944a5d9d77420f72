"""Can `ar-grammar` write the real records? Every task's records, judged by llama.cpp's grammar engine.

For each task family, the grammar `ar-grammar` sends to llama.cpp under its default params is built
(caps derived from the task's references, shrunk to the token budget), and each reference and holdout
record is checked with llama.cpp's own grammar matcher. A record is written as compact JSON with its keys
in schema order (the grammar spells declared properties in that order; the value is the same). Each
rejected record is attributed to the first cap it exceeds.

Usage: `BENCH_DATA_DIR=/work/shared/datasets python -m benchmarks.grammar.references [--json out.json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from systems.backends.grammar.bounds import array_bytes, string_bytes
from systems.backends.grammar.compiler import ptr_join


def in_schema_order(value: Any, schema: Any) -> Any:
    """The same JSON value with object keys in the order the schema declares them."""
    if isinstance(value, dict) and isinstance(schema, dict):
        props = schema.get("properties") or {}
        keys = [k for k in props if k in value] + [k for k in value if k not in props]
        return {k: in_schema_order(value[k], props.get(k, {})) for k in keys}
    if isinstance(value, list) and isinstance(schema, dict):
        prefix = schema.get("prefixItems") or []
        items = schema.get("items", {})
        return [in_schema_order(v, prefix[i] if i < len(prefix) else items) for i, v in enumerate(value)]
    return value


def text_of(record: Any, schema: Any) -> str:
    return json.dumps(in_schema_order(record, schema), ensure_ascii=False, separators=(", ", ": "))


def why(record: Any, bounded: Any, ptr: str = "#") -> str:
    """The first cap of the bounded schema that the record exceeds ("" if none is found)."""
    if not isinstance(bounded, dict):
        return ""
    if isinstance(record, str) and "maxLength" in bounded and string_bytes(record) > bounded["maxLength"]:
        return f"string longer than its cap at {ptr}"
    if isinstance(record, str) and bounded.get("minLength", 0) > len(record):
        return f"empty string at {ptr}"
    if isinstance(record, list):
        if "x-maxBytes" in bounded and array_bytes(record) > bounded["x-maxBytes"]:
            return f"array text longer than its cap at {ptr}"
        if "maxItems" in bounded and len(record) > bounded["maxItems"]:
            return f"more items than the cap at {ptr}"
        for v in record:
            found = why(v, bounded.get("items"), ptr_join(ptr, "items"))
            if found:
                return found
    if isinstance(record, dict):
        for k, v in record.items():
            found = why(v, (bounded.get("properties") or {}).get(k), ptr_join(ptr, "properties", k))
            if found:
                return found
    return ""


def run(data_dir: Path) -> dict[str, Any]:
    from bench.tasks.loading import list_tasks, load_task
    from systems.ar_grammar import ARGrammarSystem
    from systems.backends.grammar import schema_to_gbnf
    from systems.backends.grammar.engine import GrammarEngine

    engine = GrammarEngine()
    system = ARGrammarSystem({})
    out: dict[str, Any] = {}
    for name in list_tasks(data_dir):
        spec = load_task(name, n_references=None, n_holdout=None)
        schema = system.constrained_schema(spec)
        gbnf = schema_to_gbnf(schema)
        plan = system.plan(spec)
        row: dict[str, Any] = {
            "references_fit": plan.references_fit,
            "longest_bytes": plan.longest,
            "excluded": {},
        }
        for split, records in (("references", spec.references), ("holdout", spec.holdout)):
            verdicts = engine.accepts(gbnf, [text_of(r, spec.schema) for r in records])
            row[split] = [sum(bool(v) for v in verdicts), len(records)]
            for record, ok in zip(records, verdicts, strict=True):
                if not ok:
                    reason = why(record, schema) or "other"
                    key = f"{split}: {reason}"
                    row["excluded"][key] = row["excluded"].get(key, 0) + 1
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    result = run(Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets")))
    for name, row in result.items():
        (ra, rn), (ha, hn) = row["references"], row["holdout"]
        print(f"{name}: references {ra}/{rn}, holdout {ha}/{hn}, fit={row['references_fit']}, "
              f"longest={row['longest_bytes']:.0f} B, excluded={row['excluded']}")  # fmt: skip
    print(f"{time.perf_counter() - t0:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
