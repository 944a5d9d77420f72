"""JSON Schema -> GBNF grammar for grammar-constrained decoding (llama.cpp grammars).

Why our own converter rather than llama.cpp's: the grammar must accept only texts that *validate* against
the schema (Draft 2020-12 with the format checker) and that *fit in the token budget*. So the language
produced here is a bounded subset of the schema's language:

- no additional properties are ever generated; declared properties keep the schema's order, required ones
  always appear, optional ones may be left out;
- strings and arrays without `maxLength` / `maxItems` get a cap (`GrammarLimits`), numbers a digit cap,
  so every output is finite and a decoding budget can hold it;
- required strings are non-empty by default (an empty required string is a placeholder, not data);
- `format: date` uses days 01-28 only, so every generated date is a real calendar date.

Keywords whose language we cannot reproduce exactly (`pattern`, `uniqueItems`, `not`, ...) raise
`UnsupportedSchema` naming the keyword and its location, instead of silently producing invalid output.
The grammar is built as a small tree of nodes (`Lit`, `Chars`, `Seq`, `Alt`, `Rep`, `Ref`) and rendered to
GBNF; tests walk the same tree to draw random sentences and validate them against the schema.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from bench.errors import BenchError
from bench.types import JSON


class UnsupportedSchema(BenchError):
    """The schema uses a keyword that cannot be turned into an exact grammar."""


@dataclass(frozen=True)
class GrammarLimits:
    """Caps that make every sentence of the grammar finite (and so fit a token budget)."""

    max_string_chars: int = 200  # strings without maxLength
    max_items: int = 8  # arrays without maxItems
    max_int_digits: int = 12
    max_frac_digits: int = 6
    nonempty_required_strings: bool = True
    # Printable ASCII without quote, backslash or escapes in free strings: one byte per character, so the
    # longest sentence in bytes, and with byte-level BPE in tokens, is small and known (see `max_bytes`).
    ascii_strings: bool = False


# ------------------------------------------------------------------------------------------ nodes
@dataclass(frozen=True)
class Lit:
    text: str


@dataclass(frozen=True)
class Chars:
    """One character from `ranges` (inclusive code point pairs), or from outside them if `negated`."""

    ranges: tuple[tuple[int, int], ...]
    negated: bool = False


@dataclass(frozen=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Alt:
    options: tuple[Node, ...]


@dataclass(frozen=True)
class Rep:
    node: Node
    lo: int
    hi: int | None  # None: unbounded


@dataclass(frozen=True)
class Ref:
    name: str


Node = Lit | Chars | Seq | Alt | Rep | Ref


def _cp(c: int, in_class: bool) -> str:
    """A code point as GBNF writes it: printable ASCII verbatim unless it is special where it stands."""
    ch = chr(c)
    special = '"\\[]^-' if in_class else '"\\'
    if 0x20 <= c < 0x7F and ch not in special:
        return ch
    if ch in '"\\' and not in_class:
        return "\\" + ch
    return f"\\x{c:02X}" if c < 0x100 else (f"\\u{c:04X}" if c < 0x10000 else f"\\U{c:08X}")


def render(node: Node) -> str:
    """GBNF text of one node (parenthesised where precedence needs it)."""
    if isinstance(node, Lit):
        return '"' + "".join(_cp(ord(c), False) for c in node.text) + '"'
    if isinstance(node, Chars):
        body = "".join(_cp(a, True) if a == b else f"{_cp(a, True)}-{_cp(b, True)}" for a, b in node.ranges)
        return f"[{'^' if node.negated else ''}{body}]"
    if isinstance(node, Ref):
        return node.name
    if isinstance(node, Seq):
        if not node.items:
            return '""'
        return " ".join(_wrap(i, Alt) for i in node.items)
    if isinstance(node, Alt):
        return " | ".join(_wrap(o, ()) for o in node.options)
    if isinstance(node, Rep):
        inner = _wrap(node.node, (Seq, Alt, Rep))
        if (node.lo, node.hi) == (1, 1):
            return render(node.node)
        if (node.lo, node.hi) == (0, 1):
            return inner + "?"
        if node.hi is None:
            return inner + ("*" if node.lo == 0 else "+" if node.lo == 1 else f"{{{node.lo},}}")
        return inner + (f"{{{node.lo}}}" if node.lo == node.hi else f"{{{node.lo},{node.hi}}}")
    raise TypeError(node)


def _wrap(node: Node, kinds: Any) -> str:
    text = render(node)
    return f"({text})" if kinds and isinstance(node, kinds) else text


EMPTY = Lit("")


def rep(node: Node, lo: int, hi: int | None) -> Node:
    """`node` repeated lo..hi times (None: unbounded), simplified where the count is 0 or 1."""
    if hi == 0 or node == EMPTY:
        return EMPTY
    if lo == hi == 1:
        return node
    return Rep(node, lo, hi)


def seq(*items: Node) -> Node:
    """A sequence, flattened, without empty literals."""
    flat: list[Node] = []
    for i in items:
        flat.extend(i.items if isinstance(i, Seq) else (i,))
    flat = [i for i in flat if i != EMPTY]
    return EMPTY if not flat else flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options: Node) -> Node:
    uniq = list(dict.fromkeys(options))
    if EMPTY in uniq:  # "a | (nothing)" is written as an optional group
        rest = [o for o in uniq if o != EMPTY]
        return EMPTY if not rest else rep(alt(*rest), 0, 1)
    return uniq[0] if len(uniq) == 1 else Alt(tuple(uniq))


def optional_or(a: Node, b: Node) -> Node:
    return alt(a, b)


def _same_length_range(a: str, b: str) -> Node:
    """Digit strings of equal length between a and b (inclusive), digit by digit."""
    if not a:
        return EMPTY
    n = len(a) - 1
    if a[1:] == "0" * n and b[1:] == "9" * n:  # a full block: first digit in a range, the rest free
        first = Lit(a[0]) if a[0] == b[0] else Chars(((ord(a[0]), ord(b[0])),))
        return seq(first, rep(DIGIT, n, n)) if n else first
    if a[0] == b[0]:
        return seq(Lit(a[0]), _same_length_range(a[1:], b[1:]))
    opts: list[Node] = [seq(Lit(a[0]), _same_length_range(a[1:], "9" * n))]
    if int(b[0]) - int(a[0]) > 1:
        mid = Chars(((ord(a[0]) + 1, ord(b[0]) - 1),))
        opts.append(seq(mid, rep(DIGIT, n, n)) if n else mid)
    opts.append(seq(Lit(b[0]), _same_length_range("0" * n, b[1:])))
    return alt(*opts)


def uint_range(lo: int, hi: int) -> Node:
    """Canonical spellings (no leading zeros) of the integers in [lo, hi], 0 <= lo <= hi."""
    top = len(str(hi))
    if lo <= 1 and hi == 10**top - 1:  # every number up to `top` digits: the usual compact spelling
        free = seq(NONZERO, rep(DIGIT, 0, top - 1))
        return alt(Lit("0"), free) if lo == 0 else free
    opts = []
    for length in range(len(str(lo)), top + 1):
        a = max(lo, 10 ** (length - 1) if length > 1 else 0)
        b = min(hi, 10**length - 1)
        if a <= b:
            opts.append(_same_length_range(str(a), str(b)))
    return alt(*opts)


def int_range(lo: int, hi: int) -> Node:
    """Integers in [lo, hi] as JSON spells them ("-0" excluded)."""
    if lo >= 0:
        return uint_range(lo, hi)
    if hi < 0:
        return seq(Lit("-"), uint_range(-hi, -lo))
    return alt(seq(Lit("-"), uint_range(1, -lo)), uint_range(0, hi))


DIGIT = Chars(((ord("0"), ord("9")),))
NONZERO = Chars(((ord("1"), ord("9")),))
HEX = Chars(((ord("0"), ord("9")), (ord("a"), ord("f")), (ord("A"), ord("F"))))
# A JSON string character: anything but quote, backslash and control characters, or a short escape, or a
# \u escape outside the surrogate block (a lone surrogate would break UTF-8 re-encoding downstream).
PLAIN_CHAR = Chars(((0x00, 0x1F), (ord('"'), ord('"')), (ord("\\"), ord("\\")), (0x7F, 0x7F)), negated=True)
ESCAPE = seq(
    Lit("\\"),
    alt(
        Chars(tuple((ord(c), ord(c)) for c in '"\\/bfnrt')),
        seq(
            Lit("u"),
            alt(
                seq(
                    Chars(
                        (
                            (ord("0"), ord("9")),
                            (ord("a"), ord("c")),
                            (ord("A"), ord("C")),
                            (ord("e"), ord("f")),
                            (ord("E"), ord("F")),
                        )
                    ),
                    rep(HEX, 3, 3),
                ),
                seq(
                    Chars(((ord("d"), ord("d")), (ord("D"), ord("D")))),
                    Chars(((ord("0"), ord("7")),)),
                    rep(HEX, 2, 2),
                ),
            ),
        ),
    ),
)
WS = rep(Lit(" "), 0, 1)
# ASCII mode: printable ASCII except quote and backslash (no escapes), exactly one byte per character
ASCII_CHAR = Chars(((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E)))

# Formats the jsonschema format checker verifies and that we can spell exactly (as a subset).
_TWO = {"month": alt(seq(Lit("0"), NONZERO), seq(Lit("1"), Chars(((ord("0"), ord("2")),))))}


def _digits(lo: str, hi: str) -> Node:
    return Chars(((ord(lo), ord(hi)),))


_DATE = seq(
    rep(DIGIT, 4, 4),
    Lit("-"),
    _TWO["month"],
    Lit("-"),
    alt(seq(Lit("0"), NONZERO), seq(Lit("1"), DIGIT), seq(Lit("2"), _digits("0", "8"))),
)
_TIME = seq(
    alt(seq(_digits("0", "1"), DIGIT), seq(Lit("2"), _digits("0", "3"))),
    Lit(":"),
    _digits("0", "5"),
    DIGIT,
    Lit(":"),
    _digits("0", "5"),
    DIGIT,
    Lit("Z"),
)
_LOWER_DIGIT = Chars(((ord("a"), ord("z")), (ord("0"), ord("9"))))
FORMATS: dict[str, Node] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": seq(_DATE, Lit("T"), _TIME),
    "uuid": seq(
        rep(HEX, 8, 8),
        Lit("-"),
        rep(HEX, 4, 4),
        Lit("-"),
        rep(HEX, 4, 4),
        Lit("-"),
        rep(HEX, 4, 4),
        Lit("-"),
        rep(HEX, 12, 12),
    ),
    "email": seq(
        rep(
            Chars(((ord("a"), ord("z")), (ord("0"), ord("9")), (ord("."), ord(".")), (ord("_"), ord("_")))),
            1,
            24,
        ),
        Lit("@"),
        rep(_LOWER_DIGIT, 1, 24),
        Lit("."),
        rep(Chars(((ord("a"), ord("z")),)), 2, 6),
    ),
    "uri": seq(
        Lit("https://"),
        rep(_LOWER_DIGIT, 1, 24),
        Lit("."),
        rep(Chars(((ord("a"), ord("z")),)), 2, 6),
        rep(seq(Lit("/"), rep(_LOWER_DIGIT, 1, 16)), 0, 3),
    ),
}

# Keywords that only annotate (no effect on validity) or that we honour below.
_ANNOTATIONS = {
    "$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly",
    "writeOnly", "$anchor", "contentMediaType", "contentEncoding", "x-possible-values", "x-grammar",
}  # fmt: skip
_HANDLED = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "$defs", "definitions", "format",
    "unevaluatedProperties", "multipleOf", "pattern", "minProperties", "maxProperties",
}  # fmt: skip


@dataclass
class Grammar:
    """Named rules; `root` is the start rule. `to_gbnf()` renders them in definition order."""

    rules: dict[str, Node] = field(default_factory=dict)
    root: str = "root"

    def to_gbnf(self) -> str:
        return "\n".join(f"{name} ::= {render(node)}" for name, node in self.rules.items()) + "\n"


class _Builder:
    def __init__(self, schema: JSON, limits: GrammarLimits):
        self.schema = schema
        self.limits = limits
        self.grammar = Grammar()
        self._bodies: dict[Node, str] = {}
        self._refs: dict[str, str] = {}  # "$ref" -> rule name (recursion safe)

    # -- rules
    def rule(self, hint: str, node: Node) -> Ref:
        """Name `node` as a rule (identical bodies share one rule)."""
        if isinstance(node, Ref):
            return node
        if node in self._bodies:
            return Ref(self._bodies[node])
        name = self._fresh(hint)
        self.grammar.rules[name] = node
        self._bodies[node] = name
        return Ref(name)

    def _fresh(self, hint: str) -> str:
        base = re.sub(r"[^a-zA-Z0-9]+", "-", hint).strip("-").lower() or "r"
        name, k = base, 1
        while name in self.grammar.rules or name in ("root", "ws", "char"):
            k += 1
            name = f"{base}-{k}"
        return name

    def build(self) -> Grammar:
        self.grammar.rules["ws"] = WS
        self.grammar.rules["char"] = ASCII_CHAR if self.limits.ascii_strings else alt(PLAIN_CHAR, ESCAPE)
        body = self.value(self.schema, "record", required=True)
        self.grammar.rules = {"root": body, **self.grammar.rules}
        return self.grammar

    # -- values
    def value(self, schema: Any, where: str, required: bool = False) -> Node:
        if schema is True or schema == {}:
            return self.any_value(where)
        if schema is False:
            raise UnsupportedSchema(f"schema at {where} is `false`: no value can satisfy it")
        if not isinstance(schema, dict):
            raise UnsupportedSchema(f"schema at {where} is not an object")
        unknown = sorted(set(schema) - _ANNOTATIONS - _HANDLED)
        if unknown:
            raise UnsupportedSchema(
                f"JSON Schema keyword(s) {', '.join(unknown)} at {where} cannot be turned into an exact grammar"
            )
        if "multipleOf" in schema:
            raise UnsupportedSchema(f"multipleOf at {where} is not supported by the grammar converter")
        if "$ref" in schema:
            return self.ref(schema["$ref"], where)
        if "allOf" in schema:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merge(merged, self.deref(part), where)
            return self.value(merged, where, required)
        if "const" in schema:
            return self.literal(schema["const"], where)
        if "enum" in schema:
            return alt(*(self.literal(v, where) for v in schema["enum"]))
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.union(schema, key, where, required)
        types = schema.get("type")
        if isinstance(types, list):
            return alt(*(self.typed({**schema, "type": t}, t, where, required) for t in types))
        if types is None:
            return self.untyped(schema, where, required)
        return self.typed(schema, types, where, required)

    def untyped(self, schema: JSON, where: str, required: bool) -> Node:
        if "properties" in schema or "required" in schema:
            return self.typed(schema, "object", where, required)
        if "items" in schema or "prefixItems" in schema:
            return self.typed(schema, "array", where, required)
        return self.any_value(where)

    def union(self, schema: JSON, key: str, where: str, required: bool) -> Node:
        base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
        branches = [_merge(base, self.deref(b), where) for b in schema[key]]
        if key == "oneOf":
            kinds = [b.get("type") for b in branches]
            if any(not isinstance(k, str) for k in kinds) or len(set(kinds)) != len(kinds):
                raise UnsupportedSchema(
                    f"oneOf at {where}: only branches with distinct single types are supported "
                    "(overlapping branches could match twice)"
                )
        return alt(*(self.value(b, f"{where}/{key}/{i}", required) for i, b in enumerate(branches)))

    def typed(self, schema: JSON, kind: str, where: str, required: bool) -> Node:
        if kind == "object":
            return self.rule(where, self.object(schema, where))
        if kind == "array":
            return self.rule(where, self.array(schema, where))
        if kind == "string":
            return self.string(schema, where, required)
        if kind == "integer":
            return self.integer(schema, where)
        if kind == "number":
            return self.number(schema, where)
        if kind == "boolean":
            return alt(Lit("true"), Lit("false"))
        if kind == "null":
            return Lit("null")
        raise UnsupportedSchema(f"unknown type {kind!r} at {where}")

    def literal(self, value: Any, where: str) -> Node:
        try:
            return Lit(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
        except (TypeError, ValueError) as exc:
            raise UnsupportedSchema(f"enum/const value at {where} is not JSON: {exc}") from exc

    def object(self, schema: JSON, where: str) -> Node:
        props: dict[str, Any] = dict(schema.get("properties") or {})
        required = list(schema.get("required") or [])
        extra = schema.get("additionalProperties", True)
        for key in required:
            if key not in props:
                if extra is False:
                    raise UnsupportedSchema(
                        f"required key {key!r} at {where} is forbidden by additionalProperties"
                    )
                props[key] = extra if isinstance(extra, dict) else {}
        min_props = int(schema.get("minProperties", 0))
        if "maxProperties" in schema and int(schema["maxProperties"]) < len(props):
            raise UnsupportedSchema(f"maxProperties at {where} is below the number of declared properties")
        if min_props > len(props):
            raise UnsupportedSchema(f"minProperties {min_props} at {where} exceeds the declared properties")
        # Subset for minProperties: promote the first optional properties to required until it holds.
        for key in props:
            if len(required) >= min_props:
                break
            if key not in required:
                required.append(key)
        members: list[tuple[Node, bool]] = []
        for key, sub in props.items():
            is_req = key in required
            node = self.value(sub, f"{where}/properties/{key}", required=is_req)
            members.append((seq(self.literal(key, where), Lit(":"), Ref("ws"), node), is_req))
        sep = seq(Lit(","), Ref("ws"))

        def after(i: int) -> Node:
            """Members i.. each behind a comma (an earlier member was already emitted)."""
            return seq(*(seq(sep, kv) if req else rep(seq(sep, kv), 0, 1) for kv, req in members[i:]))

        def first(i: int) -> Node:
            """The first emitted member among i.. (optional ones may all be left out)."""
            if i == len(members):
                return EMPTY
            kv, req = members[i]
            emitted = seq(kv, after(i + 1))
            if req:
                return emitted
            return self.rule(f"{where}-from-{i}", optional_or(emitted, first(i + 1)))

        return seq(Lit("{"), first(0), Lit("}"))

    def array(self, schema: JSON, where: str) -> Node:
        if schema.get("uniqueItems"):
            raise UnsupportedSchema(f"uniqueItems at {where} cannot be enforced by a grammar")
        prefix = [
            self.value(s, f"{where}/prefixItems/{i}", True)
            for i, s in enumerate(schema.get("prefixItems") or [])
        ]
        items = schema.get("items", True)
        lo = int(schema.get("minItems", 0))
        hi_raw = schema.get("maxItems")
        hi = int(hi_raw) if hi_raw is not None else max(lo, len(prefix), self.limits.max_items)
        if items is False:
            hi = min(hi, len(prefix))
        if lo > hi:
            raise UnsupportedSchema(f"array at {where}: minItems {lo} > the {hi} items allowed")
        item = self.value(items, f"{where}/items", True) if items is not False else EMPTY
        sep = seq(Lit(","), Ref("ws"))

        def at(k: int) -> Node:
            return prefix[k] if k < len(prefix) else item

        def tail(k: int) -> Node:
            """Positions k.. behind commas: required below minItems, optional above, capped at hi."""
            if k >= hi:
                return EMPTY
            if k >= len(prefix):
                need = max(0, lo - k)
                return seq(
                    rep(seq(sep, item), need, need) if need else EMPTY,
                    rep(seq(sep, item), 0, hi - k - need) if hi - k - need else EMPTY,
                )
            piece = seq(sep, at(k), tail(k + 1))
            return piece if k < lo else rep(piece, 0, 1)

        if hi == 0:
            return Lit("[]")
        body = seq(at(0), tail(1))
        return seq(Lit("["), body if lo > 0 else rep(body, 0, 1), Lit("]"))

    def string(self, schema: JSON, where: str, required: bool) -> Node:
        if "pattern" in schema:
            if any(k in schema for k in ("format", "minLength", "maxLength")):
                raise UnsupportedSchema(f"pattern together with format/minLength/maxLength at {where}")
            body = RegexToGrammar(
                schema["pattern"], where, self.limits.max_string_chars, self.limits.ascii_strings
            ).parse()
            return self.rule(f"{where}-pattern", seq(Lit('"'), body, Lit('"')))
        fmt = schema.get("format")
        if fmt is not None:
            if fmt in FORMATS:
                return self.rule(f"fmt-{fmt}", seq(Lit('"'), FORMATS[fmt], Lit('"')))
            if _checked_format(fmt):
                raise UnsupportedSchema(
                    f"format {fmt!r} at {where} is checked by the validator but has no grammar"
                )
        lo = int(schema.get("minLength", 0))
        hi_raw = schema.get("maxLength")
        hi = int(hi_raw) if hi_raw is not None else max(lo, self.limits.max_string_chars)
        if required and self.limits.nonempty_required_strings and lo == 0 and hi > 0:
            lo = 1
        if lo > hi:
            raise UnsupportedSchema(f"string at {where}: minLength {lo} > maxLength {hi}")
        return self.rule(f"string-{lo}-{hi}", seq(Lit('"'), rep(Ref("char"), lo, hi), Lit('"')))

    def integer(self, schema: JSON, where: str) -> Node:
        lo, hi = _int_bounds(schema)
        cap = 10**self.limits.max_int_digits - 1  # unbounded sides are capped: a subset, and finite
        lo = -cap if lo is None else lo
        hi = cap if hi is None else hi
        if lo > hi:
            raise UnsupportedSchema(f"integer at {where}: empty range [{lo}, {hi}]")
        name = (
            "integer"
            if (lo, hi) == (-cap, cap)
            else f"int-{lo}-{hi}".replace("--", "-m").replace("int--", "int-m")
        )
        return self.rule(name, int_range(lo, hi))

    def number(self, schema: JSON, where: str) -> Node:
        d, f = self.limits.max_int_digits, self.limits.max_frac_digits
        frac = seq(Lit("."), rep(DIGIT, 1, f))
        bounded = any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"))
        if not bounded:
            natural = alt(Lit("0"), seq(NONZERO, rep(DIGIT, 0, d - 1)))
            return self.rule("number", seq(rep(Lit("-"), 0, 1), natural, rep(frac, 0, 1)))
        # Subset: non-negative values whose integer part lies inside the bounds. Under a maximum the
        # fraction is only added below the top integer, so every value stays within the bounds.
        lo, hi = _int_bounds(schema)
        lo = 0 if lo is None or lo < 0 else lo
        capped = hi is None
        hi = 10**d - 1 if hi is None else hi
        if lo > hi:
            raise UnsupportedSchema(f"number at {where}: no integer part fits the bounds")
        whole = int_range(lo, hi)
        frac_top = hi if capped else hi - 1
        if frac_top < lo:
            return self.rule(f"num-{lo}-{hi}", whole)
        return self.rule(
            f"num-{lo}-{hi}",
            seq(whole, rep(frac, 0, 1)) if capped else alt(whole, seq(int_range(lo, frac_top), frac)),
        )

    def any_value(self, where: str) -> Node:
        """An unconstrained value: scalars only (strings, numbers, booleans, null), kept bounded."""
        text = self.string({}, where, required=False)
        number = self.number({}, where)
        return self.rule("any-scalar", alt(text, number, Lit("true"), Lit("false"), Lit("null")))

    # -- references
    def deref(self, schema: Any) -> Any:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            schema = {**self.resolve(schema["$ref"]), **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        return schema

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise UnsupportedSchema(f"only local $ref are supported, got {ref!r}")
        node: Any = self.schema
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise UnsupportedSchema(f"$ref {ref!r} does not resolve")
            node = node[part]
        return node

    def ref(self, ref: str, where: str) -> Node:
        if ref in self._refs:
            return Ref(self._refs[ref])
        name = self._fresh(f"ref-{ref.rsplit('/', 1)[-1]}")
        self._refs[ref] = name
        self.grammar.rules[name] = Lit("")  # placeholder so recursive references resolve to the name
        node = self.value(self.resolve(ref), ref, required=True)
        self.grammar.rules[name] = node
        return Ref(name)


def _empty(node: Node) -> bool:
    return isinstance(node, Lit) and node.text == ""


def _merge(a: JSON, b: Any, where: str) -> JSON:
    if not isinstance(b, dict):
        raise UnsupportedSchema(f"allOf/anyOf branch at {where} is not an object schema")
    out = dict(a)
    for k, v in b.items():
        if k in out and out[k] != v:
            if k == "required":
                out[k] = list(dict.fromkeys([*out[k], *v]))
            elif k == "properties":
                out[k] = {**out[k], **v}
            elif k in _ANNOTATIONS:
                continue
            else:
                raise UnsupportedSchema(f"conflicting {k!r} in allOf/anyOf at {where}")
        else:
            out[k] = v
    return out


def _int_bounds(schema: JSON) -> tuple[int | None, int | None]:
    import math

    lo = schema.get("minimum")
    hi = schema.get("maximum")
    lo = math.ceil(lo) if lo is not None else None
    hi = math.floor(hi) if hi is not None else None
    if "exclusiveMinimum" in schema:
        x = math.floor(schema["exclusiveMinimum"]) + 1
        lo = x if lo is None else max(lo, x)
    if "exclusiveMaximum" in schema:
        x = math.ceil(schema["exclusiveMaximum"]) - 1
        hi = x if hi is None else min(hi, x)
    return lo, hi


def _checked_format(fmt: str) -> bool:
    from jsonschema import Draft202012Validator

    return fmt in Draft202012Validator.FORMAT_CHECKER.checkers


# ------------------------------------------------------------------------------------------ regex
_ASCII_PRINTABLE = ((0x20, 0x7E),)
_JSON_UNSAFE = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F))  # need escaping inside a string
_CLASS_ESCAPES: dict[str, tuple[tuple[int, int], ...]] = {
    "d": ((0x30, 0x39),),
    "w": ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)),
    "s": ((0x20, 0x20),),  # a subset: the other whitespace characters would need JSON escapes
}


def _subtract(ranges: list[tuple[int, int]], holes: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    out = list(ranges)
    for h0, h1 in holes:
        nxt = []
        for a, b in out:
            if b < h0 or a > h1:
                nxt.append((a, b))
                continue
            if a < h0:
                nxt.append((a, h0 - 1))
            if b > h1:
                nxt.append((h1 + 1, b))
        out = nxt
    return out


class RegexToGrammar:
    """A JSON-string-safe grammar for the strings that fully match a regex (a subset of `re.search`).

    Supported: literals, escapes, `.`, classes (ranges, negation, \\d \\w \\s), groups (also `(?:`),
    alternation, quantifiers `? * + {m} {m,} {m,n}` (lazy forms too; unbounded ones are capped), and `^`/`$`
    at the ends. Characters that would need a JSON escape are left out of classes (a subset); a literal
    quote or backslash is written as its JSON escape. Lookarounds and backreferences raise.
    """

    def __init__(self, pattern: str, where: str, cap: int, ascii_only: bool = False):
        self.ascii_only = ascii_only
        self.p = pattern
        self.i = 0
        self.where = where
        self.cap = cap

    def negated(self, ranges: tuple[tuple[int, int], ...]) -> Node:
        """Any JSON-safe character outside `ranges` (printable ASCII only in ASCII mode)."""
        if self.ascii_only:
            left = _subtract(list(_ASCII_PRINTABLE), tuple(ranges) + _JSON_UNSAFE)
            if not left:
                raise self.fail("a negated class that leaves no printable ASCII character")
            return Chars(tuple(left))
        return Chars(tuple(ranges) + _JSON_UNSAFE, negated=True)

    def fail(self, what: str) -> UnsupportedSchema:
        return UnsupportedSchema(f"pattern {self.p!r} at {self.where}: {what} is not supported")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    def parse(self) -> Node:
        if self.peek() == "^":
            self.i += 1
        node = self.alternation()
        if self.peek() == "$":
            self.i += 1
        if self.i != len(self.p):
            raise self.fail(f"{self.p[self.i]!r} at offset {self.i}")
        return node

    def alternation(self) -> Node:
        options = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            options.append(self.sequence())
        return alt(*options)

    def sequence(self) -> Node:
        items: list[Node] = []
        while self.peek() not in ("", "|", ")") and not (self.peek() == "$" and self.i == len(self.p) - 1):
            items.append(self.quantified(self.atom()))
        return seq(*items)

    def atom(self) -> Node:
        c = self.peek()
        self.i += 1
        if c == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.peek() == "?":
                raise self.fail("a group extension (lookaround, named group)")
            inner = self.alternation()
            if self.peek() != ")":
                raise self.fail("an unclosed group")
            self.i += 1
            return inner
        if c == "[":
            return self.char_class()
        if c == ".":
            return self.negated(())
        if c == "\\":
            return self.escape(in_class=False)
        if c in "*+?{":
            raise self.fail(f"a quantifier {c!r} without an atom")
        if c in "^$":
            raise self.fail("an anchor inside the pattern")
        return self.char(ord(c))

    @staticmethod
    def char(code: int) -> Node:
        ch = chr(code)
        if ch in '"\\':
            return Lit("\\" + ch)  # JSON escape of a quote or backslash
        if code < 0x20 or code == 0x7F:
            return Lit(json.dumps(ch)[1:-1])
        return Lit(ch)

    def escape(self, in_class: bool) -> Node:
        c = self.peek()
        self.i += 1
        if c.lower() in _CLASS_ESCAPES:
            ranges = _CLASS_ESCAPES[c.lower()]
            if c.islower():
                return Chars(ranges)
            return self.negated(ranges)
        if c.isdigit() or c in "bBAZ" or c == "":
            raise self.fail(f"the escape \\{c}")
        mapping = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
        return self.char(mapping.get(c, ord(c)))

    def char_class(self) -> Node:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        first = True
        while True:
            c = self.peek()
            if c == "":
                raise self.fail("an unclosed class")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            self.i += 1
            if c == "\\":
                e = self.peek()
                self.i += 1
                if e.lower() in _CLASS_ESCAPES:
                    if e.isupper():
                        raise self.fail(f"\\{e} inside a class")
                    ranges.extend(_CLASS_ESCAPES[e])
                    continue
                mapping = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B}
                lo = mapping.get(e, ord(e))
            else:
                lo = ord(c)
            hi = lo
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.i += 1
                h = self.peek()
                self.i += 1
                if h == "\\":
                    h = self.peek()
                    self.i += 1
                hi = ord(h)
            ranges.append((lo, hi))
        if negated:
            return self.negated(tuple(ranges))
        safe = _subtract(ranges, _JSON_UNSAFE)
        if not safe:
            raise self.fail("a class of characters that all need JSON escapes")
        return Chars(tuple(safe))

    def quantified(self, node: Node) -> Node:
        c = self.peek()
        lo: int
        hi: int | None
        if c == "?":
            lo, hi = 0, 1
        elif c == "*":
            lo, hi = 0, None
        elif c == "+":
            lo, hi = 1, None
        elif c == "{" and re.match(r"\{\d+(,\d*)?\}", self.p[self.i :]):
            m = re.match(r"\{(\d+)(,(\d*))?\}", self.p[self.i :])
            assert m is not None
            lo = int(m.group(1))
            hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
            self.i += len(m.group(0)) - 1
        else:
            return node
        self.i += 1
        if self.peek() in ("?", "+"):  # lazy / possessive forms match the same strings
            self.i += 1
        if hi is None:
            hi = max(lo, self.cap)
        return rep(node, lo, hi)


# ------------------------------------------------------------------------------------------ bounds
def bounded_schema(schema: JSON, limits: GrammarLimits | None = None) -> JSON:
    """A copy of `schema` whose every string, array and integer is bounded (a subset of its language).

    Any grammar engine (ours, llama.cpp's converter, a server's `response_format`) then produces finite
    outputs: strings get `maxLength`, arrays `maxItems`, integers a digit range, and required free-text
    strings `minLength: 1`.
    """
    limits = limits or GrammarLimits()
    cap = 10**limits.max_int_digits - 1

    def walk(node: Any, required: bool) -> Any:
        if not isinstance(node, dict):
            return node
        out = dict(node)
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            if isinstance(out.get(key), list):
                out[key] = [walk(b, required) for b in out[key]]
        for key in ("$defs", "definitions"):
            if isinstance(out.get(key), dict):
                out[key] = {k: walk(v, True) for k, v in out[key].items()}
        if isinstance(out.get("properties"), dict):
            req = set(out.get("required") or [])
            out["properties"] = {k: walk(v, k in req) for k, v in out["properties"].items()}
        if isinstance(out.get("items"), dict):
            out["items"] = walk(out["items"], True)
        if isinstance(out.get("additionalProperties"), dict):
            out["additionalProperties"] = walk(out["additionalProperties"], True)
        types = out.get("type")
        kinds = set(types) if isinstance(types, list) else {types}
        free = not any(k in out for k in ("enum", "const", "format", "pattern", "$ref"))
        if "string" in kinds and free:
            out.setdefault("maxLength", max(int(out.get("minLength", 0)), limits.max_string_chars))
            if (
                required
                and limits.nonempty_required_strings
                and "minLength" not in out
                and out["maxLength"] > 0
            ):
                out["minLength"] = 1
        if "array" in kinds and "maxItems" not in out:
            out["maxItems"] = max(int(out.get("minItems", 0)), limits.max_items)
        if "integer" in kinds and free and kinds == {"integer"}:
            if not any(k in out for k in ("minimum", "exclusiveMinimum")):
                out["minimum"] = -cap
            if not any(k in out for k in ("maximum", "exclusiveMaximum")):
                out["maximum"] = cap
        return out

    return walk(schema, True)


# ------------------------------------------------------------------------------------------ API
GRAMMAR_KEY = "x-grammar"  # schema annotation carrying GrammarLimits fields (validators ignore it)


def limits_of(schema: JSON, limits: GrammarLimits | None = None) -> GrammarLimits:
    """`limits`, overridden by the schema's own `x-grammar` annotation (how systems pass them through)."""
    base = limits or GrammarLimits()
    extra = schema.get(GRAMMAR_KEY) if isinstance(schema, dict) else None
    if not extra:
        return base
    known = set(GrammarLimits.__dataclass_fields__)
    return GrammarLimits(**{**base.__dict__, **{k: v for k, v in extra.items() if k in known}})


def build_grammar(schema: JSON, limits: GrammarLimits | None = None) -> Grammar:
    """The grammar tree of a schema (rules by name; `root` first)."""
    return _Builder(schema, limits_of(schema, limits)).build()


def max_bytes(grammar: Grammar) -> float:
    """UTF-8 length of the grammar's longest sentence (inf if unbounded or recursive).

    With a byte-level BPE tokenizer every token covers at least one byte, so `max_bytes + 1` new tokens
    (the +1 for end of turn) always hold a complete sentence: no output can be cut off.
    """
    memo: dict[str, float] = {}

    def size(node: Node, stack: frozenset[str]) -> float:
        if isinstance(node, Lit):
            return float(len(node.text.encode("utf-8")))
        if isinstance(node, Chars):
            if node.negated:
                return 4.0
            return float(max(len(chr(b).encode("utf-8")) for _, b in node.ranges))
        if isinstance(node, Seq):
            return sum(size(i, stack) for i in node.items)
        if isinstance(node, Alt):
            return max(size(o, stack) for o in node.options)
        if isinstance(node, Rep):
            inner = size(node.node, stack)
            return math.inf if node.hi is None and inner > 0 else inner * (node.hi or 0)
        if isinstance(node, Ref):
            if node.name in stack:
                return math.inf
            if node.name not in memo:
                memo[node.name] = size(grammar.rules[node.name], stack | {node.name})
            return memo[node.name]
        raise TypeError(node)

    return size(Ref(grammar.root), frozenset())


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
