"""BFCL single-turn tool calling (`bfcl/<category>`): one `TaskItem` per BFCL question.

Patil et al., "The Berkeley Function Calling Leaderboard (BFCL)", ICML 2025. Data: BFCL v4's
`BFCL_v4_<category>.json` (JSON Lines of `{"id", "question", "function"}`) and
`possible_answer/BFCL_v4_<category>.json` (`{"id", "ground_truth": [{name: {arg: [acceptable...]}}]}`),
read from `$BENCH_DATA_DIR/bfcl/` (five categories) or, failing that, from the installed PyPI package
`bfcl-eval` (`bfcl_eval/data/`, every category; extra `[bfcl]`).

A model answers with the tool-call record `{"calls": [{"name": ..., "arguments": {...}}]}`; each item's
schema is derived from its function docs (one anyOf branch per function: the name as a one-value enum,
the arguments' types, required and no other keys). The item's meta holds the function docs, the
possible answer (ground truth) and the category; metrics/toolcalls.py scores with BFCL's AST semantics.

Records (references and holdout) are the canonical ground-truth call records (the first acceptable value
of each argument; arguments whose only acceptable value is "omitted" left out). Only the items whose
record landed in the holdout are scored, so a system trained on the references never sees the answers
it is scored on. Items with no expected call (irrelevance) teach nothing about an answer and are always
scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import DataError
from bench.types import JSON, TaskItem

from .base import SourceFile, TaskSource, check_options, decode_utf8

#: Our category name -> BFCL v4 file stem. `simple` is BFCL v3's name of `simple_python`.
CATEGORIES: dict[str, str] = {
    "simple_python": "simple_python",
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "irrelevance": "irrelevance",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "live_parallel": "live_parallel",
    "live_parallel_multiple": "live_parallel_multiple",
    "live_irrelevance": "live_irrelevance",
}

#: BFCL's Python-flavoured parameter types -> JSON Schema types (as upstream maps them for tool APIs).
_TYPES = {
    "dict": "object",
    "object": "object",
    "float": "number",
    "number": "number",
    "integer": "integer",
    "int": "integer",
    "string": "string",
    "str": "string",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "tuple": "array",
}

#: Task-level schema: the shape every call record has (per-item schemas are stricter).
RECORD_SCHEMA: JSON = {
    "type": "object",
    "properties": {
        "calls": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["calls"],
    "additionalProperties": False,
}


def is_irrelevance(category: str) -> bool:
    """BFCL's rule: a category with "irrelevance" in its name expects no call."""
    return "irrelevance" in category


def param_schema(doc: JSON) -> JSON:
    """One BFCL parameter doc -> JSON Schema (type, enum, items, nested properties, description)."""
    if not isinstance(doc, dict):
        return {}
    out: JSON = {}
    t = _TYPES.get(str(doc.get("type", "")))
    if t is not None:
        out["type"] = t
    if isinstance(doc.get("description"), str):
        out["description"] = doc["description"]
    if isinstance(doc.get("enum"), list):
        out["enum"] = doc["enum"]
    if t == "array" and isinstance(doc.get("items"), dict):
        out["items"] = param_schema(doc["items"])
    if t == "object" and isinstance(doc.get("properties"), dict):
        out["properties"] = {k: param_schema(v) for k, v in doc["properties"].items()}
        if isinstance(doc.get("required"), list):
            out["required"] = [r for r in doc["required"] if r in doc["properties"]]
    return out


def function_schema(fn: JSON) -> JSON:
    """One function doc -> the schema of one call to it."""
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    arguments: JSON = {
        "type": "object",
        "properties": {k: param_schema(v) for k, v in props.items()},
        "additionalProperties": False,
    }
    required = [r for r in params.get("required") or [] if r in props]
    if required:
        arguments["required"] = required
    return {
        "type": "object",
        "properties": {"name": {"enum": [fn["name"]]}, "arguments": arguments},
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }


def item_schema(functions: list[JSON]) -> JSON:
    """The call record for these function docs: names as an enum, one argument schema per function."""
    calls: JSON = {"type": "array", "items": {"anyOf": [function_schema(f) for f in functions]}}
    if not functions:  # a few live_irrelevance items offer no function at all: the only answer is no call
        calls = {"type": "array", "maxItems": 0}
    return {
        "type": "object",
        "title": "Tool calls",
        "properties": {"calls": calls},
        "required": ["calls"],
        "additionalProperties": False,
    }


def item_instruction(question: JSON, functions: list[JSON]) -> str:
    """The user's request, the available functions, and how to answer (including "no call")."""
    turns = [m for turn in question for m in turn] if isinstance(question, list) else []
    conversation = "\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in turns)
    docs = "\n".join(f"- {f['name']}: {f.get('description', '')}" for f in functions)
    return (
        "Answer the user's request by calling the available functions. Reply with one JSON object "
        '{"calls": [{"name": <function name>, "arguments": {<argument>: <value>}}]}, one entry per call '
        '(several when the request needs several). If no function fits the request, reply {"calls": []}.\n'
        f"Available functions:\n{docs}\nConversation:\n{conversation}"
    )


def _first(values: list) -> tuple[bool, object]:
    explicit = [v for v in values if v != ""]
    return (True, explicit[0]) if explicit else (False, None)


def _answer_dict(value: JSON) -> JSON:
    """A dict-typed answer holds acceptable-value lists per key: keep each key's first explicit value."""
    out = {}
    for k, vals in value.items():
        has, v = _first(vals) if isinstance(vals, list) else (True, vals)
        if has:
            out[k] = v
    return out


def canonical_record(ground_truth: list[JSON], functions: list[JSON] | None = None) -> JSON:
    """Possible answer -> one call record: each argument's first acceptable value ("" = may be omitted);
    dict-typed values (and lists of them) are answer dicts themselves, resolved the same way."""
    docs = {f.get("name"): f for f in functions or []}
    calls = []
    for call in ground_truth:
        ((name, args),) = call.items()
        props = ((docs.get(name) or {}).get("parameters") or {}).get("properties") or {}
        arguments = {}
        for arg, values in args.items():
            has, value = _first(values)
            if not has:
                continue
            doc = props.get(arg) or {}
            if doc.get("type") == "dict" and isinstance(value, dict):
                value = _answer_dict(value)
            elif (doc.get("items") or {}).get("type") == "dict" and isinstance(value, list):
                value = [_answer_dict(v) if isinstance(v, dict) else v for v in value]
            arguments[arg] = value
        calls.append({"name": name, "arguments": arguments})
    return {"calls": calls}


def _jsonl(data: bytes, relpath: str) -> list[JSON]:
    text = decode_utf8(data, relpath)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DataError(f"{relpath} line {n}: not JSON ({exc})") from exc
    return out


def _package_dir() -> Path | None:
    try:
        import bfcl_eval  # type: ignore[import-not-found]
    except ImportError:
        return None
    return Path(bfcl_eval.__file__).parent / "data"


def _read(stem: str, answers: bool, data_dir: Path | None) -> SourceFile | None:
    """The file from the data dir's `bfcl/` if there, else from the bfcl-eval package; None if neither."""
    rel = ("possible_answer/" if answers else "") + f"BFCL_v4_{stem}.json"
    if data_dir is not None and (data_dir / "bfcl" / rel).is_file():
        return SourceFile(f"bfcl/{rel}", (data_dir / "bfcl" / rel).read_bytes())
    pkg = _package_dir()
    if pkg is not None and (pkg / rel).is_file():
        return SourceFile(f"bfcl_eval:data/{rel}", (pkg / rel).read_bytes())
    return None


@dataclass(frozen=True)
class BFCL:
    """Loader for `bfcl/<category>`: single-turn AST categories, and `multi_turn_base`
    (bench.tasks.bfcl_multi_turn)."""

    family: str = "bfcl"
    version: str = "1"
    needs_data_dir: bool = True
    options_doc: dict[str, str] = field(default_factory=dict)

    def variants(self, data_dir: Path | None) -> list[str]:
        from .bfcl_multi_turn import MULTI_TURN_CATEGORIES

        single = [c for c, stem in CATEGORIES.items() if _read(stem, False, data_dir) is not None]
        return single + [c for c in MULTI_TURN_CATEGORIES if _read(c, False, data_dir) is not None]

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        name = f"bfcl/{variant}"
        check_options(name, options, self.options_doc)
        from .bfcl_multi_turn import MULTI_TURN_CATEGORIES, read_multi_turn

        if variant in MULTI_TURN_CATEGORIES:
            return read_multi_turn(variant, data_dir)
        if variant not in CATEGORIES:
            known = ", ".join([*CATEGORIES, *MULTI_TURN_CATEGORIES])
            raise DataError(f"task {name!r}: unknown BFCL category; known: {known}")
        stem = CATEGORIES[variant]
        questions_file = _read(stem, False, data_dir)
        if questions_file is None:
            raise DataError(
                f"task {name!r} needs BFCL_v4_{stem}.json: put it in <data dir>/bfcl/ or install the "
                "`[bfcl]` extra (pip install --no-deps bfcl-eval)"
            )
        files = [questions_file]
        answers: dict[str, list[JSON]] = {}
        if not is_irrelevance(stem):
            answer_file = _read(stem, True, data_dir)
            if answer_file is None:
                raise DataError(
                    f"task {name!r}: no possible_answer/BFCL_v4_{stem}.json next to the questions"
                )
            files.append(answer_file)
            answers = {a["id"]: a["ground_truth"] for a in _jsonl(answer_file.data, answer_file.relpath)}
        items, records = [], []
        for q in _jsonl(questions_file.data, questions_file.relpath):
            functions = q.get("function") or []
            if not functions and not is_irrelevance(stem):
                raise DataError(f"{questions_file.relpath}: item {q.get('id')!r} has no function docs")
            if not is_irrelevance(stem) and q["id"] not in answers:
                raise DataError(f"task {name!r}: item {q['id']!r} has no possible answer")
            truth = answers.get(q["id"], [])
            record = canonical_record(truth, functions)
            records.append(record)
            items.append(
                TaskItem(
                    id=q["id"],
                    schema=item_schema(functions),
                    instruction=item_instruction(q.get("question"), functions),
                    meta={
                        "functions": functions,
                        "ground_truth": truth,
                        "category": stem,
                        "record": record,
                        "question": q.get("question"),
                    },
                )
            )
        return TaskSource(
            records=records,
            instruction=f"BFCL {stem}: answer each request with tool calls",
            rubric=(),
            files=files,
            title="Tool calls",
            schema=RECORD_SCHEMA,
            meta={"bfcl_category": stem, "n_items_total": len(items)},
            items=tuple(items),
        )


BFCL_FAMILY = BFCL()
