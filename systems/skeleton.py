"""Schema skeletons for infilling: the JSON structure is fixed text, the diffusion LM fills value slots.

A `SkeletonPlan` is derived deterministically from a task (schema + references) and a token counter: for
every leaf path it knows the value kind, the enum, and a token budget (a high quantile of the references'
value lengths plus one, capped); for objects, how often each optional key occurs; for arrays, the observed
lengths. `sample(rng)` draws one skeleton tree (optional keys and array lengths drawn from the references'
frequencies); `of_record(record)` gives the tree of a real record (the embedded DLM trains on it, so it
learns the padded-slot form it will see at inference). `segments(tree)` flattens a tree into literal
JSON text and `Slot`s; `build_record(tree, slot_texts)` turns the filled slot texts back into a record,
applying value-level constraints (enum snapping, number parsing with a reference fallback). The output is
always serialised with `json.dumps`, so it parses by construction; what the DLM controls is the values.
"""

from __future__ import annotations

import difflib
import json
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.tasks.schema import json_kind
from bench.types import JSON, TaskSpec

SlotKind = str  # "string" | "integer" | "number" | "enum" | "boolean"


@dataclass(frozen=True)
class Slot:
    """One value hole: `budget` token positions the DLM fills (value tokens, then slot-pad tokens)."""

    path: str
    kind: SlotKind
    budget: int
    enum: tuple[str, ...] = ()
    nonempty: bool = True


@dataclass
class Leaf:
    slot: Slot
    value_text: str | None = None  # the value as it appears inside the JSON text (training only)


@dataclass
class Const:
    value: Any  # null (or anything the DLM does not choose)


@dataclass
class Obj:
    items: list[tuple[str, Node]]


@dataclass
class Arr:
    items: list[Node]


Node = Leaf | Const | Obj | Arr
Segment = str | Slot


def _schema_at(schema: JSON, kind: str) -> JSON:
    """The branch of `schema` (possibly anyOf) that describes values of `kind`."""
    for branch in schema.get("anyOf", [schema]):
        t = branch.get("type")
        if t == kind or (kind == "integer" and t == "number") or (isinstance(t, list) and kind in t):
            return branch
    return schema


def value_text(v: Any) -> str:
    """How a leaf value is spelled inside the JSON text: strings without their quotes, escaped."""
    return json.dumps(v, ensure_ascii=False)[1:-1] if isinstance(v, str) else json.dumps(v)


@dataclass
class PathStats:
    kinds: Counter[str] = field(default_factory=Counter)
    lengths: list[int] = field(default_factory=list)  # token lengths (leaves) or item counts (arrays)
    key_counts: Counter[str] = field(default_factory=Counter)  # objects: how often each key occurs
    key_order: list[str] = field(default_factory=list)
    n_objects: int = 0
    samples: list[Any] = field(default_factory=list)  # leaf values, for number fallbacks


class SkeletonPlan:
    """Per-path statistics of a task's references, plus the schema, that skeletons are drawn from."""

    def __init__(
        self,
        schema: JSON,
        references: Sequence[JSON],
        count_tokens: Callable[[str], int],
        max_slot_tokens: int = 24,
        quantile: float = 0.9,
    ) -> None:
        self.schema = schema
        self.stats: dict[str, PathStats] = defaultdict(PathStats)
        self._count = count_tokens
        self._slots: dict[tuple[str, str], Slot] = {}
        for r in references:
            self._walk("", r, schema)
        self.budgets: dict[str, int] = {}
        for path, st in sorted(self.stats.items()):
            if st.kinds and st.lengths and not (st.kinds.keys() & {"array", "object"}):
                q = sorted(st.lengths)[min(len(st.lengths) - 1, int(quantile * len(st.lengths)))]
                self.budgets[path] = max(1, min(max_slot_tokens, q + 1))

    def _walk(self, path: str, v: Any, schema: JSON) -> None:
        k = json_kind(v)
        st = self.stats[path]
        st.kinds[k] += 1
        sub = _schema_at(schema, k)
        if k == "object":
            st.n_objects += 1
            props = sub.get("properties", {})
            for key, child in v.items():
                if key not in st.key_counts:
                    st.key_order.append(key)
                st.key_counts[key] += 1
                self._walk(f"{path}.{key}" if path else key, child, props.get(key, {}))
        elif k == "array":
            st.lengths.append(len(v))
            for item in v:
                self._walk(f"{path}[]", item, sub.get("items", {}))
        elif k != "null":
            st.lengths.append(self._count(value_text(v)))
            if len(st.samples) < 200:
                st.samples.append(v)

    def tokens(self, text: str) -> int:
        """Token count of `text` in the plan's tokenizer (slot budgets are in these tokens)."""
        return self._count(text)

    # ------------------------------------------------------------------ slots
    def slot(self, path: str, kind: str, schema: JSON) -> Slot:
        key = (path, kind)
        if key not in self._slots:
            self._slots[key] = self._make_slot(path, kind, schema)
        return self._slots[key]

    def _make_slot(self, path: str, kind: str, schema: JSON) -> Slot:
        sub = _schema_at(schema, kind)
        budget = self.budgets.get(path, 4)
        if kind == "boolean":
            return Slot(path, "boolean", budget, ("true", "false"))
        if kind == "string" and "enum" in sub:
            enum = tuple(str(e) for e in sub["enum"] if isinstance(e, str))
            longest = max((self._count(value_text(e)) for e in enum), default=1)
            return Slot(path, "enum", max(budget, min(longest, 24)), enum)
        if kind in ("integer", "number"):
            return Slot(path, kind, budget)
        nonempty = sub.get("minLength", 0) > 0 or all(self.stats[path].samples)
        return Slot(path, "string", budget, (), nonempty)

    # ------------------------------------------------------------------ trees
    def of_record(self, record: Any, path: str = "", schema: JSON | None = None) -> Node:
        """The skeleton tree of a real record, with each leaf's value text (training form)."""
        schema = self.schema if schema is None else schema
        k = json_kind(record)
        sub = _schema_at(schema, k)
        if k == "object":
            props = sub.get("properties", {})
            return Obj(
                [
                    (key, self.of_record(v, f"{path}.{key}" if path else key, props.get(key, {})))
                    for key, v in record.items()
                ]
            )
        if k == "array":
            return Arr([self.of_record(v, f"{path}[]", sub.get("items", {})) for v in record])
        if k == "null":
            return Const(None)
        return Leaf(self.slot(path, k, schema), value_text(record))

    def sample(self, rng: random.Random, path: str = "", schema: JSON | None = None) -> Node:
        """Draw a skeleton: kinds, optional keys and array lengths follow the references' frequencies."""
        schema = self.schema if schema is None else schema
        st = self.stats.get(path)
        if st is None or not st.kinds:
            kind = schema.get("type") if isinstance(schema.get("type"), str) else "string"
        else:
            kinds = sorted(st.kinds)
            kind = rng.choices(kinds, weights=[st.kinds[k] for k in kinds])[0]
        sub = _schema_at(schema, kind)
        if kind == "object":
            required = set(sub.get("required", []))
            props = sub.get("properties", {})
            order = (st.key_order if st else []) + [k for k in props if not st or k not in st.key_order]
            items = []
            for key in order:
                if key not in props and sub.get("additionalProperties") is False:
                    continue
                freq = (st.key_counts[key] / st.n_objects) if st and st.n_objects else 0.0
                if key in required or rng.random() < freq:
                    items.append(
                        (key, self.sample(rng, f"{path}.{key}" if path else key, props.get(key, {})))
                    )
            if not items and sub.get("minProperties", 0) > 0 and order:
                key = order[0]
                items.append((key, self.sample(rng, f"{path}.{key}" if path else key, props.get(key, {}))))
            return Obj(items)
        if kind == "array":
            n = rng.choice(st.lengths) if st and st.lengths else sub.get("minItems", 0)
            n = max(n, sub.get("minItems", 0))
            if "maxItems" in sub:
                n = min(n, sub["maxItems"])
            return Arr([self.sample(rng, f"{path}[]", sub.get("items", {})) for _ in range(n)])
        if kind == "null":
            return Const(None)
        return Leaf(self.slot(path, kind, schema))

    def shrink(self, tree: Node, fits: Callable[[Node], bool], schema: JSON | None = None) -> Node:
        """Drop trailing array items (longest array first, never below minItems) until `fits(tree)`."""
        while not fits(tree):
            arrays = [a for a in _arrays(tree) if len(a.items) > 1]
            if not arrays:
                break
            max(arrays, key=lambda a: len(a.items)).items.pop()
        return tree

    def fallback(self, path: str, rng: random.Random) -> Any:
        samples = self.stats[path].samples if path in self.stats else []
        return rng.choice(samples) if samples else 0


def _arrays(tree: Node) -> list[Arr]:
    out: list[Arr] = []
    if isinstance(tree, Arr):
        out.append(tree)
        for it in tree.items:
            out.extend(_arrays(it))
    elif isinstance(tree, Obj):
        for _, v in tree.items:
            out.extend(_arrays(v))
    return out


def segments(tree: Node) -> list[Segment]:
    """Literal JSON text pieces and slots, in order; adjacent literals are merged."""
    out: list[Segment] = []

    def lit(s: str) -> None:
        if out and isinstance(out[-1], str):
            out[-1] += s
        else:
            out.append(s)

    def walk(n: Node) -> None:
        if isinstance(n, Obj):
            lit("{")
            for i, (k, v) in enumerate(n.items):
                lit((", " if i else "") + json.dumps(k, ensure_ascii=False) + ": ")
                walk(v)
            lit("}")
        elif isinstance(n, Arr):
            lit("[")
            for i, v in enumerate(n.items):
                if i:
                    lit(", ")
                walk(v)
            lit("]")
        elif isinstance(n, Const):
            lit(json.dumps(n.value))
        else:
            quoted = n.slot.kind in ("string", "enum")
            if quoted:
                lit('"')
            out.append(n.slot)
            if quoted:
                lit('"')

    walk(tree)
    return out


def leaves(tree: Node) -> list[Leaf]:
    if isinstance(tree, Leaf):
        return [tree]
    if isinstance(tree, Obj):
        return [leaf for _, v in tree.items for leaf in leaves(v)]
    if isinstance(tree, Arr):
        return [leaf for v in tree.items for leaf in leaves(v)]
    return []


@dataclass
class SlotRepair:
    """A value-level constraint that changed what the DLM wrote (reported in the trace)."""

    path: str
    kind: str
    raw: str
    value: Any


def slot_value(
    slot: Slot, text: str, plan: SkeletonPlan, rng: random.Random
) -> tuple[Any, SlotRepair | None]:
    """Turn a filled slot's text into a value of the slot's kind, repairing it when it is not one."""
    text = text.strip() if slot.kind != "string" else text
    if slot.kind == "string":
        try:
            v = json.loads('"' + text + '"')
        except json.JSONDecodeError:
            v = text
        if slot.nonempty and not v.strip():
            v2 = plan.fallback(slot.path, rng)
            return v2, SlotRepair(slot.path, slot.kind, text, v2)
        return v, None
    if slot.kind in ("enum", "boolean"):
        if text in slot.enum:
            v = text
            rep = None
        else:
            close = difflib.get_close_matches(text, list(slot.enum), n=1, cutoff=0.0)
            v = close[0] if close else rng.choice(list(slot.enum))
            rep = SlotRepair(slot.path, slot.kind, text, v)
        if slot.kind == "boolean":
            return v == "true", rep
        try:
            return json.loads('"' + v + '"'), rep
        except json.JSONDecodeError:
            return v, rep
    try:
        num = json.loads(text)
        if slot.kind == "integer" and isinstance(num, int) and not isinstance(num, bool):
            return num, None
        if (
            slot.kind == "number"
            and isinstance(num, int | float)
            and not isinstance(num, bool)
            and math.isfinite(num)
        ):
            return num, None
    except (json.JSONDecodeError, ValueError):
        pass
    v = plan.fallback(slot.path, rng)
    return v, SlotRepair(slot.path, slot.kind, text, v)


def build_record(
    tree: Node, slot_texts: Sequence[str], plan: SkeletonPlan, rng: random.Random
) -> tuple[Any, list[SlotRepair]]:
    """Fill the tree's leaves (in `segments` order) with the slot texts; returns (record, repairs)."""
    it = iter(slot_texts)
    repairs: list[SlotRepair] = []

    def walk(n: Node) -> Any:
        if isinstance(n, Obj):
            return {k: walk(v) for k, v in n.items}
        if isinstance(n, Arr):
            return [walk(v) for v in n.items]
        if isinstance(n, Const):
            return n.value
        v, rep = slot_value(n.slot, next(it), plan, rng)
        if rep:
            repairs.append(rep)
        return v

    return walk(tree), repairs


def plan_for_task(
    spec: TaskSpec, count_tokens: Callable[[str], int], max_slot_tokens: int = 24
) -> SkeletonPlan:
    return SkeletonPlan(spec.schema, spec.references, count_tokens, max_slot_tokens)
