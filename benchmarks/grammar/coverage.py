"""Compile the official JSON-Schema-Test-Suite (draft 2020-12) and judge every grammar with llama.cpp.

For each schema of the suite: compile it (or record the refusal), then for each of its instances ask
llama.cpp's grammar engine whether the grammar accepts the instance's JSON text and ask `jsonschema`
(Draft 2020-12 with the format checker, the harness's judge) whether the instance is valid. Also draw
random sentences from the grammar and validate them. Reported:

- compiled: schemas that compiled (the rest were refused with `UnsupportedSchema`);
- crashes: any other exception while compiling or matching;
- unsound: texts the grammar accepts but `jsonschema` rejects (instances and drawn sentences) - must be 0;
- complete: valid instances the grammar accepts (the grammar is a bounded subset, so some are not).

Usage: `BENCH_DATA_DIR=/work/shared/datasets python -m benchmarks.grammar.coverage [--write-docs]`.
`--write-docs` replaces the table between the coverage markers in docs/systems-ar.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from systems.backends.grammar import GrammarLimits, UnsupportedSchema, build_grammar
from systems.backends.grammar.compiler import ANNOTATIONS, is_annotation
from systems.backends.grammar.sample import sentences

# The suite run uses character (not byte) caps, unicode strings and allows empty required strings: the
# compiler's own semantics, without ar-grammar's generation preferences.
SUITE_LIMITS = GrammarLimits(max_string_chars=64, max_items=8, nonempty_required_strings=False)
DOCS = Path(__file__).parents[2] / "docs" / "systems-ar.md"
BEGIN, END = "<!-- grammar-coverage:begin -->", "<!-- grammar-coverage:end -->"


def suite_files(root: Path) -> list[Path]:
    files = sorted(root.glob("*.json")) + sorted((root / "optional-format").glob("*.json"))
    return [f for f in files if f.name != "package.json"]


def text_of(value: Any) -> str:
    """The JSON text the grammar is meant to accept: compact, one space after ':' and ','."""
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_ONE = ("items", "additionalProperties", "unevaluatedItems", "unevaluatedProperties", "not", "if", "then",
        "else", "contains", "propertyNames", "contentSchema")  # fmt: skip
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")


def keywords(schema: Any, out: set[str] | None = None) -> set[str]:
    """Every validation keyword used anywhere in the schema (annotations left out)."""
    out = set() if out is None else out
    if not isinstance(schema, dict):
        return out
    for k, v in schema.items():
        if k not in ANNOTATIONS and not is_annotation(k):
            out.add(k)
        if k in _MAPS and isinstance(v, dict):
            for sub in v.values():
                keywords(sub, out)
        elif k in _ONE:
            keywords(v, out)
        elif k in _MANY and isinstance(v, list):
            for sub in v:
                keywords(sub, out)
    return out


@dataclass
class CaseResult:
    file: str
    description: str
    keywords: list[str]
    compiled: bool = False
    refusal: str = ""
    crash: str = ""
    valid: int = 0
    accepted_valid: int = 0
    invalid: int = 0
    accepted_invalid: int = 0  # unsound instances
    drawn: int = 0
    drawn_invalid: int = 0  # unsound sentences
    unsound_examples: list[str] = field(default_factory=list)
    unspellable: int = 0  # texts SmolLM2's vocabulary cannot spell (not judged)


def run_case(engine: Any, file: str, case: dict, draws: int, seed: int) -> CaseResult:
    from jsonschema import Draft202012Validator

    schema = case["schema"]
    res = CaseResult(file, case["description"], sorted(keywords(schema)))
    try:
        grammar = build_grammar(schema, SUITE_LIMITS)
        gbnf = grammar.to_gbnf()
    except UnsupportedSchema as exc:
        res.refusal = str(exc)
        return res
    except Exception as exc:  # noqa: BLE001 - a crash is what this run measures
        res.crash = f"compile: {type(exc).__name__}: {exc}"
        return res
    res.compiled = True
    judge = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    try:
        texts = [text_of(t["data"]) for t in case["tests"]]
        verdicts = [judge.is_valid(t["data"]) for t in case["tests"]]
        drawn = sentences(grammar, draws, seed)
        accepted = engine.accepts(gbnf, texts + drawn)
    except Exception as exc:  # noqa: BLE001
        res.crash = f"match: {type(exc).__name__}: {exc}"
        return res
    for text, ok, acc in zip(texts, verdicts, accepted, strict=False):
        if acc is None:
            res.unspellable += 1
            continue
        if ok:
            res.valid += 1
            res.accepted_valid += acc
        else:
            res.invalid += 1
            if acc:
                res.accepted_invalid += 1
                res.unsound_examples.append(text)
    for text, acc in zip(drawn, accepted[len(texts) :], strict=True):
        if acc is None:
            res.unspellable += 1
            continue
        res.drawn += 1
        try:
            value = json.loads(text)
            good = judge.is_valid(value)
        except ValueError:
            good = False
        if not good or not acc:  # a drawn sentence must validate and llama.cpp must accept it
            res.drawn_invalid += 1
            res.unsound_examples.append(("not accepted by llama.cpp: " if good else "") + text)
    return res


def run(root: Path, draws: int = 20, seed: int = 0) -> list[CaseResult]:
    from systems.backends.grammar.engine import GrammarEngine

    engine = GrammarEngine()
    results = []
    for path in suite_files(root):
        for case in json.loads(path.read_text()):
            results.append(run_case(engine, str(path.relative_to(root)), case, draws, seed))
    return results


def summary(results: list[CaseResult]) -> dict[str, Any]:
    return {
        "schemas": len(results),
        "compiled": sum(r.compiled for r in results),
        "crashes": sum(bool(r.crash) for r in results),
        "unsound_instances": sum(r.accepted_invalid for r in results),
        "unsound_sentences": sum(r.drawn_invalid for r in results),
        "drawn_sentences": sum(r.drawn for r in results),
        "valid_instances": sum(r.valid for r in results),
        "valid_instances_of_compiled": sum(r.valid for r in results if r.compiled),
        "accepted_valid": sum(r.accepted_valid for r in results),
        "invalid_instances_of_compiled": sum(r.invalid for r in results if r.compiled),
        "unspellable_texts": sum(r.unspellable for r in results),
    }


def table(results: list[CaseResult]) -> str:
    """Per keyword: schemas using it, compiled, valid instances of the compiled ones, accepted."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in results:
        for k in r.keywords or ["(none)"]:
            row = rows[k]
            row[0] += 1
            row[1] += r.compiled
            row[2] += r.valid if r.compiled else 0
            row[3] += r.accepted_valid
    lines = [
        "| keyword | schemas | compiled | valid instances (compiled) | accepted (complete) |",
        "|---|---:|---:|---:|---:|",
    ]
    for k in sorted(rows):
        n, c, v, a = rows[k]
        pct = f" ({100 * a / v:.0f}%)" if v else ""
        lines.append(f"| `{k}` | {n} | {c} | {v} | {a}{pct} |")
    s = summary(results)
    lines.append(
        f"| **all** | {s['schemas']} | {s['compiled']} | {s['valid_instances_of_compiled']} | "
        f"{s['accepted_valid']} |"
    )
    return "\n".join(lines)


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    DOCS.write_text(doc[:start] + "\n" + text + "\n" + doc[end:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write-docs", action="store_true")
    ap.add_argument("--json", type=Path, help="write every case's result here")
    ap.add_argument("--draws", type=int, default=20)
    args = ap.parse_args(argv)
    root = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets")) / "json_schema_test_suite"
    t0 = time.perf_counter()
    results = run(root, args.draws)
    s = summary(results)
    s["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(s, indent=1))
    for r in results:
        if r.crash or r.unsound_examples:
            print("PROBLEM", r.file, r.description, r.crash, r.unsound_examples[:3], file=sys.stderr)
    tbl = table(results)
    print(tbl)
    if args.json:
        args.json.write_text(json.dumps({"summary": s, "cases": [asdict(r) for r in results]}, indent=1))
    if args.write_docs:
        summary_line = (
            f"Compiled {s['compiled']} of {s['schemas']} schemas; {s['crashes']} crashes; "
            f"{s['unsound_instances']} unsound instances and {s['unsound_sentences']} unsound sentences "
            f"(of {s['drawn_sentences']} drawn); {s['accepted_valid']} of {s['valid_instances_of_compiled']} "
            "valid instances of the compiled schemas accepted."
        )
        write_docs(summary_line + "\n\n" + tbl)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
