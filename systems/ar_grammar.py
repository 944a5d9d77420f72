"""`ar-grammar` (ours): the `ar` prompt, decoded under a grammar compiled from the task's JSON Schema.

This is the structured-output anchor users compare against (outlines, XGrammar, llama.cpp grammars): the
backend may only emit JSON texts valid under the schema, so `schema_valid` measures the grammar engine
rather than the model, and diversity / memorization show what constrained decoding costs.

The schema sent to the backend is `bounded_schema(spec.schema)`: a subset of the task's language in which
every string, array and integer is bounded, so no output can run past the token budget. On the llama.cpp
backend it becomes a GBNF grammar; on an OpenAI-compatible server it is sent as `response_format`.
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field

from bench.hashing import stable_hash
from bench.types import GenerationResult, RunContext, SamplingParams, TaskSpec
from systems.ar import ARParams, ARSystem, validate_params
from systems.backends.grammar import GrammarLimits, bounded_schema, schema_to_gbnf


class ARGrammarParams(ARParams):
    """`ar` settings plus the bounds that keep every grammar sentence inside the token budget."""

    max_tokens: int = Field(
        512, ge=1, description="maximum new tokens per record (room for the bounded record)"
    )
    max_string_chars: int = Field(
        160, ge=1, description="maxLength given to strings the schema leaves unbounded"
    )
    max_items: int = Field(6, ge=0, description="maxItems given to arrays the schema leaves unbounded")


class ARGrammarSystem(ARSystem):
    grammar = True

    def __init__(self, params: dict | None = None):
        self.params: ARGrammarParams = validate_params(ARGrammarParams, params or {}, "ar-grammar")  # type: ignore[assignment]

    def limits(self) -> GrammarLimits:
        return GrammarLimits(max_string_chars=self.params.max_string_chars, max_items=self.params.max_items)

    def sampling(self, spec: TaskSpec, preset: dict | None = None) -> SamplingParams:
        return replace(super().sampling(spec, preset), json_schema=bounded_schema(spec.schema, self.limits()))

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        schema = bounded_schema(spec.schema, self.limits())
        gbnf = schema_to_gbnf(schema, self.limits())  # fails early, naming any unsupported keyword
        result = super().generate(spec, n, seed, ctx)
        result.trace.append(
            {
                "event": "grammar",
                "limits": self.limits().__dict__,
                "bounded_schema_sha": stable_hash(schema, 16),
                "gbnf_sha": stable_hash(gbnf, 16),
                "gbnf_rules": gbnf.count("::="),
            }
        )
        return result
