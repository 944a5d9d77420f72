"""JSON Schema (Draft 2020-12) -> grammar tree, sound by construction.

How: every schema is expanded into a disjunction of *branches*; a branch is the list of in-place
subschemas (the schema itself, its `$ref` target, its `allOf` parts, one `anyOf`/`oneOf` option each)
that must all hold. Keywords of a branch are then merged *per JSON type*, so `{"minLength": 2}` constrains
strings and leaves every other type free, and a property constrained by two subschemas gets both
constraints (its value is compiled from the list of their JSON pointers). The grammar language is a
subset of the schema's: where a keyword cannot be enforced exactly it is either bounded to a smaller but
valid language (documented per keyword in docs/systems-ar.md) or refused with `UnsupportedSchema`, naming
the keyword and its JSON pointer. Nothing is silently ignored.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from systems.backends.grammar.errors import UnsupportedSchema
from systems.backends.grammar.limits import GrammarLimits
from systems.backends.grammar.nodes import (
    EMPTY,
    NEVER,
    Alt,
    Bound,
    Chars,
    Grammar,
    Lit,
    Never,
    Node,
    Ref,
    Rep,
    Seq,
    alt,
    decimal_range,
    int_range,
    rep,
    seq,
)
from systems.backends.grammar.regex import RegexToGrammar
from systems.backends.grammar.text import FORMATS, units

ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly",
    "writeOnly", "$anchor", "$dynamicAnchor", "contentMediaType", "contentEncoding", "contentSchema",
    "$defs", "definitions", "$vocabulary",
}  # fmt: skip
HANDLED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "dependentRequired", "dependentSchemas",
    "unevaluatedProperties", "items", "prefixItems", "minItems", "maxItems", "uniqueItems",
    "unevaluatedItems", "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "allOf", "anyOf", "oneOf", "not", "if", "then",
    "else", "$ref", "contains", "minContains", "maxContains",
}  # fmt: skip
REFUSED = {
    "$dynamicRef": "dynamic references are not resolved",
    "$recursiveRef": "a 2019-09 dynamic reference, which is not resolved",
    "$recursiveAnchor": "a 2019-09 dynamic reference, which is not resolved",
    "extends": "a draft-03 keyword (an allOf), which is not compiled",
    "disallow": "a draft-03 keyword (a not), which is not compiled",
    "divisibleBy": "a draft-03 keyword (a multipleOf), which is not compiled",
}
#: Keywords of earlier drafts that constrained instances there and are enforced in that meaning (a subset
#: of the Draft 2020-12 language, where they are unknown and so annotations): `dependencies` (draft-04 to
#: 07) is dependentRequired for an array value and dependentSchemas for a schema value.
LEGACY_ENFORCED = {"dependencies"}
#: Keywords the Draft 2020-12 validator reads although they have no validator function of their own.
_READ_BY_OTHERS = {"then", "else", "minContains", "maxContains"}
#: The keywords whose subschemas the judge's reference resolution (`referencing`, Draft 2020-12) walks
#: for `$id`, `$anchor` and `$dynamicAnchor`: subschemas anywhere else are invisible to it.
_SUB_ONE = {
    "additionalProperties", "contains", "contentSchema", "else", "if", "items", "not", "propertyNames",
    "then", "unevaluatedItems", "unevaluatedProperties",
}  # fmt: skip
_SUB_LIST = {"allOf", "anyOf", "oneOf", "prefixItems"}
_SUB_MAP = {"$defs", "definitions", "dependentSchemas", "patternProperties", "properties"}


def judged_keywords() -> frozenset[str]:
    """Every keyword the judge (jsonschema's Draft 2020-12 validator) enforces or reads."""
    from jsonschema import Draft202012Validator

    return frozenset(Draft202012Validator.VALIDATORS) | _READ_BY_OTHERS


_JUDGED: frozenset[str] | None = None


def is_annotation(key: str) -> bool:
    """True for a keyword that cannot constrain an instance under Draft 2020-12, so ignoring it is sound.

    Draft 2020-12 Core section 6.5: implementations SHOULD treat keywords they do not support as
    annotations (the judge, jsonschema, does). So a keyword is an annotation here unless the judge applies
    it (then the compiler enforces or refuses it), it is a reference keyword, or it constrained instances
    in an earlier draft (`REFUSED`, `LEGACY_ENFORCED`: enforced in that meaning or refused, so a schema
    written for that draft never has a constraint of its author's silently dropped). This covers the
    vocabulary's own annotations (title, default, ...), draft-04 `id` (not a base URI under 2020-12; the
    judge resolves references without it), `additionalItems` (inert unless `items` is an array, a form
    that is refused), vendor extensions (`x-*`, Kubernetes `_format`, Snowplow `self`, ...) and typos
    (`minlength`), which the judge ignores as well.
    """
    global _JUDGED
    if _JUDGED is None:
        _JUDGED = judged_keywords()
    return key not in _JUDGED and key not in HANDLED and key not in REFUSED and key not in LEGACY_ENFORCED


ALL_TYPES = frozenset({"null", "boolean", "integer", "fraction", "string", "array", "object"})
_TYPE_SETS = {
    "null": {"null"},
    "boolean": {"boolean"},
    "integer": {"integer"},
    "number": {"integer", "fraction"},  # JSON Schema numbers: integers and non-integers
    "string": {"string"},
    "array": {"array"},
    "object": {"object"},
}
MAX_BRANCHES = 64
# Hard ceilings whatever the schema says (a subset): llama.cpp expands x{0,N} into N rules.
MAX_STRING = 4096
MAX_ITEMS = 256


def ptr_join(ptr: str, *tokens: Any) -> str:
    return ptr + "".join("/" + str(t).replace("~", "~0").replace("/", "~1") for t in tokens)


def _dependent_schemas(schema: dict) -> dict[str, list[tuple[str, str]]]:
    """Key -> the pointer tokens of its dependent schemas: `dependentSchemas` and the schema form of the
    older `dependencies` (enforced in its draft-04 to 07 meaning, a subset under 2020-12)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for kw in ("dependentSchemas", "dependencies"):
        for key, dep in (schema.get(kw) or {}).items():
            if kw == "dependentSchemas" or not isinstance(dep, list):
                out.setdefault(key, []).append((kw, key))
    return out


def _dependent_required(schema: dict) -> dict[str, set[str]]:
    """Key -> the keys it requires: `dependentRequired` and the list form of the older `dependencies`."""
    out: dict[str, set[str]] = {}
    for kw in ("dependentRequired", "dependencies"):
        for key, dep in (schema.get(kw) or {}).items():
            if isinstance(dep, list):
                out.setdefault(key, set()).update(dep)
    return out


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Conj:
    """One in-place subschema of a branch; `chain` holds its in-place ancestors (for unevaluated*)."""

    ptr: str
    chain: tuple[str, ...]


@dataclass
class Shape:
    """What a branch allows, merged per JSON type."""

    types: set[str]
    enum: list[Any] | None = None
    min_len: int = 0
    max_len: int | None = None
    patterns: dict[str, str] = field(default_factory=dict)  # pattern -> pointer
    formats: dict[str, str] = field(default_factory=dict)
    lo: Bound | None = None
    hi: Bound | None = None
    multiples: list[tuple[Any, str]] = field(default_factory=list)
    min_items: int = 0
    max_items: int | None = None
    unique: bool = False
    required: list[str] = field(default_factory=list)
    min_props: int = 0
    max_props: int | None = None


class Compiler:
    """Builds one `Grammar` for one schema document (see the module docstring)."""

    def __init__(self, schema: Any, limits: GrammarLimits):
        self.root = schema
        self.limits = limits
        self.grammar = Grammar()
        self._memo: dict[tuple[tuple[str, ...], bool], Node] = {}
        self._bodies: dict[Node, str] = {}
        self._validators: dict[str, Any] = {}
        self._nodes: dict[str, Any] = {}
        self.anchors: dict[str, str] = {}
        self.nested_ids: list[str] = []
        self._index(schema, "#")
        self._units = units(limits.ascii_strings)
        self._chain_top = 0
        self._array_tops: dict[str, int] = {}

    # ------------------------------------------------------------------ document
    def _index(self, node: Any, ptr: str) -> None:
        """Anchors and embedded resources, found where the judge's reference resolution finds them: in
        subschemas of the applicator keywords and `$defs` / `definitions` only, never inside an annotation
        (`x-*`, `self`, ...), whose contents are not schemas under Draft 2020-12."""
        if not isinstance(node, dict):
            return
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors.setdefault(node[key], ptr)
        # draft-04's `id` is no base URI under 2020-12, but was one for the schema's author: a `$ref`
        # beside either is ambiguous, so both refuse references (ref_target).
        if ptr != "#" and ("$id" in node or isinstance(node.get("id"), str)):
            self.nested_ids.append(ptr)
        for k, v in node.items():
            if k in _SUB_ONE:
                self._index(v, ptr_join(ptr, k))
            elif k in _SUB_LIST and isinstance(v, list):
                for i, sub in enumerate(v):
                    self._index(sub, ptr_join(ptr, k, i))
            elif k in _SUB_MAP and isinstance(v, dict):
                for name, sub in v.items():
                    self._index(sub, ptr_join(ptr, k, name))

    def at(self, ptr: str) -> Any:
        if ptr not in self._nodes:
            node = self.root
            for token in ptr[1:].split("/")[1:] if ptr != "#" else []:
                token = token.replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    raise UnsupportedSchema(f"$ref at {ptr}: the pointer does not resolve")
            self._nodes[ptr] = node
        return self._nodes[ptr]

    def validator(self, ptr: str) -> Any:
        """A Draft 2020-12 validator (with formats) for the subschema at `ptr`, refs resolved at the root."""
        if ptr not in self._validators:
            from jsonschema import Draft202012Validator

            if "#" not in self._validators:
                self._validators["#"] = Draft202012Validator(
                    self.root, format_checker=Draft202012Validator.FORMAT_CHECKER
                )
            self._validators[ptr] = self._validators["#"].evolve(schema=self.at(ptr))
        return self._validators[ptr]

    def valid(self, ptrs: tuple[str, ...], value: Any) -> bool:
        try:
            return all(self.validator(p).is_valid(value) for p in ptrs)
        except RecursionError:
            return False

    def ref_target(self, ref: Any, ptr: str) -> str:
        where = ptr_join(ptr, "$ref")
        if not isinstance(ref, str):
            raise UnsupportedSchema(f"$ref at {where} is not a string")
        if self.nested_ids:
            raise UnsupportedSchema(
                f"$ref at {where}: the document embeds resources ($id or id at {self.nested_ids[0]}), "
                "whose base URIs are not resolved"
            )
        if ref.startswith("#"):
            frag = ref[1:]
        else:
            root_id = self.root.get("$id") if isinstance(self.root, dict) else None
            base, frag = urldefrag(urljoin(root_id or "", ref))
            if not root_id or base != urldefrag(root_id)[0]:
                raise UnsupportedSchema(f"$ref {ref!r} at {where}: only references into this document")
        frag = unquote(frag)
        if frag == "":
            return "#"
        if frag.startswith("/"):
            target = "#" + frag
            self.at(target)
            return target
        if frag in self.anchors:
            return self.anchors[frag]
        raise UnsupportedSchema(f"$ref {ref!r} at {where}: no such anchor")

    def check_keywords(self, schema: dict, ptr: str) -> None:
        for k, v in schema.items():
            if k in REFUSED:
                raise UnsupportedSchema(f"{k} at {ptr_join(ptr, k)}: {REFUSED[k]}")
            if k in ANNOTATIONS or is_annotation(k):
                continue
            if k not in HANDLED and k not in LEGACY_ENFORCED:
                raise UnsupportedSchema(
                    f"{k} at {ptr_join(ptr, k)}: the validator enforces this keyword, the compiler does not"
                )
            if k == "dependencies":
                self._check_dependencies(v, ptr_join(ptr, k))
            if k == "items" and not isinstance(v, (dict, bool)):
                raise UnsupportedSchema(f"items at {ptr_join(ptr, k)} as an array is a pre-2020 form")
            if k == "patternProperties" and isinstance(v, dict):
                for pat in v:
                    _search(pat, "", ptr_join(ptr, k))
            if k == "type":
                for t in v if isinstance(v, list) else [v]:
                    if t not in _TYPE_SETS:
                        raise UnsupportedSchema(f"type at {ptr_join(ptr, k)}: unknown type {t!r}")

    # ------------------------------------------------------------------ branches
    def expand(self, ptr: str, chain: tuple[str, ...] = (), inplace: frozenset[str] = frozenset()) -> list:
        """The branches (lists of `Conj`) whose union is the language of the subschema at `ptr`."""
        schema = self.at(ptr)
        if schema is True:
            return [[]]
        if schema is False:
            return []
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"schema at {ptr} is not an object or a boolean")
        self.check_keywords(schema, ptr)
        me = Conj(ptr, (*chain, ptr))
        branches: list[list[Conj]] = [[me]]

        def product(options: list) -> None:
            nonlocal branches
            branches = [a + b for a in branches for b in options]
            if len(branches) > MAX_BRANCHES:
                raise UnsupportedSchema(
                    f"anyOf/oneOf at {ptr}: more than {MAX_BRANCHES} alternatives once distributed"
                )

        def sub(*tokens: Any) -> list:
            return self.expand(ptr_join(ptr, *tokens), me.chain, inplace)

        if "$ref" in schema:
            target = self.ref_target(schema["$ref"], ptr)
            if target in inplace:
                raise UnsupportedSchema(f"$ref at {ptr_join(ptr, '$ref')}: an in-place reference cycle")
            product(self.expand(target, me.chain, inplace | {target}))
        for i, _ in enumerate(self._list(schema, "allOf", ptr)):
            product(sub("allOf", i))
        if "anyOf" in schema:
            product([b for i, _ in enumerate(self._list(schema, "anyOf", ptr)) for b in sub("anyOf", i)])
        if "oneOf" in schema:
            options = self._list(schema, "oneOf", ptr)
            self.check_exclusive(ptr, len(options))
            product([b for i in range(len(options)) for b in sub("oneOf", i)])
        if "if" in schema:
            cond = schema["if"]
            if cond is False:
                if "else" in schema:
                    product(sub("else"))
            else:  # a subset: instances that satisfy `if` and `then` (the else-side needs a negation)
                if cond is not True:
                    product(sub("if"))
                if "then" in schema:
                    product(sub("then"))
        for key, deps in _dependent_schemas(schema).items():
            if key in (schema.get("required") or []):
                for tokens in deps:
                    product(sub(*tokens))
        return branches

    def _check_dependencies(self, value: Any, where: str) -> None:
        """`dependencies` (draft-04 to 07): a map to lists of keys or to schemas. A schema value evaluates
        no property for unevaluated* under 2020-12 (the judge does not apply it at all), so a document that
        also uses unevaluated* is refused rather than reasoned about."""
        if not isinstance(value, dict):
            raise UnsupportedSchema(f"dependencies at {where} is not an object")
        for key, dep in value.items():
            if isinstance(dep, list):
                if not all(isinstance(k, str) for k in dep):
                    raise UnsupportedSchema(f"dependencies at {ptr_join(where, key)}: not a list of keys")
            elif not isinstance(dep, (dict, bool)):
                raise UnsupportedSchema(f"dependencies at {ptr_join(where, key)}: neither keys nor a schema")
            elif '"unevaluated' in json.dumps(self.root):
                raise UnsupportedSchema(
                    f"dependencies at {ptr_join(where, key)}: a dependent schema beside unevaluated* "
                    "is not compiled"
                )

    @staticmethod
    def _list(schema: dict, key: str, ptr: str) -> list:
        value = schema.get(key, [])
        if not isinstance(value, list) or (key != "allOf" and not value):
            raise UnsupportedSchema(f"{key} at {ptr_join(ptr, key)} must be a non-empty list")
        return value

    def branches_of(self, ptrs: tuple[str, ...]) -> list[list[Conj]]:
        branches: list[list[Conj]] = [[]]
        for p in ptrs:
            branches = [a + b for a in branches for b in self.expand(p)]
            if len(branches) > MAX_BRANCHES:
                raise UnsupportedSchema(f"schema at {p}: more than {MAX_BRANCHES} alternatives")
        return branches

    def merge(self, branch: list[Conj]) -> Shape | None:
        """Per-type constraints of a branch (None: no value can satisfy it)."""
        sh = Shape(types=set(ALL_TYPES))
        for c in branch:
            s = self.at(c.ptr)
            if "type" in s:
                allowed: set[str] = set()
                for t in s["type"] if isinstance(s["type"], list) else [s["type"]]:
                    allowed |= _TYPE_SETS[t]
                sh.types &= allowed
            if "not" in s:
                self._negate(sh, s["not"], ptr_join(c.ptr, "not"))
            for key in ("enum", "const"):
                if key in s:
                    values = s[key] if key == "enum" else [s[key]]
                    if key == "enum" and not isinstance(values, list):
                        raise UnsupportedSchema(f"enum at {ptr_join(c.ptr, key)} is not a list")
                    sh.enum = list(values) if sh.enum is None else sh.enum
            sh.min_len = max(sh.min_len, int(s.get("minLength", 0)))
            if "maxLength" in s:
                sh.max_len = (
                    int(s["maxLength"]) if sh.max_len is None else min(sh.max_len, int(s["maxLength"]))
                )
            if "pattern" in s:
                sh.patterns.setdefault(s["pattern"], ptr_join(c.ptr, "pattern"))
            if "format" in s and self._checked_format(s["format"]):
                sh.formats.setdefault(s["format"], ptr_join(c.ptr, "format"))
            for key in ("minimum", "exclusiveMinimum"):
                if key in s:
                    sh.lo = _tighter(sh.lo, _bound(s[key], key.startswith("exclusive"), up=True), low=True)
            for key in ("maximum", "exclusiveMaximum"):
                if key in s:
                    sh.hi = _tighter(sh.hi, _bound(s[key], key.startswith("exclusive"), up=False), low=False)
            if "multipleOf" in s:
                sh.multiples.append((s["multipleOf"], ptr_join(c.ptr, "multipleOf")))
            sh.min_items = max(sh.min_items, int(s.get("minItems", 0)))
            if "maxItems" in s:
                sh.max_items = (
                    int(s["maxItems"]) if sh.max_items is None else min(sh.max_items, int(s["maxItems"]))
                )
            sh.unique = sh.unique or s.get("uniqueItems") is True
            if "contains" in s:
                need = _min_contains(s)
                sh.min_items = max(sh.min_items, need)
                if "maxContains" in s:  # a subset: no more items than matches may be allowed
                    m = int(s["maxContains"])
                    if m < need:
                        return None
                    sh.max_items = m if sh.max_items is None else min(sh.max_items, m)
            for key in s.get("required") or []:
                if key not in sh.required:
                    sh.required.append(key)
            sh.min_props = max(sh.min_props, int(s.get("minProperties", 0)))
            if "maxProperties" in s:
                m = int(s["maxProperties"])
                sh.max_props = m if sh.max_props is None else min(sh.max_props, m)
        if not sh.types:
            return None
        return sh

    def _negate(self, sh: Shape, schema: Any, where: str) -> None:
        if schema is False:
            return
        if schema is True:
            sh.types.clear()
            return
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"not at {where} is not a schema")
        keys = {k for k in schema if k not in ANNOTATIONS and not is_annotation(k)}
        if not keys:
            sh.types.clear()
        elif keys == {"type"}:
            for t in schema["type"] if isinstance(schema["type"], list) else [schema["type"]]:
                if t not in _TYPE_SETS:
                    raise UnsupportedSchema(f"type at {where}/type: unknown type {t!r}")
                sh.types -= _TYPE_SETS[t]
        else:
            raise UnsupportedSchema(f"not at {where}: only `not` of a type list is supported")

    @staticmethod
    def _checked_format(fmt: Any) -> bool:
        from jsonschema import Draft202012Validator

        return fmt in Draft202012Validator.FORMAT_CHECKER.checkers or fmt in FORMATS

    # ------------------------------------------------------------------ oneOf
    def check_exclusive(self, ptr: str, n: int) -> None:
        for i in range(n):
            for j in range(i + 1, n):
                a, b = (ptr_join(ptr, "oneOf", i),), (ptr_join(ptr, "oneOf", j),)
                if not self.disjoint(a, b, 3):
                    raise UnsupportedSchema(
                        f"oneOf at {ptr_join(ptr, 'oneOf')}: branches {i} and {j} may both match "
                        "(exclusivity cannot be proven, so it cannot be enforced)"
                    )

    def disjoint(self, a: tuple[str, ...], b: tuple[str, ...], depth: int) -> bool:
        """True only if no value satisfies both conjunctions (conservative: False when unsure)."""
        if depth <= 0:
            return False
        for ba in self.branches_of(a):
            for bb in self.branches_of(b):
                sa, sb = self.merge(ba), self.merge(bb)
                if sa is None or sb is None:
                    continue
                if not self._shapes_disjoint(sa, ba, a, sb, bb, b, depth):
                    return False
        return True

    def _shapes_disjoint(self, sa, ba, a, sb, bb, b, depth: int) -> bool:
        for shape, other in ((sa, b), (sb, a)):
            if shape.enum is not None and not any(self.valid(other, v) for v in shape.enum):
                return True
        common = sa.types & sb.types
        for t in common:
            if t in ("integer", "fraction"):
                lo = _tighter(sa.lo, sb.lo, low=True)
                hi = _tighter(sa.hi, sb.hi, low=False)
                if not (
                    lo
                    and hi
                    and (lo.value > hi.value or (lo.value == hi.value and (lo.exclusive or hi.exclusive)))
                ):
                    return False
            elif t == "string":
                hi = min(x for x in (sa.max_len, sb.max_len, math.inf) if x is not None)
                if max(sa.min_len, sb.min_len) <= hi:
                    return False
            elif t == "object":
                if not any(
                    self._key_disjoint(k, sa, ba, sb, bb, depth) for k in set(sa.required) | set(sb.required)
                ):
                    return False
            elif t == "array":
                hi = min(x for x in (sa.max_items, sb.max_items, math.inf) if x is not None)
                if max(sa.min_items, sb.min_items) <= hi and not any(
                    self.disjoint(self.item_ptrs(ba, i), self.item_ptrs(bb, i), depth - 1)
                    for i in range(min(sa.min_items, sb.min_items, 8))
                ):
                    return False
            else:
                return False
        return True

    def _key_disjoint(self, key: str, sa, ba, sb, bb, depth: int) -> bool:
        pa, fa = self.key_ptrs(ba, key)
        pb, fb = self.key_ptrs(bb, key)
        if (key in sa.required and fb) or (key in sb.required and fa):
            return True
        return key in sa.required and key in sb.required and self.disjoint(pa, pb, depth - 1)

    # ------------------------------------------------------------------ object / array members
    @staticmethod
    def _subtree(c: Conj, branch: list[Conj]) -> list[Conj]:
        return [d for d in branch if d.chain[: len(c.chain)] == c.chain]

    def key_ptrs(self, branch: list[Conj], key: str) -> tuple[tuple[str, ...], bool]:
        """Pointers of every subschema the value of `key` must satisfy, and whether `key` is forbidden."""
        ptrs: list[str] = []
        forbidden = False
        for c in branch:
            s = self.at(c.ptr)
            matched = False
            if key in (s.get("properties") or {}):
                ptrs.append(ptr_join(c.ptr, "properties", key))
                matched = True
            for pat in s.get("patternProperties") or {}:
                if _search(pat, key, c.ptr):
                    ptrs.append(ptr_join(c.ptr, "patternProperties", pat))
                    matched = True
            if not matched and "additionalProperties" in s:
                ptrs.append(ptr_join(c.ptr, "additionalProperties"))
            if "unevaluatedProperties" in s and not self._evaluated_key(c, branch, key):
                ptrs.append(ptr_join(c.ptr, "unevaluatedProperties"))
            if "propertyNames" in s and not self.valid((ptr_join(c.ptr, "propertyNames"),), key):
                forbidden = True
            if key in _dependent_schemas(s) and key not in (s.get("required") or []):
                forbidden = True  # a subset: an optional key with a dependent schema is left out
        if any(self.at(p) is False for p in ptrs):
            forbidden = True
        return tuple(dict.fromkeys(ptrs)), forbidden

    def _evaluated_key(self, c: Conj, branch: list[Conj], key: str) -> bool:
        for d in self._subtree(c, branch):
            s = self.at(d.ptr)
            if key in (s.get("properties") or {}) or "additionalProperties" in s:
                return True
            if any(_search(p, key, d.ptr) for p in s.get("patternProperties") or {}):
                return True
            if d is not c and "unevaluatedProperties" in s:
                return True
        return False

    def item_ptrs(self, branch: list[Conj], i: int) -> tuple[str, ...]:
        ptrs: list[str] = []
        for c in branch:
            s = self.at(c.ptr)
            prefix = s.get("prefixItems") or []
            if i < len(prefix):
                ptrs.append(ptr_join(c.ptr, "prefixItems", i))
            elif "items" in s:
                ptrs.append(ptr_join(c.ptr, "items"))
            if "contains" in s and i < _min_contains(s):
                ptrs.append(ptr_join(c.ptr, "contains"))  # a subset: the first items are the matches
            if "unevaluatedItems" in s and not self._evaluated_item(c, branch, i):
                ptrs.append(ptr_join(c.ptr, "unevaluatedItems"))
        return tuple(dict.fromkeys(ptrs))

    def _evaluated_item(self, c: Conj, branch: list[Conj], i: int) -> bool:
        for d in self._subtree(c, branch):
            s = self.at(d.ptr)
            if "items" in s or i < len(s.get("prefixItems") or []):
                return True
            if "contains" in s and i < _min_contains(s):
                return True
            if d is not c and "unevaluatedItems" in s:
                return True
        return False

    # ------------------------------------------------------------------ rules
    def rule(self, hint: str, node: Node) -> Node:
        """Name `node` as a rule (identical bodies share one rule); trivial nodes stay inline."""
        if isinstance(node, (Ref, Lit, Never, Chars)):
            return node
        if node in self._bodies:
            return Ref(self._bodies[node])
        name = self._fresh(hint)
        self.grammar.rules[name] = node
        self._bodies[node] = name
        return Ref(name)

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-").lower()[-40:].strip("-") or "r"
        if base[0].isdigit():
            base = "r-" + base
        name, k = base, 1
        while name in self.grammar.rules or name in ("root", "ws", "char"):
            k += 1
            name = f"{base}-{k}"
        return name

    def build(self) -> Grammar:
        self.grammar.rules["ws"] = rep(Lit(" "), 0, 1)
        self.grammar.rules["char"] = alt(*self._units.values())
        body = self.value(("#",), "#", required=True)
        if isinstance(body, Never):
            raise UnsupportedSchema("schema at #: no JSON value within the grammar's bounds satisfies it")
        self.grammar.rules = {"root": body, **self.grammar.rules}
        self._prune()
        return self.grammar

    def _prune(self) -> None:
        """Drop rules the root cannot reach (placeholders of values that were inlined)."""
        seen, todo = set(), ["root"]
        while todo:
            name = todo.pop()
            if name in seen or name not in self.grammar.rules:
                continue
            seen.add(name)
            stack = [self.grammar.rules[name]]
            while stack:
                n = stack.pop()
                if isinstance(n, Ref):
                    todo.append(n.name)
                elif isinstance(n, Seq):
                    stack.extend(n.items)
                elif isinstance(n, Alt):
                    stack.extend(n.options)
                elif isinstance(n, Rep):
                    stack.append(n.node)
        self.grammar.rules = {k: v for k, v in self.grammar.rules.items() if k in seen}

    # ------------------------------------------------------------------ values
    def value(self, ptrs: tuple[str, ...], where: str, required: bool) -> Node:
        """The grammar of values satisfying every subschema in `ptrs` (memoised; recursion-safe)."""
        ptrs = tuple(dict.fromkeys(p for p in ptrs if self.at(p) is not True and self.at(p) != {}))
        if not ptrs:
            return self.any_value(where)
        key = (ptrs, required)
        if key in self._memo:
            return self._memo[key]
        name = self._fresh(ptrs[-1].rsplit("/", 1)[-1] if len(ptrs[-1]) > 1 else "record")
        self.grammar.rules[name] = NEVER  # placeholder: recursive references resolve to the name
        self._memo[key] = Ref(name)
        node = alt(*(self.branch(b, ptrs, where, required) for b in self.branches_of(ptrs)))
        self.grammar.rules[name] = node
        if isinstance(node, (Lit, Never, Chars)) and not self._referenced(name):
            del self.grammar.rules[name]
            self._memo[key] = node
            return node
        return Ref(name)

    def _referenced(self, name: str) -> bool:
        target = Ref(name)

        def uses(n: Node) -> bool:
            if n == target:
                return True
            if isinstance(n, Seq):
                return any(uses(i) for i in n.items)
            if isinstance(n, Alt):
                return any(uses(o) for o in n.options)
            if isinstance(n, Rep):
                return uses(n.node)
            return False

        return any(uses(body) for body in self.grammar.rules.values())

    def branch(self, branch: list[Conj], ptrs: tuple[str, ...], where: str, required: bool) -> Node:
        sh = self.merge(branch)
        if sh is None:
            return NEVER
        if sh.enum is not None:
            return alt(
                *(self.literal(v) for v in sh.enum if self._kind(v) in sh.types and self.valid(ptrs, v))
            )
        opts = []
        if "null" in sh.types:
            opts.append(Lit("null"))
        if "boolean" in sh.types:
            opts.append(alt(Lit("true"), Lit("false")))
        if sh.types & {"integer", "fraction"}:
            opts.append(self.number(sh, where))
        if "string" in sh.types:
            opts.append(self.string(sh, where, required))
        if "array" in sh.types:
            opts.append(self.array(sh, branch, where))
        if "object" in sh.types:
            opts.append(self.object(sh, branch, where))
        return alt(*opts)

    @staticmethod
    def _kind(v: Any) -> str:
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "boolean"
        if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
            return "integer"
        if isinstance(v, float):
            return "fraction"
        return {str: "string", list: "array", dict: "object"}.get(type(v), "null")

    def literal(self, value: Any) -> Node:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), allow_nan=False)
        except (TypeError, ValueError):
            return NEVER
        if self.limits.ascii_strings and not text.isascii():
            text = json.dumps(value, ensure_ascii=True, separators=(", ", ": "))
        return Lit(text)

    def any_value(self, where: str) -> Node:
        """An unconstrained value: scalars, `{}` and short arrays of scalars (a bounded subset)."""
        scalar = alt(
            Lit("null"),
            Lit("true"),
            Lit("false"),
            self.number(Shape(types={"integer", "fraction"}), where),
            self.free_string(0, None),
        )
        scalar = self.rule("any-scalar", scalar)
        sep = seq(Lit(","), Ref("ws"))
        items = rep(seq(scalar, rep(seq(sep, scalar), 0, self.limits.max_items - 1)), 0, 1)
        arr = seq(Lit("["), items, Lit("]")) if self.limits.max_items > 0 else Lit("[]")
        return self.rule("any-value", alt(scalar, Lit("{}"), arr))

    # ------------------------------------------------------------------ scalars
    def number(self, sh: Shape, where: str) -> Node:
        d, f = self.limits.max_int_digits, self.limits.max_frac_digits
        cap = Fraction(10**d)
        lo = _tighter(sh.lo, Bound(-cap, True), low=True)
        hi = _tighter(sh.hi, Bound(cap, True), low=False)
        if sh.multiples:
            return self._multiples(sh, lo, hi, where)
        if "integer" not in sh.types:
            raise UnsupportedSchema(f"not at {where}: numbers that are not integers are not compiled")
        a = math.ceil(lo.value) + (1 if lo.exclusive and lo.value == math.ceil(lo.value) else 0)
        b = math.floor(hi.value) - (1 if hi.exclusive and hi.value == math.floor(hi.value) else 0)
        if "fraction" not in sh.types:
            return self.rule(f"int-{a}-{b}".replace("--", "-m"), int_range(a, b))
        return self.rule("number" if (sh.lo, sh.hi) == (None, None) else "num", decimal_range(lo, hi, f))

    def _multiples(self, sh: Shape, lo: Bound, hi: Bound, where: str) -> Node:
        step = 1
        for m, at in sh.multiples:
            if not _number(m) or m <= 0 or (isinstance(m, float) and not m.is_integer()):
                raise UnsupportedSchema(f"multipleOf at {at}: only integer steps are compiled")
            step = math.lcm(step, int(m))
        if "integer" not in sh.types:
            return NEVER
        a = math.ceil(lo.value) + (1 if lo.exclusive and lo.value == math.ceil(lo.value) else 0)
        b = math.floor(hi.value) - (1 if hi.exclusive and hi.value == math.floor(hi.value) else 0)
        if step == 1:
            return self.rule("int", int_range(a, b))
        first = -((-a) // step) * step
        count = (b - first) // step + 1 if b >= first else 0
        if count > 512:
            raise UnsupportedSchema(
                f"multipleOf at {sh.multiples[0][1]}: {count} multiples in range; at most 512 are compiled "
                "(bound the value with minimum/maximum)"
            )
        return self.rule("multiple", alt(*(Lit(str(v)) for v in range(first, b + 1, step))))

    def string(self, sh: Shape, where: str, required: bool) -> Node:
        lo, hi = sh.min_len, sh.max_len
        if len(sh.patterns) + len(sh.formats) > 1:
            raise UnsupportedSchema(
                f"{', '.join([*sh.patterns.values(), *sh.formats.values()])}: several patterns/formats "
                "on one string cannot be intersected"
            )
        if sh.patterns:
            pattern, at = next(iter(sh.patterns.items()))
            body = RegexToGrammar(
                pattern, at, self.limits.max_string_chars, self.limits.ascii_strings
            ).parse()
            return self._fixed(body, lo, hi, at, "pattern")
        if sh.formats:
            fmt, at = next(iter(sh.formats.items()))
            if fmt not in FORMATS:
                raise UnsupportedSchema(
                    f"format {fmt!r} at {at} is checked by the validator but has no grammar"
                )
            return self._fixed(FORMATS[fmt], lo, hi, at, f"fmt-{fmt}")
        if required and self.limits.nonempty_required_strings and lo == 0 and (hi is None or hi > 0):
            lo = 1
        return self.free_string(lo, hi)

    def _fixed(self, body: Node, lo: int, hi: int | None, at: str, hint: str) -> Node:
        """A pattern or format body; length bounds are allowed only where the body already meets them."""
        short, long_ = _char_lengths(body)
        if short < lo or (hi is not None and long_ > hi):
            raise UnsupportedSchema(
                f"{at} together with minLength/maxLength: a pattern or format cannot be length-bounded"
            )
        return self.rule(hint, seq(Lit('"'), body, Lit('"')))

    def free_string(self, lo: int, hi: int | None) -> Node:
        cap = self.limits.max_string_chars
        hi = max(lo, cap) if hi is None else hi
        if lo > hi:
            return NEVER
        if lo > MAX_STRING:
            raise UnsupportedSchema(f"minLength {lo}: strings over {MAX_STRING} characters are not compiled")
        hi = min(hi, max(lo, MAX_STRING))
        if self.limits.byte_strings and lo <= 1:
            return self.rule(
                f"string-b{lo}-{hi}", seq(Lit('"'), self._byte_chain(hi, nonempty=lo == 1), Lit('"'))
            )
        return self.rule(f"string-{lo}-{hi}", seq(Lit('"'), rep(Ref("char"), lo, hi), Lit('"')))

    def _byte_chain(self, n: int, nonempty: bool) -> Node:
        """Contents of at most `n` UTF-8 bytes (`sb-k`: k bytes left), shared by every byte-capped string."""
        while self._chain_top < n:
            k = self._chain_top + 1
            self.grammar.rules[f"sb-{k}"] = rep(self._chain_step(k), 0, 1)
            self._chain_top = k
        if nonempty:
            return self._chain_step(n)
        return Ref(f"sb-{n}") if n > 0 else EMPTY

    def _chain_step(self, k: int) -> Node:
        return alt(
            *(seq(u, Ref(f"sb-{k - b}") if k > b else EMPTY) for b, u in self._units.items() if b <= k)
        )

    # ------------------------------------------------------------------ containers
    def array(self, sh: Shape, branch: list[Conj], where: str) -> Node:
        # positions before n_prefix differ (prefixItems, contains); the rest share one item schema
        n_prefix = max(
            [len(self.at(c.ptr).get("prefixItems") or []) for c in branch]
            + [_min_contains(self.at(c.ptr)) for c in branch]
            + [0]
        )
        lo = sh.min_items
        hi = sh.max_items if sh.max_items is not None else max(lo, n_prefix, self.limits.max_items)
        if sh.unique:
            hi = min(hi, 1)  # a subset: at most one item is always unique
        budget = self._array_budget(branch, n_prefix, lo, hi)
        if budget is not None:  # the byte chain bounds the count itself
            return self.rule(where + "-array", self._byte_array(*budget, lo))
        if lo > MAX_ITEMS:
            raise UnsupportedSchema(
                f"minItems {lo} at {where}: arrays over {MAX_ITEMS} items are not compiled"
            )
        hi = min(hi, max(lo, MAX_ITEMS))
        nodes: list[Node] = []
        for i in range(min(hi, n_prefix + 1)):
            node = self.value(self.item_ptrs(branch, i), f"{where}/{i}", True)
            if isinstance(node, Never):
                hi = i
                break
            nodes.append(node)
        if lo > hi:
            return NEVER
        if hi == 0:
            return Lit("[]")
        sep = seq(Lit(","), Ref("ws"))

        def at(k: int) -> Node:
            return nodes[min(k, len(nodes) - 1)]

        def tail(k: int) -> Node:
            """Positions k.. behind commas: required below minItems, optional above, capped at hi."""
            if k >= hi:
                return EMPTY
            if k >= n_prefix:
                need = max(0, lo - k)
                return seq(rep(seq(sep, at(k)), need, need), rep(seq(sep, at(k)), 0, hi - k - need))
            piece = seq(sep, at(k), tail(k + 1))
            return piece if k < lo else rep(piece, 0, 1)

        body = seq(at(0), tail(1))
        return self.rule(where + "-array", seq(Lit("["), body if lo > 0 else rep(body, 0, 1), Lit("]")))

    def _array_budget(self, branch: list[Conj], n_prefix: int, lo: int, hi: int) -> tuple[int, bool] | None:
        """(bytes, non-empty items) when the array is capped by its total text (`x-maxBytes`), else None.

        Only for arrays of plain strings with at most one required item, where neither the item count
        nor the item length can bind before the byte budget does; otherwise the usual caps apply.
        """
        budgets = [self.at(c.ptr).get("x-maxBytes") for c in branch]
        budgets = [b for b in budgets if isinstance(b, int) and not isinstance(b, bool)]
        if not budgets or n_prefix or lo > 1 or not self.limits.byte_strings:
            return None
        total = min(budgets)
        if total > 4 * MAX_STRING:
            return None
        ptrs = self.item_ptrs(branch, 0)
        if len(ptrs) != 1 or self.item_ptrs(branch, 1) != ptrs:
            return None
        item = self.at(ptrs[0])
        if not isinstance(item, dict) or {k for k in item if not is_annotation(k)} - ANNOTATIONS - {
            "type",
            "minLength",
            "maxLength",
        }:
            return None
        if item.get("type") != "string" or int(item.get("minLength", 0)) > 1:
            return None
        if int(item.get("maxLength", total)) < total or hi < (total + 1) // 3:
            return None  # a per-item or count cap could bind: not expressible by the byte chain
        return total, int(item.get("minLength", 0)) == 1

    def _byte_array(self, total: int, nonempty: bool, lo: int) -> Node:
        """`[...]` of strings whose text between the brackets is at most `total` bytes.

        Rule chains, shared by every such array: `sb-aNi-k` inside an item with k bytes left (the closing
        quote included), `sb-aNf-k` at an item's first character, `sb-aNe-k` after an item.
        """
        v = "1" if nonempty else "0"
        top = self._array_tops.get(v, 0)
        for k in range(top + 1, total + 1):
            self.grammar.rules[f"sb-a{v}i-{k}"] = alt(
                *(seq(u, self._arr("i", k - b, nonempty)) for b, u in self._units.items() if b <= k - 1),
                seq(Lit('"'), self._arr("e", k - 1, nonempty)),
            )
            if nonempty and k >= 2:
                self.grammar.rules[f"sb-a{v}f-{k}"] = alt(
                    *(seq(u, self._arr("i", k - b, nonempty)) for b, u in self._units.items() if b <= k - 1)
                )
            start = self._arr("f" if nonempty else "i", k - 3, nonempty)
            if not isinstance(start, Never):
                self.grammar.rules[f"sb-a{v}e-{k}"] = rep(seq(Lit(","), Ref("ws"), Lit('"'), start), 0, 1)
        self._array_tops[v] = max(top, total)
        first = seq(Lit('"'), self._arr("f" if nonempty else "i", total - 1, nonempty))
        return seq(Lit("["), first if lo > 0 else rep(first, 0, 1), Lit("]"))

    def _arr(self, kind: str, k: int, nonempty: bool) -> Node:
        v = "1" if nonempty else "0"
        if kind == "e":
            return Ref(f"sb-a{v}e-{k}") if f"sb-a{v}e-{k}" in self.grammar.rules else EMPTY
        if kind == "f" and not nonempty:
            kind = "i"
        name = f"sb-a{v}{kind}-{k}"
        return Ref(name) if name in self.grammar.rules else NEVER

    def object(self, sh: Shape, branch: list[Conj], where: str) -> Node:
        keys: list[str] = []
        for c in branch:
            keys.extend(self.at(c.ptr).get("properties") or {})
        keys.extend(sh.required)
        keys = list(dict.fromkeys(keys))
        required = set(sh.required)
        deps: dict[str, set[str]] = {}
        for c in branch:
            for k, need in _dependent_required(self.at(c.ptr)).items():
                deps.setdefault(k, set()).update(need)
        changed = True
        while changed:  # a required key makes its dependencies required
            changed = False
            for k, need in deps.items():
                if k in required and not need <= required:
                    required |= need
                    changed = True
        keys = list(dict.fromkeys([*keys, *sorted(required - set(keys))]))
        members: list[tuple[Node, bool]] = []
        for key in keys:
            ptrs, forbidden = self.key_ptrs(branch, key)
            is_req = key in required
            if key in deps and not deps[key] <= required:
                forbidden = True  # a subset: an optional key whose dependencies may be absent is left out
            node = NEVER if forbidden else self.value(ptrs, f"{where}/{key}", is_req)
            if isinstance(node, Never):
                if is_req:
                    return NEVER
                continue
            members.append((seq(self.literal(key), Lit(":"), Ref("ws"), node), is_req))
        return self._members(members, sh.min_props, sh.max_props, where)

    def _members(self, members: list[tuple[Node, bool]], lo: int, hi: int | None, where: str) -> Node:
        """`{...}` with members in order; optional ones may be left out; lo..hi members in all."""
        n = len(members)
        sep = seq(Lit(","), Ref("ws"))
        if hi is not None and hi >= n:
            hi = None
        memo: dict[tuple[int, int], Node] = {}

        def sat(c: int) -> int:
            return c if hi is not None else min(c, max(lo, 1))

        def rest(i: int, c: int) -> Node:
            if (i, c) in memo:
                return memo[(i, c)]
            if i == n:
                out = EMPTY if c >= lo else NEVER
            elif n - i + c < lo:
                out = NEVER
            else:
                kv, req = members[i]
                take = (
                    seq(sep if c else EMPTY, kv, rest(i + 1, sat(c + 1))) if hi is None or c < hi else NEVER
                )
                out = take if req else alt(take, rest(i + 1, c))
                if isinstance(out, Alt) or (isinstance(out, Rep) and isinstance(out.node, Alt)):
                    out = self.rule(f"{where}-{i}-{c}", out)
            memo[(i, c)] = out
            return out

        return self.rule(where + "-object", seq(Lit("{"), rest(0, 0), Lit("}")))


def _min_contains(schema: dict) -> int:
    return int(schema.get("minContains", 1)) if "contains" in schema else 0


def _search(pattern: str, key: str, ptr: str) -> bool:
    """Does a patternProperties regex match a key? Python's `re`, as the validator uses."""
    try:
        return re.search(pattern, key) is not None
    except re.error as exc:
        raise UnsupportedSchema(
            f"patternProperties {pattern!r} at {ptr}: a regex Python cannot compile ({exc})"
        ) from None


def _bound(value: Any, exclusive: bool, up: bool) -> Bound:
    """A bound as an exact fraction; an exclusive float bound becomes the next float, inclusive.

    Why the next float: the text "0.30000000000000001" is above 0.3 as a decimal but parses to 0.3, so an
    exclusive bound must be checked on the parsed value: `> m` holds for every decimal >= nextafter(m).
    Integer bounds are exact: JSON integers parse to Python ints, and our decimals stay below 2**53.
    """
    if not _number(value):
        raise UnsupportedSchema(f"bound {value!r} is not a number")
    if isinstance(value, int):
        return Bound(Fraction(value), exclusive)
    if not math.isfinite(value):
        raise UnsupportedSchema(f"bound {value!r} is not finite")
    # A float bound m as its shortest decimal: every decimal on the right side of it parses (rounding
    # is monotone) to a float on the right side of m, and "0.3" stays allowed under maximum 0.3.
    if not exclusive:
        return Bound(Fraction(repr(value)))
    return Bound(Fraction(repr(math.nextafter(value, math.inf if up else -math.inf))))


def _tighter(a: Bound | None, b: Bound | None, low: bool) -> Bound | None:
    if a is None or b is None:
        return a or b
    if a.value != b.value:
        return (a if a.value > b.value else b) if low else (a if a.value < b.value else b)
    return a if a.exclusive else b


def _char_lengths(node: Node) -> tuple[float, float]:
    """Shortest and longest decoded length (characters) of a reference-free node."""
    if isinstance(node, Lit):
        n = len(json.loads(f'"{node.text}"')) if "\\" in node.text else len(node.text)
        return n, n
    if isinstance(node, Chars):
        return 1, 1
    if isinstance(node, Never):
        return math.inf, 0
    if isinstance(node, Seq):
        parts = [_char_lengths(i) for i in node.items]
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if isinstance(node, Alt):
        parts = [_char_lengths(o) for o in node.options]
        return min(p[0] for p in parts), max(p[1] for p in parts)
    if isinstance(node, Rep):
        a, b = _char_lengths(node.node)
        return a * node.lo, math.inf if node.hi is None else b * node.hi
    return 0, math.inf
