"""`ar-grammar` (ours): the `ar` prompt, decoded under a grammar compiled from the task's JSON Schema.

This is the structured-output anchor users compare against (outlines, XGrammar, llama.cpp grammars): the
backend may only emit JSON texts valid under the schema, so `schema_valid` measures the grammar engine
rather than the model, and diversity / memorization show what constrained decoding costs.

Why a token budget and not only a grammar: a grammar that allows long strings lets a small model ramble
(SmolLM2 once filled a string with emoji, four bytes each) until `max_tokens` cuts the JSON off. So the
schema sent to the backend is `bounded_schema(spec.schema)` with printable-ASCII strings (one byte per
character), and the string cap is the largest one whose longest possible record fits the budget: with a
byte-level BPE tokenizer every token covers at least one byte, so `max_bytes + 1` tokens always hold a
complete record and no output can be truncated. The limits travel inside the schema (`x-grammar`), so the
llama.cpp backend and the call cache see them; an OpenAI-compatible server gets the same bounded schema.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Literal

from pydantic import Field

from bench.hashing import canonical_json, stable_hash
from bench.types import JSON, GenerationResult, RunContext, SamplingParams, TaskSpec
from systems.ar import ARParams, ARSystem
from systems.backends.grammar import GRAMMAR_KEY, GrammarLimits, bounded_schema, build_grammar, max_bytes
from systems.params import validate_params


class ARGrammarParams(ARParams):
    """`ar` settings plus the bounds that keep every grammar sentence inside the token budget."""

    max_tokens: int = Field(1024, ge=16, description="token budget per record; string caps shrink to fit it")
    max_string_chars: int = Field(160, ge=1, description="largest maxLength given to unbounded strings")
    max_items: int = Field(6, ge=0, description="maxItems given to unbounded arrays")
    ascii_strings: bool = Field(True, description="free strings in printable ASCII (one byte per char)")
    grammar: Literal["ours", "llama_cpp"] = Field(
        "ours",
        description="schema compiler for per-item tasks: ours, or llama-cpp-python's own (peer baseline)",
    )


@lru_cache(maxsize=256)
def _fit(
    schema_json: str, max_chars: int, max_items: int, ascii_strings: bool, budget: int
) -> tuple[int, int, float]:
    """(string cap, item cap, longest record in bytes): the largest caps whose records fit `budget`."""
    import json

    schema = json.loads(schema_json)

    def size(chars: int, items: int) -> float:
        lim = GrammarLimits(max_string_chars=chars, max_items=items, ascii_strings=ascii_strings)
        return max_bytes(build_grammar(bounded_schema(schema, lim), lim))

    items = max_items
    while True:
        lo, hi = 1, max_chars
        if size(1, items) + 1 <= budget:
            while lo < hi:  # largest cap in [1, max_chars] that fits
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if size(mid, items) + 1 <= budget else (lo, mid - 1)
            return lo, items, size(lo, items)
        if items <= 1:
            return 1, items, size(1, items)  # cannot fit: the budget is too small for this schema
        items = max(1, items // 2)


class ARGrammarSystem(ARSystem):
    grammar = True

    def __init__(self, params: dict | None = None):
        self.params: ARGrammarParams = validate_params(ARGrammarParams, params, "ar-grammar")

    def limits(self, spec: TaskSpec | None = None) -> GrammarLimits:
        """The caps for this task: the configured ones, shrunk until a record fits `max_tokens`."""
        p = self.params
        chars, items = p.max_string_chars, p.max_items
        if spec is not None:
            chars, items, _ = _fit(canonical_json(spec.schema), chars, items, p.ascii_strings, p.max_tokens)
        return GrammarLimits(max_string_chars=chars, max_items=items, ascii_strings=p.ascii_strings)

    def constrained_schema(self, spec: TaskSpec) -> JSON:
        lim = self.limits(spec)
        schema = bounded_schema(spec.schema, lim)
        schema[GRAMMAR_KEY] = {"ascii_strings": lim.ascii_strings, "max_items": lim.max_items}
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
                "longest_record_bytes": longest,
                "fits_budget": longest + 1 <= self.params.max_tokens,
                "schema_sha": stable_hash(schema, 16),
                "gbnf_rules": len(grammar.rules),
            }
        )
        return result
