"""Bounded schemas: caps that make every output finite, optionally derived from reference records.

Why derive caps from references: a fixed cap (say 160 characters) either cuts off real records (a
TruthfulQA answer list, a MultiWOZ introduction) or wastes the token budget on fields that are always
short. The caps are instead the longest string / the largest array seen at each schema location in the
task's references (a quantile of them when the whole record must fit a token budget), so the grammar can
write what the data holds. Every cap only shrinks the language, so the bounded schema stays a subset.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.types import JSON
from systems.backends.grammar.compiler import ptr_join
from systems.backends.grammar.limits import GrammarLimits


@dataclass
class FieldCaps:
    """What the references hold at one schema location."""

    lengths: list[int] = field(default_factory=list)  # UTF-8 bytes of each string's JSON text, no quotes
    counts: list[int] = field(default_factory=list)  # sizes of each array
    texts: list[int] = field(default_factory=list)  # bytes of each array's text between the brackets
    empty: bool = False  # some string was ""


@dataclass
class ReferenceCaps:
    fields: dict[str, FieldCaps]
    int_digits: int = 0
    frac_digits: int = 0

    def at(self, q: float) -> dict[str, dict[str, int | bool]]:
        """Per-location caps at quantile `q` (1.0: the largest value seen)."""
        out: dict[str, dict[str, int | bool]] = {}
        for ptr, f in self.fields.items():
            caps: dict[str, int | bool] = {"nonempty": not f.empty}
            if f.lengths:
                caps["maxLength"] = _quantile(f.lengths, q)
            if f.counts:
                caps["maxItems"] = _quantile(f.counts, q)
                caps["maxBytes"] = _quantile(f.texts, q)
            out[ptr] = caps
        return out


def _quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def string_bytes(text: str) -> int:
    """Bytes of a string's JSON text without the quotes (raw UTF-8, escapes where JSON needs them)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8")) - 2


def array_bytes(value: list) -> int:
    """Bytes of an array's JSON text between the brackets (one space after each comma)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8")) - 2


def byte_capped_array(node: Any) -> bool:
    """Can this array be capped by its total text (`x-maxBytes`)? Plain strings, at most 1 required.

    Why: a cap per item times a cap on the count makes the longest array far longer than any real one
    (14 TruthfulQA answers of 274 bytes each); one budget for the whole text does not.
    """
    if not isinstance(node, dict) or "prefixItems" in node or "maxItems" in node:
        return False
    if int(node.get("minItems", 0)) > 1 or node.get("uniqueItems") or "contains" in node:
        return False
    item = node.get("items")
    if not isinstance(item, dict) or item.get("type") != "string":
        return False
    plain = {"type", "minLength", "maxLength", "title", "description", "examples", "default"}
    return set(item) <= plain and int(item.get("minLength", 0)) <= 1 and "maxLength" not in item


def value_children(node: dict, ptr: str, value: Any) -> Iterator[tuple[Any, str, Any]]:
    """(subschema, pointer, member value) for each member of `value` that has a subschema of its own here.

    The one descent both walkers share (`reference_caps`, `record_sizes`): an array item goes to its
    `prefixItems` entry, else to `items` (a schema); an object member to its `properties` entry. Members
    without one (additional properties, items past a boolean `items`) carry no cap location.
    """
    if isinstance(value, list):
        prefix = node.get("prefixItems") or []
        for i, v in enumerate(value):
            if i < len(prefix):
                yield prefix[i], ptr_join(ptr, "prefixItems", i), v
            elif isinstance(node.get("items"), dict):
                yield node["items"], ptr_join(ptr, "items"), v
    elif isinstance(value, dict):
        props = node.get("properties") or {}
        for k, v in value.items():
            if k in props:
                yield props[k], ptr_join(ptr, "properties", k), v


def reference_caps(schema: JSON, records: Iterable[Any]) -> ReferenceCaps:
    """Walk each record beside the schema (properties, items, prefixItems) and collect its sizes."""
    out = ReferenceCaps({})

    def walk(node: Any, ptr: str, value: Any) -> None:
        if not isinstance(node, dict):
            return
        f = out.fields.setdefault(ptr, FieldCaps())
        if isinstance(value, str):
            f.lengths.append(string_bytes(value))
            f.empty = f.empty or value == ""
        elif isinstance(value, list):
            f.counts.append(len(value))
            f.texts.append(array_bytes(value))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            text = repr(value)
            whole, _, frac = text.lstrip("-").partition(".")
            if "e" not in text:
                out.int_digits = max(out.int_digits, len(whole))
                out.frac_digits = max(out.frac_digits, len(frac))
        for child in value_children(node, ptr, value):
            walk(*child)

    for record in records:
        walk(schema, "#", record)
    return out


def bounded_schema(
    schema: JSON, limits: GrammarLimits | None = None, caps: dict[str, dict[str, int | bool]] | None = None
) -> JSON:
    """A copy of `schema` whose every string, array and integer is bounded (a subset of its language).

    Any grammar engine (ours, llama.cpp's converter, a server's `response_format`) then produces finite
    outputs: strings get `maxLength`, arrays `maxItems`, integers a digit range, and required free-text
    strings `minLength: 1` (unless a reference holds an empty string there). `caps` (from
    `ReferenceCaps.at`) gives per-location `maxLength` / `maxItems` in place of the flat limits.
    """
    limits = limits or GrammarLimits()
    caps = caps or {}
    top = 10**limits.max_int_digits - 1

    def walk(node: Any, ptr: str, required: bool) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            if isinstance(out.get(key), list):
                out[key] = [walk(b, ptr_join(ptr, key, i), required) for i, b in enumerate(out[key])]
        for key in ("$defs", "definitions"):
            if isinstance(out.get(key), dict):
                out[key] = {k: walk(v, ptr_join(ptr, key, k), True) for k, v in out[key].items()}
        if isinstance(out.get("properties"), dict):
            req = set(out.get("required") or [])
            out["properties"] = {
                k: walk(v, ptr_join(ptr, "properties", k), k in req) for k, v in out["properties"].items()
            }
        for key in ("items", "additionalProperties"):
            if isinstance(out.get(key), dict):
                out[key] = walk(out[key], ptr_join(ptr, key), True)
        here = caps.get(ptr, {})
        types = out.get("type")
        kinds = set(types) if isinstance(types, list) else {types}
        free = not any(k in out for k in ("enum", "const", "format", "pattern", "$ref"))
        if "string" in kinds and free:
            lo = int(out.get("minLength", 0))
            if "maxLength" in here:
                cap = max(lo, int(here["maxLength"]))
                out["maxLength"] = min(int(out.get("maxLength", cap)), cap)
            else:
                out.setdefault("maxLength", max(lo, limits.max_string_chars))
            nonempty = limits.nonempty_required_strings and bool(here.get("nonempty", True))
            if required and nonempty and "minLength" not in out and out["maxLength"] > 0:
                out["minLength"] = 1
        if "array" in kinds and "maxBytes" in here and byte_capped_array(node):
            total = int(here["maxBytes"])
            out["x-maxBytes"] = total  # our compiler's cap; the two below only bound other engines
            out["maxItems"] = max(int(out.get("minItems", 0)), (total + 1) // 3)
            out["items"] = {**out["items"], "maxLength": total}
        elif "array" in kinds:
            lo = int(out.get("minItems", 0))
            if "maxItems" in here:
                cap = max(lo, int(here["maxItems"]))
                out["maxItems"] = min(int(out.get("maxItems", cap)), cap)
            elif "maxItems" not in out:
                out["maxItems"] = max(lo, limits.max_items)
        if "integer" in kinds and free and kinds == {"integer"}:
            if not any(k in out for k in ("minimum", "exclusiveMinimum")):
                out["minimum"] = -top
            if not any(k in out for k in ("maximum", "exclusiveMaximum")):
                out["maximum"] = top
        return out

    return walk(schema, "#", True)


# ------------------------------------------------------------------------------------------ fitting
def record_sizes(schema: JSON, record: Any) -> dict[tuple[str, str], int]:
    """Per (location, cap): the largest string (bytes), array (items, text bytes) this record holds."""
    out: dict[tuple[str, str], int] = {}

    def put(key: tuple[str, str], v: int) -> None:
        out[key] = max(out.get(key, 0), v)

    def walk(node: Any, ptr: str, value: Any) -> None:
        if not isinstance(node, dict):
            return
        if isinstance(value, str):
            put((ptr, "maxLength"), string_bytes(value))
        elif isinstance(value, list):
            put((ptr, "maxItems"), len(value))
            put((ptr, "maxBytes"), array_bytes(value))
        for child in value_children(node, ptr, value):
            walk(*child)

    walk(schema, "#", record)
    return out


def fit_caps(
    schema: JSON,
    records: list[Any],
    caps: dict[str, dict[str, int | bool]],
    size: Any,
    budget: int,
) -> tuple[dict[str, dict[str, int | bool]], int] | None:
    """Lower per-location caps until `size(caps) + 1 <= budget`, losing as few records as possible.

    Greedy: each step lowers one cap to the next size some still-accepted record holds, choosing the
    step that loses the fewest records per byte saved (steps that lose none first). The saving is
    estimated (a string cap times the item caps around it; an item cap times its item's string cap)
    and checked with the real `size` at the end. Returns the caps and the records still accepted, or
    None if no caps fit.
    """
    sizes = [record_sizes(schema, r) for r in records]
    caps = {p: dict(c) for p, c in caps.items()}
    kinds = {}
    for p, c in caps.items():
        for k in ("maxBytes", "maxLength", "maxItems"):  # one cap per location, the budget first
            if k in c:
                kinds[p] = k
                break

    def value(i: int, p: str) -> int:
        return sizes[i].get((p, kinds[p]), 0)

    def accepted(i: int) -> bool:
        return all(value(i, p) <= int(caps[p][k]) for p, k in kinds.items())

    alive = {i for i in range(len(records)) if accepted(i)}

    def mult(ptr: str) -> int:
        m = 1
        parts = ptr.split("/")
        for j in range(len(parts)):
            if parts[j] == "items":
                outer = "/".join(parts[:j])
                m *= int(caps.get(outer, {}).get("maxItems", 1))
        return m

    def item_cost(ptr: str) -> int:
        inner = caps.get(ptr_join(ptr, "items"), {})
        return int(inner.get("maxLength", 1)) + 4  # quotes, comma and space

    for _ in range(8):
        excess = size(caps) + 1 - budget
        if excess <= 0:
            return caps, len(alive)
        while excess > 0:
            best = None
            for p, k in kinds.items():
                cur = int(caps[p][k])
                below = [value(i, p) for i in alive if value(i, p) < cur]
                new = max(below) if below else max(cur - 1, 0)
                if new >= cur or (k == "maxLength" and new < 1 and cur <= 1):
                    continue
                lost = sum(1 for i in alive if value(i, p) > new)
                saving = (cur - new) * (item_cost(p) if k == "maxItems" else mult(p))
                score = (lost / min(saving, excess), -saving)
                if best is None or score < best[0]:
                    best = (score, p, k, new, saving)
            if best is None:
                return None
            _, p, k, new, saving = best
            caps[p][k] = new
            alive = {i for i in alive if value(i, p) <= new}
            excess -= saving
    return None


def schema_at(schema: Any, ptr: str) -> Any:
    """The subschema at a JSON pointer made by `ptr_join` (None if it does not resolve)."""
    node = schema
    for token in ptr.split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


LOCAL_KEYS = ("x-grammar", "x-maxBytes")


def without_local_annotations(schema: Any) -> Any:
    """A copy without our compiler's annotations, for servers that apply the schema themselves."""
    if isinstance(schema, dict):
        return {k: without_local_annotations(v) for k, v in schema.items() if k not in LOCAL_KEYS}
    if isinstance(schema, list):
        return [without_local_annotations(v) for v in schema]
    return schema
