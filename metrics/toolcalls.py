"""Tool-call metrics for `bfcl/<category>`: AST accuracy, irrelevance accuracy, and a failure taxonomy.

The AST check follows BFCL's checker (Patil et al., ICML 2025; bfcl-eval's
`eval_checker/ast_eval/ast_checker.py`), re-written here and cross-checked against it item by item in
tests/test_toolcalls_bfcl_agreement.py: the function name; every required parameter present; no parameter
outside the doc or the possible answer; the Python type of each value (an int passes as a float; a value
of the possible answer's own type passes as a "variable"; lists checked one level deep); the value among
the acceptable ones after BFCL's string normalisation (spaces and `,./-_*^` dropped, lower case, ' -> ");
every answer parameter that may not be omitted present. `simple` categories expect exactly one call,
`multiple` one call of the answer's function, and `parallel` categories the right number of calls matched
to the answers in any order (BFCL's greedy first-match). Irrelevance items are correct when the output
holds no decodable call (BFCL counts an undecodable answer as an abstention).

Each sample gets one failure class (the first check that fails, as BFCL reports its first error), or None:
invalid_syntax (no JSON object holding a list of `{"name": str, "arguments": object}` calls),
wrong_function, missing_required, unexpected_argument, wrong_type, wrong_value, hallucinated_call (a call
on an irrelevance item) and call_count_mismatch. The taxonomy metrics are the share of scored samples
(each sample is one model turn of calls) in each class; scored rows carry `ast_valid` and `failure`.
Multi-turn items (`bfcl/multi_turn_base`) are scored by metrics/multiturn.py instead (NaN here).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bench.types import JSON
from metrics.cell import NAN, CellView
from metrics.registry import TOOLCALL_FAILURE_CLASSES

FAILURE_CLASSES = TOOLCALL_FAILURE_CLASSES  # one list: the registry names a metric per class

#: BFCL parameter type -> the Python type its value must have (BFCL's PYTHON_TYPE_MAPPING semantics).
PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
_NESTED = ("array", "tuple")
_PUNCT = re.compile(r"[ ,./\-_*^]")


def normalise(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ,./-_*^, lower-case, single quotes to double."""
    return _PUNCT.sub("", text).lower().replace("'", '"')


def decode_calls(record: Any) -> list[tuple[str, dict]] | None:
    """A parsed record -> [(name, arguments)], or None when it is not a well-formed call record."""
    if not isinstance(record, dict) or not isinstance(record.get("calls"), list):
        return None
    calls = []
    for call in record["calls"]:
        if not isinstance(call, dict):
            return None
        name, args = call.get("name"), call.get("arguments")
        if not isinstance(name, str) or not isinstance(args, dict):
            return None
        calls.append((name, args))
    return calls


# ----------------------------------------------------------------------------------- value checks
def _answer_type(acceptable: list) -> type | None:
    """Type of the first acceptable value that is not the "may be omitted" marker ""."""
    for v in acceptable:
        if v != "":
            return type(v)
    return None


def _type_ok(value: Any, acceptable: list, expected: type, nested: type | None) -> tuple[bool, bool]:
    """(type passes, value is a "variable"): BFCL's type rule, lists checked one level deep."""
    answer_type = _answer_type(acceptable)
    variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return True, variable
        for alternative in acceptable:
            if not isinstance(alternative, list):
                return True, variable  # BFCL accepts at the first non-list alternative
            if all(_type_ok(v, alternative, nested, None)[0] for v in value):
                return True, variable
        return False, variable
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, variable


def _norm(v: Any) -> Any:
    return normalise(v) if isinstance(v, str) else v


def _dict_ok(value: dict, acceptable: list) -> bool:
    for alternative in acceptable:
        if alternative == "" or not isinstance(alternative, dict):
            continue
        keys_ok = all(
            k in alternative and _norm(v) in [_norm(a) for a in alternative[k]] for k, v in value.items()
        )
        if keys_ok and all(k in value or "" in vals for k, vals in alternative.items()):
            return True
    return False


def _list_of_dicts_ok(value: list, acceptable: list) -> bool:
    for alternative in acceptable:
        if not hasattr(alternative, "__len__") or len(value) != len(alternative):
            continue
        if all(isinstance(v, dict) and _dict_ok(v, [alternative[i]]) for i, v in enumerate(value)):
            return True
    return False


def _list_ok(value: list, acceptable: list) -> bool:
    mine = [_norm(v) for v in value]
    return any(
        mine == [_norm(a) for a in alternative]
        for alternative in acceptable
        if isinstance(alternative, (list, str))
    )


def _value_ok(value: Any, acceptable: list, expected: type, nested: type | None) -> bool:
    if expected is dict:
        return isinstance(value, dict) and _dict_ok(value, acceptable)
    if expected is list and nested is dict:
        return isinstance(value, list) and _list_of_dicts_ok(value, acceptable)
    if expected is str:
        return _norm(value) in [normalise(a) for a in acceptable if isinstance(a, str)]
    if expected is list:
        return isinstance(value, list) and _list_ok(value, acceptable)
    return value in acceptable


def check_call(doc: JSON, name: str, args: dict, answer: JSON) -> str | None:
    """One call against one function doc and one expected call `{name: {param: [acceptable]}}`:
    None when it matches, else the failure class."""
    ((_, expected_args),) = answer.items()
    if name != doc["name"]:
        return "wrong_function"
    params = doc.get("parameters") or {}
    props = params.get("properties") or {}
    if any(p not in args for p in params.get("required") or []):
        return "missing_required"
    for param, value in args.items():
        if param not in props or param not in expected_args:
            return "unexpected_argument"
        type_name = str((props[param] or {}).get("type"))
        expected = PY_TYPES.get(type_name, str)
        nested = None
        if type_name in _NESTED:
            nested = PY_TYPES.get(str(((props[param] or {}).get("items") or {}).get("type")), str)
        if type_name == "float" and type(value) is int:
            value = float(value)
        acceptable = expected_args[param]
        ok, variable = _type_ok(value, acceptable, expected, nested)
        if not ok:
            return "wrong_type"
        good = value in acceptable if variable else _value_ok(value, acceptable, expected, nested)
        if not good:
            return "wrong_value"
    if any(p not in args and "" not in vals for p, vals in expected_args.items()):
        return "missing_required"  # BFCL: an answer parameter that may not be omitted is missing
    return None


def _doc(functions: list[JSON], name: str) -> JSON | None:
    return next((f for f in functions if f.get("name") == name), None)


def check_calls(
    calls: list[tuple[str, dict]], functions: list[JSON], truth: list[JSON], category: str
) -> str | None:
    """A decoded turn against an item's possible answer, by category (BFCL's dispatch)."""
    if "irrelevance" in category:
        return "hallucinated_call" if calls else None
    if len(calls) != (1 if "parallel" not in category and "multiple" not in category else len(truth)):
        return "call_count_mismatch"
    if "parallel" in category:
        used: set[int] = set()
        for answer in truth:
            doc = _doc(functions, next(iter(answer)))
            if doc is None:
                return "wrong_function"
            errors = {}
            for k, (name, args) in enumerate(calls):
                if k in used:
                    continue
                err = check_call(doc, name, args, answer)
                if err is None:
                    used.add(k)
                    break
                errors[k] = err
            else:
                # no output matched this answer: the error against a call of the right function, if any
                same = [e for k, e in errors.items() if calls[k][0] == doc["name"]]
                return same[0] if same else "wrong_function"
        return None
    if "multiple" in category:
        doc = _doc(functions, next(iter(truth[0])))
    else:
        doc = functions[0]
    if doc is None:
        return "wrong_function"
    return check_call(doc, calls[0][0], calls[0][1], truth[0])


# ------------------------------------------------------------------------------------ the metrics
def _classify(cell: CellView) -> list[tuple[bool | None, str | None, bool]]:
    """(ast_valid, failure, is_irrelevance) per judged sample, once per cell; rows get the first two."""
    cached = getattr(cell, "_toolcalls", None)
    if cached is not None:
        return cached
    out: list[tuple[bool | None, str | None, bool]] = []
    for pos, j in enumerate(cell.judged):
        item = cell.spec.item_for(j.sample.index)
        meta = item.meta if item is not None else {}
        category = str(meta.get("category", ""))
        irrelevant = "irrelevance" in category
        if j.harness_failure or item is None or "functions" not in meta or meta.get("multi_turn"):
            out.append((None, None, irrelevant))
            continue
        record = j.extraction.record if j.extraction is not None else None
        calls = decode_calls(record)
        if calls is None:
            failure = None if irrelevant else "invalid_syntax"  # BFCL: no decodable call = abstention
        else:
            try:
                failure = check_calls(calls, meta["functions"], meta.get("ground_truth") or [], category)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:  # malformed values: a failure
                failure = "wrong_value"
                cell.info.setdefault("toolcall_check_errors", []).append(f"{item.id}: {exc}")
        out.append((failure is None, failure, irrelevant))
        cell.row_extras.setdefault(pos, {}).update(
            {"item_id": item.id, "ast_valid": failure is None, "failure": failure}
        )
    cell._toolcalls = out  # type: ignore[attr-defined]
    return out


def _share(cell: CellView, keep) -> float:
    rows = [r for r in _classify(cell) if r[0] is not None and keep(r)]
    return sum(bool(r[0]) for r in rows) / len(rows) if rows else NAN


def ast_accuracy(cell: CellView) -> float:
    """Share of scored samples on relevant (call-expecting) items whose calls pass the AST check."""
    return _share(cell, lambda r: not r[2])


def irrelevance_accuracy(cell: CellView) -> float:
    """Share of scored samples on irrelevance items that make no call."""
    return _share(cell, lambda r: r[2])


def failure_share(cell: CellView, kind: str) -> float:
    """Share of scored samples whose failure class is `kind`."""
    rows = [r for r in _classify(cell) if r[0] is not None]
    return sum(r[1] == kind for r in rows) / len(rows) if rows else NAN


def failure_metric(prefix: str, kind: str, share: Callable[[CellView, str], float], what: str):  # noqa: ANN201
    """A named metric `<prefix><kind>`: the share of scored `what` whose failure class is `kind`
    (one factory for the single-turn and the multi-turn failure taxonomies)."""

    def metric(cell: CellView) -> float:
        return share(cell, kind)

    metric.__name__ = f"{prefix}{kind}"
    metric.__doc__ = f"Share of scored {what} whose failure class is {kind}."
    return metric


def _make(kind: str):  # noqa: ANN202
    return failure_metric("failure_", kind, failure_share, "tool-call samples")


failure_invalid_syntax = _make("invalid_syntax")
failure_wrong_function = _make("wrong_function")
failure_missing_required = _make("missing_required")
failure_unexpected_argument = _make("unexpected_argument")
failure_wrong_type = _make("wrong_type")
failure_wrong_value = _make("wrong_value")
failure_hallucinated_call = _make("hallucinated_call")
failure_call_count_mismatch = _make("call_count_mismatch")
