"""`llada-skeleton` on BFCL tool calls (ours): the call's skeleton from the item's function docs, infilled.

A task-wide skeleton cannot serve tool calls: which argument keys a call has depends on which function it
names. So each sample is filled in two passes over the same prompt (systems/tool_prompt.py):

1. **Names.** The skeleton `{"calls": [{"name": <slot>}, ...]}`; each name slot is an *enum slot* over the
   item's function names (pieces of those names only, snapped to the closest one). An item with one
   function skips this pass: its name is literal text.
2. **Arguments.** For each chosen function, `{"name": "<name>", "arguments": {...}}` with one slot per
   parameter, typed by the doc: `string`/`any` string slots, `integer`, `float` number slots, `boolean`,
   `enum` from the doc's enum, arrays of the item type, dicts with their documented properties. Every
   required parameter is present; an optional one is present with the probability the references show
   (the share of documented optional parameters that the reference answers set).

The number of calls is drawn from the references' call counts (the same rule as array lengths in every
skeleton), so on `irrelevance` (whose references make no call) the skeleton never calls: its irrelevance
accuracy there measures nothing and docs/systems-diffusion.md says so. Slot budgets come from the trained
plan's per-path budgets (`calls[].arguments.<param>`), else a default per kind. The output is built with
`json.dumps`, so it always parses; the model controls names and values.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from typing import Any

from bench.errors import BenchError
from bench.hashing import stable_hash
from bench.types import JSON, GenerationResult, Sample, SampleStatus, TaskSpec, Usage
from systems.prompting import sample_rng
from systems.skeleton import Arr, Const, Leaf, Node, Obj, SkeletonPlan, Slot, build_record, segments
from systems.skeleton_infill import InfillRow, cached_infill

DEFAULT_BUDGET = {"string": 8, "integer": 4, "number": 5, "boolean": 2}


def call_counts(spec: TaskSpec) -> list[int]:
    """The number of calls in each reference answer (the distribution skeletons draw from)."""
    counts = [len(r.get("calls") or []) for r in spec.references if isinstance(r.get("calls"), list)]
    return counts or [1]


def optional_share(spec: TaskSpec) -> float:
    """Of the optional parameters documented for the reference answers' calls, the share they set."""
    documented = present = 0
    for item in spec.meta.get("reference_items") or []:
        if item is None:
            continue
        docs = {f.get("name"): f for f in item.meta.get("functions") or []}
        for call in (item.meta.get("record") or {}).get("calls") or []:
            params = (docs.get(call["name"]) or {}).get("parameters") or {}
            optional = [
                k for k in params.get("properties") or {} if k not in set(params.get("required") or [])
            ]
            documented += len(optional)
            present += sum(k in call["arguments"] for k in optional)
    return present / documented if documented else 0.0


class ToolSkeletons:
    """Builds the two passes' trees for one task (plan budgets, call counts, optional share)."""

    def __init__(self, spec: TaskSpec, plan: SkeletonPlan):
        self.plan = plan
        self.counts = call_counts(spec)
        self.p_optional = optional_share(spec)

    def _budget(self, path: str, kind: str) -> int:
        return self.plan.budgets.get(path, DEFAULT_BUDGET.get(kind, 8))

    def name_slot(self, names: list[str]) -> Slot:
        longest = max(self.plan.tokens(json.dumps(n)[1:-1]) for n in names)
        return Slot("calls[].name", "enum", min(max(longest, 1), 32), tuple(names))

    def names_tree(self, names: list[str], n: int) -> Node:
        return Obj([("calls", Arr([Obj([("name", Leaf(self.name_slot(names)))]) for _ in range(n)]))])

    def value(self, doc: JSON, path: str, rng: random.Random) -> Node:
        t = str(doc.get("type", "string"))
        if isinstance(doc.get("enum"), list) and doc["enum"] and all(isinstance(e, str) for e in doc["enum"]):
            enum = tuple(doc["enum"])
            longest = max(self.plan.tokens(json.dumps(e)[1:-1]) for e in enum)
            return Leaf(Slot(path, "enum", min(max(longest, 1), 32), enum))
        if t == "boolean":
            return Leaf(Slot(path, "boolean", 2, ("true", "false")))
        if t == "integer":
            return Leaf(Slot(path, "integer", self._budget(path, "integer")))
        if t in ("float", "number"):
            return Leaf(Slot(path, "number", self._budget(path, "number")))
        if t in ("array", "tuple"):
            lengths = self.plan.stats[path].lengths if path in self.plan.stats else []
            n = rng.choice(lengths) if lengths else 1
            return Arr([self.value(doc.get("items") or {}, f"{path}[]", rng) for _ in range(max(1, n))])
        if t == "dict":
            props = doc.get("properties") or {}
            if not props:
                return Const({})
            required = set(doc.get("required") or [])
            return Obj(
                [
                    (k, self.value(v or {}, f"{path}.{k}", rng))
                    for k, v in props.items()
                    if k in required or rng.random() < self.p_optional
                ]
            )
        return Leaf(Slot(path, "string", self._budget(path, "string"), (), True))

    def arguments_tree(self, functions: list[JSON], names: list[str], rng: random.Random) -> Node:
        docs = {f["name"]: f for f in functions}
        calls = []
        for name in names:
            params = docs[name].get("parameters") or {}
            required = set(params.get("required") or [])
            args = [
                (k, self.value(v or {}, f"calls[].arguments.{k}", rng))
                for k, v in (params.get("properties") or {}).items()
                if k in required or rng.random() < self.p_optional
            ]
            calls.append(Obj([("name", Const(name)), ("arguments", Obj(args))]))
        return Obj([("calls", Arr(calls))])


def _row_seed(seed: int, i: int, salt: str) -> int:
    return int(stable_hash({"seed": seed, "i": i, "salt": salt}, 8), 16)


def infill_tool_calls(
    spec: TaskSpec, prompts: Sequence[str], seed: int, backend: Any, knobs: dict[str, Any]
) -> GenerationResult:
    """Both passes for every sample (sample i answers item i modulo the items); one record per sample."""
    plan = backend.skeleton_plan(spec)
    skel = ToolSkeletons(spec, plan)
    usage = Usage()
    t0 = time.perf_counter()
    rngs = [sample_rng(seed, i, "tool-skeleton") for i in range(len(prompts))]
    items = [spec.item_for(i) for i in range(len(prompts))]
    names: list[list[str]] = []
    pass1: list[tuple[int, Node, InfillRow]] = []
    for i, (item, prompt, rng) in enumerate(zip(items, prompts, rngs, strict=True)):
        functions = item.meta["functions"] if item is not None else []
        n = rng.choice(skel.counts) if functions else 0
        all_names = [f["name"] for f in functions]
        if n and len(all_names) > 1:
            tree = skel.names_tree(all_names, n)
            pass1.append((i, tree, InfillRow(prompt, segments(tree), _row_seed(seed, i, "names"))))
            names.append([])
        else:
            names.append(all_names[:1] * n)
    repairs = 0
    try:
        if pass1:
            for (i, tree, _), res in zip(
                pass1, cached_infill(backend, [r for *_, r in pass1], knobs), strict=True
            ):
                record, reps = build_record(tree, res.slot_texts, plan, rngs[i])
                repairs += len(reps)
                names[i] = [c["name"] for c in record["calls"]]
                usage.add_call(res.tokens_in, res.tokens_out, res.cached, res.nfe)
        trees: list[Node] = []
        rows: list[InfillRow | None] = []
        too_long: dict[int, str] = {}
        for i, (item, prompt, rng) in enumerate(zip(items, prompts, rngs, strict=True)):
            tree = skel.arguments_tree(item.meta["functions"] if item is not None else [], names[i], rng)
            plan.shrink(tree, lambda t: backend.skeleton_fits(segments(t)))
            trees.append(tree)
            if not backend.skeleton_fits(segments(tree)):
                # this item's documented arguments do not fit the model's response window even with
                # arrays cut: only this sample is a harness failure, the others are still filled
                too_long[i] = (
                    f"the call skeleton of item {items[i].id if items[i] is not None else i} does not fit the "
                    "model's response window (too many documented arguments)"
                )
                rows.append(None)
                continue
            rows.append(InfillRow(prompt, segments(tree), _row_seed(seed, i, "arguments")))
        needs = [
            j for j, r in enumerate(rows) if r is not None and any(not isinstance(s, str) for s in r.segs)
        ]
        results = dict(
            zip(
                needs,
                cached_infill(backend, [r for j in needs if (r := rows[j]) is not None], knobs)
                if needs
                else [],
                strict=True,
            )
        )
    except BenchError:
        raise
    except Exception as exc:  # a harness failure, never the model's
        err = f"{type(exc).__name__}: {exc}"
        samples = [Sample(i, "", "error", err, SampleStatus.BACKEND_ERROR) for i in range(len(prompts))]
        return GenerationResult(samples, [{"event": "tool_skeleton_infill", "error": err}], usage)
    samples = []
    for i, tree in enumerate(trees):
        if i in too_long:
            meta = {"item_id": items[i].id} if items[i] is not None else {}
            samples.append(Sample(i, "", "error", too_long[i], SampleStatus.BACKEND_ERROR, meta=meta))
            continue
        res = results.get(i)
        record, reps = build_record(tree, res.slot_texts if res else [], plan, rngs[i])
        repairs += len(reps)
        if res is not None:
            usage.add_call(res.tokens_in, res.tokens_out, res.cached, res.nfe)
        meta = {
            "nfe": (res.nfe if res else 0),
            "repairs": len(reps),
            "names_pass": any(p[0] == i for p in pass1),
        }
        if items[i] is not None:
            meta["item_id"] = items[i].id
        samples.append(Sample(i, json.dumps(record, ensure_ascii=False), "stop", meta=meta))
    usage.seconds = time.perf_counter() - t0
    trace = [
        {
            "event": "tool_skeleton_infill",
            "knobs": knobs,
            "n": len(prompts),
            "names_pass_rows": len(pass1),
            "call_counts": sorted(set(skel.counts)),
            "optional_share": round(skel.p_optional, 4),
            "repairs": repairs,
            "too_long": sorted(too_long),
            "nfe": usage.nfe,
        }
    ]
    return GenerationResult(samples=samples, trace=trace, usage=usage)
