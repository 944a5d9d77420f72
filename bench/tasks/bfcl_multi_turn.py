"""BFCL multi-turn (`bfcl/multi_turn_base`): one `TaskItem` per multi-turn conversation.

Patil et al., ICML 2025 (BFCL v3 "multi-turn"). Data: `BFCL_v4_multi_turn_base.json` (JSON Lines of
`{"id", "question": [turn: [message]], "initial_config", "involved_classes", "path", ...}`),
`possible_answer/BFCL_v4_multi_turn_base.json` (`{"id", "ground_truth": [turn: ["name(arg=value)", ...]]}`)
and the function docs of each backend class, `multi_turn_func_doc/<class file>.json` (upstream's
`MULTI_TURN_FUNC_DOC_FILE_MAPPING`), read from `$BENCH_DATA_DIR/bfcl/` if there, else from the `bfcl-eval`
package. Executing calls needs bfcl-eval's Python backends (`bench.tasks.bfcl_env`).

An item's answer is an *episode*: what the model did in every user turn, step by step. Its record is

    {"turns": [[{"calls": [...]}, {"calls": []}], ...], "force_quit": false}

one list per user turn, one call record per model step (a model query) in that turn; a step with no call
ends the turn (as in BFCL's loop, a reply with no decodable call does). `force_quit` is true when the
episode was stopped at the step bound. The canonical record of an item is its ground truth in this form
(each turn: one step with all its calls, then the empty step), with upstream's positional arguments named
by the backend method's signature. The functions available are the docs of every involved class (upstream
ignores the `excluded_function` field of the base category, and so do we).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from bench.errors import DataError
from bench.types import JSON, TaskItem

from .base import SourceFile, TaskSource
from .bfcl import _jsonl, _package_dir, item_schema
from .bfcl_env import CLASS_MODULES, backend_class

MULTI_TURN_CATEGORIES = ("multi_turn_base",)

#: Upstream's MULTI_TURN_FUNC_DOC_FILE_MAPPING for the classes we execute.
FUNC_DOC_FILES: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system.json",
    "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json",
    "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json",
    "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json",
    "VehicleControlAPI": "vehicle_control.json",
}
assert set(FUNC_DOC_FILES) == set(CLASS_MODULES)


def read_file(rel: str, data_dir: Path | None) -> SourceFile | None:
    """`rel` (relative to BFCL's data folder) from the data dir's `bfcl/`, else the package; None if neither."""
    if data_dir is not None and (data_dir / "bfcl" / rel).is_file():
        return SourceFile(f"bfcl/{rel}", (data_dir / "bfcl" / rel).read_bytes())
    pkg = _package_dir()
    if pkg is not None and (pkg / rel).is_file():
        return SourceFile(f"bfcl_eval:data/{rel}", (pkg / rel).read_bytes())
    return None


def parse_call(source: str) -> tuple[str, tuple, JSON]:
    """Upstream's ground-truth call string `name(a, k=v)` -> (name, positional, keyword); literals only."""
    try:
        node = ast.parse(source, mode="eval").body
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            raise ValueError("not a call of a plain name")
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    except (SyntaxError, ValueError) as exc:
        raise DataError(f"BFCL ground-truth call {source!r} is not a literal call: {exc}") from exc
    return node.func.id, args, kwargs


def _signatures(classes: list[str]) -> dict[str, list[str]]:
    """Method name -> parameter names (self dropped), the last involved class winning as upstream."""
    import inspect

    out: dict[str, list[str]] = {}
    for class_name in classes:
        cls = backend_class(class_name)
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not name.startswith("_"):
                out[name] = [p for p in inspect.signature(fn).parameters if p != "self"]
    return out


def json_call(source: str, signatures: dict[str, list[str]]) -> JSON:
    """A ground-truth call string as a JSON call `{"name", "arguments"}` (positional arguments named)."""
    name, args, kwargs = parse_call(source)
    params = signatures.get(name)
    if params is None:
        raise DataError(f"BFCL ground-truth call {source!r} names no method of the item's classes")
    if len(args) > len(params):
        raise DataError(f"BFCL ground-truth call {source!r} has more positional arguments than parameters")
    return {"name": name, "arguments": {**dict(zip(params, args, strict=False)), **kwargs}}


def canonical_episode(ground_truth: list[list[str]], signatures: dict[str, list[str]]) -> JSON:
    """The ground truth as an episode record: per turn one step with its calls, then the turn-ending step."""
    turns = []
    for turn in ground_truth:
        calls = [json_call(s, signatures) for s in turn]
        turns.append(([{"calls": calls}] if calls else []) + [{"calls": []}])
    return {"turns": turns, "force_quit": False}


def episode_schema(functions: list[JSON], n_turns: int) -> JSON:
    """An episode record for these functions: at most one list of steps per user turn."""
    step = item_schema(functions)
    step.pop("title", None)
    return {
        "type": "object",
        "title": "Tool-call episode",
        "properties": {
            "turns": {"type": "array", "maxItems": n_turns, "items": {"type": "array", "items": step}},
            "force_quit": {"type": "boolean"},
        },
        "required": ["turns"],
        "additionalProperties": False,
    }


#: Task-level shape of every episode (items' schemas are stricter).
EPISODE_SCHEMA: JSON = {
    "type": "object",
    "properties": {
        "turns": {
            "type": "array",
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"calls": {"type": "array", "items": {"type": "object"}}},
                    "required": ["calls"],
                },
            },
        },
        "force_quit": {"type": "boolean"},
    },
    "required": ["turns"],
    "additionalProperties": False,
}


def _param_text(name: str, doc: JSON, required: bool) -> str:
    t = str(doc.get("type", "any"))
    if isinstance(doc.get("enum"), list):
        t = "|".join(json.dumps(v) for v in doc["enum"])
    if not required and "default" in doc:
        return f"{name}: {t} = {json.dumps(doc['default'])}"
    return f"{name}{'' if required else '?'}: {t}"


def signature_line(fn: JSON) -> str:
    """`name(arg: type, opt?: type = default): what it does` (the doc's own "Tool description" part)."""
    params = fn.get("parameters") or {}
    required = set(params.get("required") or [])
    args = ", ".join(
        _param_text(k, v or {}, k in required) for k, v in (params.get("properties") or {}).items()
    )
    desc = str(fn.get("description", ""))
    desc = desc.split("Tool description:", 1)[-1].strip()
    return f"- {fn['name']}({args}): {desc}"


def multi_turn_instruction(functions: list[JSON]) -> str:
    """The standing instruction of an episode (the system message of the agent loop)."""
    return (
        "You operate tools for the user. In each step reply with one JSON object "
        '{"calls": [{"name": <function name>, "arguments": {<argument>: <value>}}]} listing the calls to run '
        "now; you will see their results. When the user's current request is done (or no function fits), "
        'reply {"calls": []}.\nAvailable functions:\n' + "\n".join(signature_line(f) for f in functions)
    )


def read_multi_turn(category: str, data_dir: Path | None) -> TaskSource:
    """Items, canonical episode records and files of one multi-turn category."""
    name = f"bfcl/{category}"
    qfile = read_file(f"BFCL_v4_{category}.json", data_dir)
    afile = read_file(f"possible_answer/BFCL_v4_{category}.json", data_dir)
    if qfile is None or afile is None:
        raise DataError(
            f"task {name!r} needs BFCL_v4_{category}.json and its possible answers: put them in "
            "<data dir>/bfcl/ or install the `[bfcl]` extra (pip install --no-deps bfcl-eval)"
        )
    files = [qfile, afile]
    docs: dict[str, list[JSON]] = {}
    answers = {a["id"]: a["ground_truth"] for a in _jsonl(afile.data, afile.relpath)}
    items, records = [], []
    for q in _jsonl(qfile.data, qfile.relpath):
        classes = list(q.get("involved_classes") or [])
        unknown = [c for c in classes if c not in FUNC_DOC_FILES]
        if unknown or not classes:
            raise DataError(
                f"{qfile.relpath}: item {q.get('id')!r} uses unsupported classes {unknown or classes}"
            )
        for c in classes:
            if c not in docs:
                f = read_file(f"multi_turn_func_doc/{FUNC_DOC_FILES[c]}", data_dir)
                if f is None:
                    raise DataError(
                        f"task {name!r}: no function docs multi_turn_func_doc/{FUNC_DOC_FILES[c]}"
                    )
                files.append(f)
                docs[c] = _jsonl(f.data, f.relpath)
        if q["id"] not in answers:
            raise DataError(f"task {name!r}: item {q['id']!r} has no possible answer")
        truth = answers[q["id"]]
        if len(truth) != len(q["question"]):
            raise DataError(
                f"task {name!r}: item {q['id']!r} has {len(truth)} answer turns for {len(q['question'])} turns"
            )
        functions = [f for c in classes for f in docs[c]]
        record = canonical_episode(truth, _signatures(classes))
        records.append(record)
        items.append(
            TaskItem(
                id=q["id"],
                schema=episode_schema(functions, len(truth)),
                instruction=multi_turn_instruction(functions),
                meta={
                    "multi_turn": True,
                    "category": category,
                    "functions": functions,
                    "call_schema": item_schema(functions),
                    "turns": q["question"],
                    "initial_config": q.get("initial_config") or {},
                    "involved_classes": classes,
                    "ground_truth": truth,
                    "record": record,
                },
            )
        )
    return TaskSource(
        records=records,
        instruction=f"BFCL {category}: carry out each multi-turn conversation with tool calls",
        rubric=(),
        files=files,
        title="Tool-call episode",
        schema=EPISODE_SCHEMA,
        meta={"bfcl_category": category, "n_items_total": len(items), "multi_turn": True},
        items=tuple(items),
    )
