"""`ar-grammar` (ours): the `ar` prompt, decoded under a grammar compiled from the task's JSON Schema.

This is the structured-output anchor users compare against (outlines, XGrammar, llama.cpp grammars): the
backend may only emit JSON texts valid under the schema, so `schema_valid` measures the grammar engine
rather than the model, and diversity / memorization show what constrained decoding costs.

Why caps derived from the references: the grammar is a bounded subset of the schema, and a bound that
is too small makes real records impossible to write (before this, 4 of 33 MultiWOZ hotels fitted). So
every string / array location gets the largest size seen there in the task's references (never less
than `max_string_chars` / `max_items`), and numbers get as many digits as the references use.

Why a token budget and not only a grammar: a grammar that allows long strings lets a small model ramble
(SmolLM2 once filled a string with emoji, four bytes each) until `max_tokens` cuts the JSON off. String
caps count UTF-8 *bytes* (`byte_strings`), so `max_bytes` of the grammar, the longest record, is exact;
with a byte-level BPE tokenizer every token covers at least one byte, so `max_bytes + 1` tokens always
hold a complete record and no output can be truncated. When the reference-sized record does not fit
`max_tokens`, the caps fall to a quantile of the reference sizes (the largest that fits), and the floor
for short fields shrinks; which records are then excluded is measured in docs/systems-ar.md. The limits
travel inside the schema (`x-grammar`), so the llama.cpp backend and the call cache see them; an
OpenAI-compatible server gets the same bounded schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from pydantic import Field

from bench.hashing import canonical_json, stable_hash
from bench.types import JSON, GenerationResult, RunContext, SamplingParams, TaskSpec
from systems.agent_loop import is_multi_turn
from systems.ar import ARParams, ARSystem
from systems.backends.grammar import (
    GRAMMAR_KEY,
    GrammarLimits,
    bounded_schema,
    build_grammar,
    max_bytes,
    reference_caps,
)
from systems.backends.grammar.bounds import byte_capped_array, fit_caps, schema_at
from systems.params import validate_params


class ARGrammarParams(ARParams):
    """`ar` settings plus the bounds that keep every grammar sentence inside the token budget."""

    max_tokens: int = Field(1024, ge=16, description="token budget per record; caps shrink to fit it")
    max_string_chars: int = Field(
        160, ge=1, description="maxLength (bytes) of strings the references do not show longer"
    )
    max_items: int = Field(6, ge=0, description="maxItems of arrays the references do not show longer")
    ascii_strings: bool = Field(False, description="free strings in printable ASCII and short escapes only")
    caps_from_references: bool = Field(True, description="size caps from the task's reference records")

    grammar: Literal["ours", "llama_cpp"] = Field(
        "ours",
        description="schema compiler for per-item tasks: ours, or llama-cpp-python's own (peer baseline)",
    )


@dataclass(frozen=True)
class GrammarPlan:
    """The bounds of one task: flat limits, per-location caps and the longest record they allow."""

    limits: GrammarLimits  # what the compiler gets (through `x-grammar`)
    caps: dict[str, dict[str, int | bool]]  # per schema location: maxLength (bytes) / maxItems / nonempty
    references_fit: tuple[int, int] | None  # (references inside the caps, references); None: none used
    longest: float


@lru_cache(maxsize=256)
def _plan(
    schema_json: str, refs_json: str, max_chars: int, max_items: int, ascii_strings: bool, budget: int
) -> GrammarPlan:
    """The largest caps whose longest record fits `budget` (see `fit_caps` for how they shrink)."""
    schema, refs = json.loads(schema_json), json.loads(refs_json)
    rc = reference_caps(schema, refs)

    def limits(chars: int, items: int, nonempty: bool) -> GrammarLimits:
        # bounded_schema writes the non-empty rule as minLength; the compiler must not add it again
        return GrammarLimits(
            max_string_chars=chars,
            max_items=items,
            ascii_strings=ascii_strings,
            byte_strings=True,
            max_int_digits=max(12, rc.int_digits),
            # long float reprs vary in length (0.0837527777777778): leave room beyond the longest seen
            max_frac_digits=max(6, rc.frac_digits + 3 if rc.frac_digits > 6 else rc.frac_digits),
            nonempty_required_strings=nonempty,
        )

    def size(caps: dict, chars: int, items: int) -> float:
        bounded = bounded_schema(schema, limits(chars, items, True), caps)
        return max_bytes(build_grammar(bounded, limits(chars, items, False)))

    if refs:
        skip: set[str] = set()
        start = {}
        for ptr, cap in rc.at(1.0).items():  # the largest size seen, never below the flat caps
            cap = dict(cap)
            if "maxLength" in cap:
                cap["maxLength"] = max(int(cap["maxLength"]), max_chars)
            if "maxBytes" in cap and byte_capped_array(schema_at(schema, ptr)):
                cap = {"maxBytes": max(int(cap["maxBytes"]), max_chars), "nonempty": cap["nonempty"]}
                start.pop(ptr + "/items", None)  # its items are bounded by the array's total
                skip.add(ptr + "/items")
            elif "maxItems" in cap:
                cap.pop("maxBytes", None)
                cap["maxItems"] = max(int(cap["maxItems"]), max_items)
            if ptr not in skip:
                start[ptr] = cap
        fitted = fit_caps(schema, refs, start, lambda c: size(c, max_chars, max_items), budget)
        if fitted is not None:
            caps, kept = fitted
            lim = limits(max_chars, max_items, False)
            return GrammarPlan(lim, caps, (kept, len(refs)), size(caps, max_chars, max_items))
    # no references (or no caps fit): one flat string cap, then fewer array items
    items = max_items
    while True:
        lo, hi = 1, max_chars
        if size({}, 1, items) + 1 <= budget:
            while lo < hi:  # largest cap in [1, max_chars] that fits
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if size({}, mid, items) + 1 <= budget else (lo, mid - 1)
            return GrammarPlan(limits(lo, items, False), {}, None, size({}, lo, items))
        if items <= 1:  # cannot fit: the budget is too small for this schema
            return GrammarPlan(limits(1, items, False), {}, None, size({}, 1, items))
        items = max(1, items // 2)


class ARGrammarSystem(ARSystem):
    grammar = True

    def __init__(self, params: dict | None = None):
        self.params: ARGrammarParams = validate_params(ARGrammarParams, params, "ar-grammar")

    def plan(self, spec: TaskSpec) -> GrammarPlan:
        p = self.params
        refs = list(spec.references) if p.caps_from_references else []
        return _plan(
            canonical_json(spec.schema), canonical_json(refs), p.max_string_chars, p.max_items,
            p.ascii_strings, p.max_tokens,
        )  # fmt: skip

    def limits(self, spec: TaskSpec | None = None) -> GrammarLimits:
        """The flat caps for this task: the configured ones, shrunk until a record fits `max_tokens`."""
        p = self.params
        if spec is not None:
            return self.plan(spec).limits
        return GrammarLimits(
            max_string_chars=p.max_string_chars, max_items=p.max_items, ascii_strings=p.ascii_strings,
            byte_strings=True, nonempty_required_strings=False,
        )  # fmt: skip

    def constrained_schema(self, spec: TaskSpec) -> JSON:
        plan = self.plan(spec)
        lim = plan.limits
        schema = bounded_schema(spec.schema, replace(lim, nonempty_required_strings=True), plan.caps)
        schema[GRAMMAR_KEY] = {
            k: getattr(lim, k)
            for k in ("ascii_strings", "byte_strings", "max_items", "max_string_chars", "max_int_digits",
                      "max_frac_digits", "nonempty_required_strings")
        }  # fmt: skip
        return schema

    def sampling(self, spec: TaskSpec, preset: dict | None = None) -> SamplingParams:
        schema = self.constrained_schema(spec)
        longest = max_bytes(build_grammar(schema))
        base = super().sampling(spec, preset)
        budget = int(min(base.max_tokens, longest + 1)) if longest != float("inf") else base.max_tokens
        return replace(base, json_schema=schema, max_tokens=budget)

    def build_requests(self, spec: TaskSpec, n: int, seed: int, preset: dict | None = None):  # type: ignore[override]
        if spec.items:  # per-item task: each item's own grammar; refused schemas send no request
            from systems.item_grammar import item_requests

            return item_requests(self, spec, n, seed, preset)
        return super().build_requests(spec, n, seed, preset)

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        if is_multi_turn(spec):  # BFCL multi-turn: the agent loop, each step under the step schema's grammar
            return super().generate(spec, n, seed, ctx)
        if spec.items:  # JSONSchemaBench: one grammar per item, a refused schema is a scored sample
            from systems.item_grammar import generate_items

            return generate_items(self, spec, n, seed, ctx, self.params.grammar)
        schema = self.constrained_schema(spec)  # fails early, naming any unsupported keyword
        grammar = build_grammar(schema)
        result = super().generate(spec, n, seed, ctx)
        longest = max_bytes(grammar)
        result.trace.append(
            {
                "event": "grammar",
                "limits": self.limits(spec).__dict__,
                "references_fit": self.plan(spec).references_fit,
                "longest_record_bytes": longest,
                "fits_budget": longest + 1 <= self.params.max_tokens,
                "schema_sha": stable_hash(schema, 16),
                "gbnf_rules": len(grammar.rules),
            }
        )
        return result
