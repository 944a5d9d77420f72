"""Views of a parsed JSON record shared by the metric families (design §5 definitions).

- `leaves(r)`: (path, value) for every leaf, depth-first; a path joins keys with '.', and writes any
  list position as '[]' (`price.double`, `correct_answers[]`).
- `json_spelling(v)`: numbers and booleans as JSON writes them (`true`, `3.5`), strings unchanged.
- `values_text(r)`: all leaf values in their spelling joined by single spaces, the text lexical,
  semantic and reference metrics read (keys are shared by every record, so they are left out).
- `words(text)`: `\\w+` matches of the lower-cased text.
- `normalized_value(v)`: JSON spelling for numbers/booleans, strings lower-cased, stripped, with runs
  of whitespace made one space (used for field overlap).
- `canonical(r)`: compact, key-sorted JSON, the identity used for "exact copy" and "duplicate".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_WORD = re.compile(r"\w+")
_SPACES = re.compile(r"\s+")


def leaves(record: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Depth-first (path, leaf value) pairs; empty objects and lists contribute nothing."""
    stack: list[tuple[str, Any]] = [(prefix, record)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in value.items()]
            stack.extend(reversed(items))
        elif isinstance(value, list):
            stack.extend((f"{path}[]", v) for v in reversed(value))
        else:
            yield path, value


def json_spelling(value: Any) -> str:
    """Strings as they are; numbers, booleans and null as JSON spells them."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def values_text(record: Any) -> str:
    """All leaf values joined depth-first with single spaces (null leaves skipped: they carry no text)."""
    return " ".join(json_spelling(v) for _, v in leaves(record) if v is not None)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def normalized_value(value: Any) -> str:
    if isinstance(value, str):
        return _SPACES.sub(" ", value.strip().lower())
    return json.dumps(value)


def canonical(record: Any) -> str:
    return json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def compact(record: Any) -> str:
    """Compact JSON in the record's own key order: the text perplexity is measured on."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def ngrams(tokens: list[str], n: int) -> Iterator[tuple[str, ...]]:
    """n-grams within one token list (never across records)."""
    return zip(*(tokens[i:] for i in range(n)), strict=False)
