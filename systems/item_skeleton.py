"""`llada-skeleton` on a per-item task (JSONSchemaBench): a skeleton and a value infiller from the schema alone.

JSONSchemaBench (Geng et al. 2025) gives an engine a schema and nothing else: no reference records, which
are what `llada-skeleton` otherwise draws its skeletons from (optional keys, array lengths, slot budgets) and
what the embedded DLM is trained on. The choice made here (docs/systems-diffusion.md):

- **Declared** = our grammar compiler compiled the schema under `ar-grammar`'s bounds (the same declaration
  as `ar-grammar`, with the same `max_tokens`): the compiler's language is what the records below come from.
  A refused schema is a sample with empty text and `meta.declared: false`, as for the grammar engines.
- **Drawn records.** `draws` random sentences of that grammar (systems.backends.grammar.sample), each
  re-checked by the judge (Draft 2020-12, formats): valid records *of the schema*, but random text, not
  data. They stand in for the references: the item's `SkeletonPlan` is built from its own draws, so
  optional keys, array lengths and slot budgets follow the grammar's distribution.
- **One shared infiller.** One DLM (the `dlm` role; the embedded masked-diffusion LM) fills the slots of
  every schema. It is trained once, on the draws of a fixed training set: the first `train_schemas`
  schemas (file-name order) of every split in the data dir, so one cached model serves every cell and
  run. Those may include the evaluated schemas; what the model saw of them is grammar draws, which the
  schema alone determines, never an instance of the benchmark (it has none).
- The skeleton fixes the JSON structure, so the output parses; value constraints beyond enums, booleans and
  numbers (patterns, formats, lengths, const) are the DLM's to meet, and the judge scores them.

A sample whose skeleton cannot fit the DLM's response window (drawn 8 times, arrays shrunk) is refused
before generation too (`meta.declared: false`, reason given): the engine knows it cannot write the record.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from bench.hashing import stable_hash
from bench.types import GenerationResult, RunContext, Sample, SampleStatus, TaskSpec, Usage
from systems.prompting import sample_rng

#: `ar-grammar`'s JSONSchemaBench settings: the bounds under which a schema counts as declared.
GRAMMAR_PARAMS = {"temperature": 0.0, "k_shots": 0}
MAX_TREE_TRIES = 8


@dataclass(frozen=True)
class DrawnItem:
    """One schema's declaration and its drawn records (empty when refused)."""

    schema_id: str
    records: tuple[Any, ...]
    seconds: float
    reason: str | None = None


def draw_records(schema: Any, n: int, seed: int, max_tokens: int) -> DrawnItem:
    """Compile `schema` as `ar-grammar` would (bounded to `max_tokens`) and draw `n` valid records from it."""
    import sys

    from metrics.structure import validator_for
    from systems.ar_grammar import ARGrammarSystem
    from systems.backends.grammar import build_grammar
    from systems.backends.grammar.sample import sentences

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    t0 = time.perf_counter()
    try:
        system = ARGrammarSystem({**GRAMMAR_PARAMS, "max_tokens": max_tokens})
        spec = TaskSpec("item", "", schema, (), ())
        params = system.sampling(spec, None)
        grammar = build_grammar(params.json_schema)
        judge = validator_for(schema)
        records = []
        for text in sentences(grammar, n, seed):
            record = json.loads(text)
            if judge.is_valid(record):  # by construction; re-checked so no invalid record is ever taught
                records.append(record)
    except RecursionError:
        return DrawnItem("", (), time.perf_counter() - t0, "RecursionError: schema too deep for the compiler")
    except Exception as exc:  # noqa: BLE001 - a refusal or a compiler crash: both mean "not declared"
        return DrawnItem("", (), time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"[:500])
    if not records:
        return DrawnItem("", (), time.perf_counter() - t0, "no record could be drawn from the grammar")
    return DrawnItem("", tuple(records), time.perf_counter() - t0)


_MAX_DEPTH = 16


def plan_schema(schema: Any) -> Any:
    """The schema as `SkeletonPlan` reads it: local `$ref`s inlined (their siblings kept), `allOf` parts
    merged, `oneOf` read as `anyOf`, a string `const` as a one-value `enum`, boolean subschemas as `{}`.

    Why: the plan looks up `type`, `properties`, `items` and `enum` directly, and real schemas reach them
    through `$ref` and `allOf`; without this an enum behind a `$ref` becomes a free string slot. It only
    guides the plan (slot kinds, enums); the record is judged against the original schema.
    """
    root = schema

    def resolve(ref: str) -> Any:
        node: Any = root
        for token in ref[2:].split("/") if ref.startswith("#/") else []:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                return {}
        return node if ref.startswith("#/") or ref == "#" else {}

    def walk(node: Any, depth: int) -> Any:
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            return {}
        out = {k: v for k, v in node.items() if k not in ("$ref", "allOf", "oneOf")}
        if isinstance(node.get("$ref"), str):
            out = {**walk(resolve(node["$ref"]), depth + 1), **out}
        for part in node.get("allOf") or []:
            sub = walk(part, depth + 1)
            props = {**(sub.get("properties") or {}), **(out.get("properties") or {})}
            out = {**sub, **out, "required": sorted({*sub.get("required", []), *out.get("required", [])})}
            if props:
                out["properties"] = props
        if isinstance(node.get("oneOf"), list) and "anyOf" not in out:
            out["anyOf"] = node["oneOf"]
        if isinstance(out.get("const"), str):
            out.setdefault("enum", [out["const"]])
            out.setdefault("type", "string")
        if isinstance(out.get("properties"), dict):
            out["properties"] = {k: walk(v, depth + 1) for k, v in out["properties"].items()}
        if "items" in out:
            out["items"] = walk(out["items"], depth + 1)
        if isinstance(out.get("anyOf"), list):
            out["anyOf"] = [walk(b, depth + 1) for b in out["anyOf"]]
        return out

    return walk(schema, 0)


@lru_cache(maxsize=4)
def training_task(data_dir: str, train_schemas: int, draws: int, max_tokens: int) -> TaskSpec:
    """The shared infiller's training task: drawn records of the first `train_schemas` schemas per split."""
    from pathlib import Path

    from bench.tasks.jsonschemabench import INSTRUCTION, JSONSCHEMABENCH
    from bench.tasks.loading import load_task

    records: list[Any] = []
    for split in JSONSCHEMABENCH.variants(Path(data_dir)):
        spec = load_task(
            f"jsonschemabench/{split}", n_references=None, n_holdout=None, options={"limit": train_schemas}
        )
        for item in spec.items:
            seed = int(stable_hash({"schema_id": item.id, "salt": "train-draws"}, 8), 16)
            drawn = draw_records(item.schema, draws, seed, max_tokens)
            records.extend(r for r in drawn.records if isinstance(r, dict))  # object records only
    fingerprint = stable_hash({"records": records, "train_schemas": train_schemas, "draws": draws})
    return TaskSpec(
        name="jsonschemabench/drawn",
        instruction=INSTRUCTION,
        schema={},
        references=tuple(records),
        holdout=(),
        fingerprint=fingerprint,
        meta={"train_schemas_per_split": train_schemas, "draws_per_schema": draws},
    )


def generate_item_skeletons(
    system: Any, spec: TaskSpec, n: int, seed: int, ctx: RunContext
) -> GenerationResult:
    """Sample i fills a skeleton of item i's schema with the shared DLM (see the module docstring)."""
    from bench.tasks.datadir import resolve_data_dir
    from systems.skeleton import SkeletonPlan, build_record, segments
    from systems.skeleton_infill import InfillRow, cached_infill
    from systems.skeleton_prompt import default_parts, render_prompt

    p = system.params
    train = training_task(str(resolve_data_dir(None)), p.train_schemas, p.draws, p.max_tokens)
    backend = ctx.backend(p.role, task=train)  # type: ignore[call-arg]
    if not hasattr(backend, "infill"):
        from bench.errors import BenchError

        raise BenchError(f"the {p.role!r} backend cannot infill skeletons")
    count = lambda s: len(backend.tok.encode(s))  # noqa: E731 - the DLM's own tokens size the slots
    drawn: dict[str, DrawnItem] = {}
    plans: dict[str, SkeletonPlan] = {}
    samples: dict[int, Sample] = {}
    rows: list[tuple[int, Any, Any, Any, InfillRow]] = []
    for i in range(n):
        item = spec.for_sample(i)
        item_id = item.meta["item_id"]
        if item_id not in drawn:
            draw_seed = int(stable_hash({"schema_id": item_id, "seed": seed, "salt": "plan-draws"}, 8), 16)
            drawn[item_id] = replace(
                draw_records(item.schema, p.draws, draw_seed, p.max_tokens), schema_id=item_id
            )
        d = drawn[item_id]
        meta = {
            "item_id": item_id,
            "schema_id": item.meta.get("schema_id", item_id),
            "declared": d.reason is None,
            "compile_seconds": d.seconds,
            "engine": "llada-skeleton",
        }
        if d.reason is not None:
            samples[i] = Sample(i, "", "unsupported", meta={**meta, "refused": d.reason})
            continue
        if item_id not in plans:
            # the benchmark asks for a JSON object (and extraction takes one), so a schema whose root
            # also allows scalars or arrays gets object skeletons when its grammar draws any object
            records = [r for r in d.records if isinstance(r, dict)] or list(d.records)
            plans[item_id] = SkeletonPlan(
                plan_schema(item.schema), records, count, backend.params.max_slot_tokens
            )
        plan = plans[item_id]
        rng = sample_rng(seed, i, "skeleton")
        tree = None
        for _ in range(MAX_TREE_TRIES):
            candidate = plan.sample(rng)
            plan.shrink(candidate, lambda t: backend.skeleton_fits(segments(t)))
            if backend.skeleton_fits(segments(candidate)):
                tree = candidate
                break
        if tree is None:
            reason = "the skeleton does not fit the DLM's response window"
            samples[i] = Sample(i, "", "unsupported", meta={**meta, "declared": False, "refused": reason})
            continue
        prompt = render_prompt(default_parts(item, [], with_fields=p.with_fields))
        row_seed = int(stable_hash({"seed": seed, "i": i, "salt": "skeleton-noise"}, 8), 16)
        rows.append((i, tree, plan, rng, InfillRow(prompt, segments(tree), row_seed)))
        samples[i] = Sample(i, "", meta=meta)
    usage = Usage()
    repairs_by_kind: dict[str, int] = {}
    t0 = time.perf_counter()
    if rows:
        try:
            results = cached_infill(backend, [r[-1] for r in rows], p.knobs(skeleton=True))
        except Exception as exc:  # noqa: BLE001 - a harness failure, never a model failure
            err = f"{type(exc).__name__}: {exc}"
            for i, *_ in rows:
                s = samples[i]
                s.finish_reason, s.error, s.status = "error", err, SampleStatus.BACKEND_ERROR
            results = []
        for (i, tree, plan, rng, _), res in zip(rows, results, strict=False):
            record, repairs = build_record(tree, res.slot_texts, plan, rng)
            for r in repairs:
                repairs_by_kind[r.kind] = repairs_by_kind.get(r.kind, 0) + 1
            s = samples[i]
            s.text, s.finish_reason = json.dumps(record, ensure_ascii=False), "stop"
            s.meta.update(
                seconds=res.seconds,
                tokens_out=res.tokens_out,
                nfe=res.nfe,
                repairs=len(repairs),
                cached=res.cached,
            )
            usage.add_call(res.tokens_in, res.tokens_out, res.cached, res.nfe)
    usage.seconds = time.perf_counter() - t0
    refused = {k: d.reason for k, d in drawn.items() if d.reason is not None}
    trace = [
        {
            "event": "item_skeleton",
            "model": backend.identity(),
            "training": {**train.meta, "records": len(train.references), "fingerprint": train.fingerprint},
            "n": n,
            "seed": seed,
            "items": len(drawn),
            "declared": len(drawn) - len(refused),
            "refused": refused,
            "repairs": repairs_by_kind,
            "nfe": usage.nfe,
        }
    ]
    return GenerationResult(samples=[samples[i] for i in range(n)], trace=trace, usage=usage)
