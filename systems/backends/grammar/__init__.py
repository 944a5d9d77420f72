"""JSON Schema -> GBNF grammar for grammar-constrained decoding (llama.cpp grammars).

Why our own compiler rather than llama.cpp's: the grammar must accept only texts that *validate* against
the schema (Draft 2020-12 with the format checker) and that *fit in the token budget*. So the language
produced here is a bounded subset of the schema's language (see docs/systems-ar.md for every keyword):

- `compiler`: schema -> grammar tree (branches of in-place subschemas merged per JSON type);
- `regex`: `pattern` -> grammar, Unicode-correct on the safe side;
- `text`: string units, byte-capped strings, formats; `nodes`: the tree, GBNF rendering, numeric ranges;
- `bounds`: `bounded_schema` (caps for any engine) and caps derived from reference records.

A keyword that cannot be enforced exactly or bounded to a valid subset raises `UnsupportedSchema`
naming the keyword and its JSON pointer.
"""

from __future__ import annotations

from typing import Any

from bench.types import JSON
from systems.backends.grammar.bounds import (
    FieldCaps,
    bounded_schema,
    reference_caps,
    without_local_annotations,
)
from systems.backends.grammar.compiler import Compiler
from systems.backends.grammar.errors import UnsupportedSchema
from systems.backends.grammar.limits import GRAMMAR_KEY, GrammarLimits, limits_of
from systems.backends.grammar.nodes import (
    NEVER,
    Alt,
    Chars,
    Grammar,
    Lit,
    Never,
    Node,
    Ref,
    Rep,
    Seq,
    int_range,
    max_bytes,
    render,
)
from systems.backends.grammar.text import FORMATS

__all__ = [
    "FORMATS", "GRAMMAR_KEY", "NEVER", "Alt", "Chars", "FieldCaps", "Grammar", "GrammarLimits", "Lit",
    "Never", "Node", "Ref", "Rep", "Seq", "UnsupportedSchema", "bounded_schema", "build_grammar",
    "int_range", "limits_of", "llama_grammar", "max_bytes", "reference_caps", "render", "schema_to_gbnf", "without_local_annotations",
]  # fmt: skip


def build_grammar(schema: JSON, limits: GrammarLimits | None = None) -> Grammar:
    """The grammar tree of a schema (rules by name; `root` first)."""
    return Compiler(schema, limits_of(schema, limits)).build()


def schema_to_gbnf(schema: JSON, limits: GrammarLimits | None = None) -> str:
    """GBNF text accepting a bounded subset of the JSON texts valid under `schema` (compact JSON)."""
    return build_grammar(schema, limits).to_gbnf()


_GRAMMARS: dict[str, Any] = {}


def llama_grammar(schema: JSON, limits: GrammarLimits | None = None) -> Any:
    """A parsed `llama_cpp.LlamaGrammar` for the schema, cached per (schema, limits) in the process."""
    from bench.hashing import stable_hash

    key = stable_hash({"schema": schema, "limits": (limits or GrammarLimits()).__dict__})
    if key not in _GRAMMARS:
        from llama_cpp import LlamaGrammar

        _GRAMMARS[key] = LlamaGrammar.from_string(schema_to_gbnf(schema, limits), verbose=False)
    return _GRAMMARS[key]
