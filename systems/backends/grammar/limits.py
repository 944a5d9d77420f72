"""The caps that make every sentence of a grammar finite (and so fit a token budget)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GRAMMAR_KEY = "x-grammar"  # schema annotation carrying GrammarLimits fields (validators ignore it)


@dataclass(frozen=True)
class GrammarLimits:
    """Bounds of the generated subset: each one shrinks the language, none widens it."""

    max_string_chars: int = 200  # strings without maxLength
    max_items: int = 8  # arrays without maxItems
    max_int_digits: int = 12
    max_frac_digits: int = 6
    nonempty_required_strings: bool = True
    # Printable ASCII and the short escapes (\" \\ \n ...) only in free strings.
    ascii_strings: bool = False
    # maxLength counts UTF-8 bytes of the string's JSON text (a subset of counting characters), so the
    # longest sentence in bytes, and with byte-level BPE in tokens, is exact (see `max_bytes`).
    byte_strings: bool = False


def limits_of(schema: Any, limits: GrammarLimits | None = None) -> GrammarLimits:
    """`limits`, overridden by the schema's own `x-grammar` annotation (how systems pass them through)."""
    base = limits or GrammarLimits()
    extra = schema.get(GRAMMAR_KEY) if isinstance(schema, dict) else None
    if not extra:
        return base
    known = set(GrammarLimits.__dataclass_fields__)
    return GrammarLimits(**{**base.__dict__, **{k: v for k, v in extra.items() if k in known}})
