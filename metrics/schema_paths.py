"""Map a JSON Schema onto record leaf paths (`a.b`, `list[]`), so metrics can ask per field:
is it categorical (enum/const/boolean)? is it a required string?

Walks `properties`, `items`, `prefixItems`, `additionalProperties` (as `*`), the combinators `allOf`,
`anyOf`, `oneOf`, and local `$ref`s (`#/$defs/...`, `#/definitions/...`), to a bounded depth so a
recursive schema cannot loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from bench.types import JSON

MAX_SCHEMA_DEPTH = 16


@dataclass
class FieldInfo:
    """What the schema says about one path (merged over every subschema that applies to it)."""

    categorical: bool = False  # enum, const or boolean type: skipped by field overlap
    string: bool = False
    required: bool = False  # required by its parent object (and the parent is reachable)
    types: set[str] = field(default_factory=set)


def _resolve(schema: Any, root: JSON) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return schema
    node: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return schema
        node = node[part]
    return node


def _types(schema: JSON) -> set[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return {x for x in t if isinstance(x, str)}
    return set()


def walk(schema: JSON) -> dict[str, FieldInfo]:
    """Every path the schema describes -> FieldInfo (the root object itself is the path '')."""
    out: dict[str, FieldInfo] = {}

    def visit(node: Any, path: str, required: bool, depth: int) -> None:
        if depth > MAX_SCHEMA_DEPTH or not isinstance(node, dict):
            return
        node = _resolve(node, schema)
        if not isinstance(node, dict):
            return
        info = out.setdefault(path, FieldInfo())
        types = _types(node)
        info.types |= types
        info.required = info.required or required
        if "enum" in node or "const" in node or "boolean" in types:
            info.categorical = True
        if "string" in types:
            info.string = True
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []) or []:
                visit(sub, path, required and key == "allOf", depth + 1)
        req = set(node.get("required", []) or [])
        for name, sub in (node.get("properties") or {}).items():
            visit(sub, f"{path}.{name}" if path else name, name in req, depth + 1)
        items = node.get("items")
        if isinstance(items, dict):
            visit(items, f"{path}[]", False, depth + 1)
        for sub in node.get("prefixItems", []) or []:
            visit(sub, f"{path}[]", False, depth + 1)

    visit(schema, "", True, 0)
    return out


@lru_cache(maxsize=64)
def _walk_cached(schema_json: str) -> dict[str, FieldInfo]:
    import json

    return walk(json.loads(schema_json))


def fields_of(schema: JSON) -> dict[str, FieldInfo]:
    """Cached `walk` (schemas are small, but every cell of a task asks for the same one)."""
    import json

    return _walk_cached(json.dumps(schema, sort_keys=True))


def categorical_paths(schema: JSON) -> frozenset[str]:
    return frozenset(p for p, f in fields_of(schema).items() if f.categorical)


def required_string_paths(schema: JSON) -> frozenset[str]:
    """Leaf paths of required string fields whose every ancestor object is required too."""
    fields = fields_of(schema)
    out = set()
    for path, info in fields.items():
        if not path or not info.string or not info.required:
            continue
        if "[]" in path:
            continue  # list items are not "required" fields
        parents = path.split(".")
        ok = all(
            fields.get(".".join(parents[:i]), FieldInfo(required=True)).required
            for i in range(1, len(parents))
        )
        if ok:
            out.add(path)
    return frozenset(out)
