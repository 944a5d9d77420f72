"""Grammar trees (`Lit`, `Chars`, `Seq`, `Alt`, `Rep`, `Ref`), their GBNF rendering and numeric ranges.

Why a tree rather than GBNF text: the same object is rendered for llama.cpp, measured (`max_bytes`, the
longest sentence, which sets the token budget) and walked by the tests to draw sentences. `NEVER` stands
for the empty language, so combinators can drop impossible branches instead of emitting a broken rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any


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


@dataclass(frozen=True)
class Never:
    """The empty language (no sentence at all)."""


Node = Lit | Chars | Seq | Alt | Rep | Ref | Never
EMPTY = Lit("")
NEVER = Never()


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
    if isinstance(node, Never):  # only reachable through a recursive rule that turned out empty
        return "[^\\x00-\\U0010FFFF]"
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


def rep(node: Node, lo: int, hi: int | None) -> Node:
    """`node` repeated lo..hi times (None: unbounded), simplified where the count is 0 or 1."""
    if hi is not None and hi < lo:
        return NEVER
    if hi == 0 or node == EMPTY:
        return EMPTY
    if isinstance(node, Never):
        return EMPTY if lo == 0 else NEVER
    if lo == hi == 1:
        return node
    return Rep(node, lo, hi)


def seq(*items: Node) -> Node:
    """A sequence, flattened, without empty literals (NEVER if any part is NEVER)."""
    flat: list[Node] = []
    for i in items:
        if isinstance(i, Never):
            return NEVER
        flat.extend(i.items if isinstance(i, Seq) else (i,))
    flat = [i for i in flat if i != EMPTY]
    return EMPTY if not flat else flat[0] if len(flat) == 1 else Seq(tuple(flat))


def alt(*options: Node) -> Node:
    """A choice without duplicates or impossible options (NEVER if none is left)."""
    uniq = [o for o in dict.fromkeys(options) if not isinstance(o, Never)]
    if not uniq:
        return NEVER
    if EMPTY in uniq:  # "a | (nothing)" is written as an optional group
        rest = [o for o in uniq if o != EMPTY]
        return EMPTY if not rest else rep(alt(*rest), 0, 1)
    return uniq[0] if len(uniq) == 1 else Alt(tuple(uniq))


def chars(*pairs: tuple[int, int]) -> Chars:
    return Chars(tuple(pairs))


def crange(lo: str, hi: str) -> Chars:
    return Chars(((ord(lo), ord(hi)),))


DIGIT = crange("0", "9")
NONZERO = crange("1", "9")
HEX = Chars(((ord("0"), ord("9")), (ord("a"), ord("f")), (ord("A"), ord("F"))))


# ------------------------------------------------------------------------------------------ integers
def _same_length_range(a: str, b: str) -> Node:
    """Digit strings of equal length between a and b (inclusive, leading zeros allowed), digit by digit."""
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


def padded_range(lo: int, hi: int, width: int) -> Node:
    """Zero-padded `width`-digit spellings of the integers in [lo, hi] (fraction digits)."""
    lo, hi = max(lo, 0), min(hi, 10**width - 1)
    if lo > hi:
        return NEVER
    return _same_length_range(str(lo).zfill(width), str(hi).zfill(width))


def uint_range(lo: int, hi: int) -> Node:
    """Canonical spellings (no leading zeros) of the integers in [lo, hi], 0 <= lo."""
    if lo > hi:
        return NEVER
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
    if lo > hi:
        return NEVER
    if lo >= 0:
        return uint_range(lo, hi)
    if hi < 0:
        return seq(Lit("-"), uint_range(-hi, -lo))
    return alt(seq(Lit("-"), uint_range(1, -lo)), uint_range(0, hi))


# ------------------------------------------------------------------------------------------ decimals
@dataclass(frozen=True)
class Bound:
    """One side of an interval: the value and whether it is excluded."""

    value: Fraction
    exclusive: bool = False

    def below(self, x: Fraction) -> bool:  # x satisfies this bound used as a minimum
        return x > self.value or (x == self.value and not self.exclusive)

    def above(self, x: Fraction) -> bool:  # x satisfies this bound used as a maximum
        return x < self.value or (x == self.value and not self.exclusive)


def _nonneg_decimal(lo: Bound, hi: Bound, frac: int) -> Node:
    """Spellings `I` or `I.F` (F: 1..frac digits) of non-negative values in [lo, hi] (both finite)."""
    opts: list[Node] = []
    # plain integers
    a = max(0, math.ceil(lo.value))
    if not lo.below(Fraction(a)):
        a += 1
    b = math.floor(hi.value)
    if not hi.above(Fraction(b)):
        b -= 1
    opts.append(uint_range(a, b) if a <= b else NEVER)
    if frac <= 0:
        return alt(*opts)
    top = 1 - Fraction(1, 10**frac)  # the largest fraction that can be written
    # integer parts whose every fraction fits: I.0 >= lo and I + top <= hi
    fa = max(0, math.ceil(lo.value))
    if not lo.below(Fraction(fa)):
        fa += 1
    fb = math.floor(hi.value - top)
    if not hi.above(fb + top):
        fb -= 1
    if fa <= fb:
        opts.append(seq(uint_range(fa, fb), Lit("."), rep(DIGIT, 1, frac)))
    for i in sorted({math.floor(lo.value), math.floor(hi.value)}):
        if i < 0 or (fa <= i <= fb):
            continue
        per_len = []
        for k in range(1, frac + 1):
            scale = 10**k
            fmin = math.ceil((lo.value - i) * scale)
            if not lo.below(i + Fraction(fmin, scale)):
                fmin += 1
            fmax = math.floor((hi.value - i) * scale)
            if not hi.above(i + Fraction(fmax, scale)):
                fmax -= 1
            per_len.append(padded_range(fmin, fmax, k))
        opts.append(seq(Lit(str(i)), Lit("."), alt(*per_len)))
    return alt(*opts)


def decimal_range(lo: Bound, hi: Bound, frac: int) -> Node:
    """Plain decimals (no exponent, at most `frac` fraction digits) with values in [lo, hi]."""
    opts = []
    if hi.value >= 0:
        low = lo if lo.value >= 0 else Bound(Fraction(0))
        opts.append(_nonneg_decimal(low, hi, frac))
    if lo.value < 0:  # x = -y with y in [-hi, -lo]
        high = Bound(-lo.value, lo.exclusive)
        # when 0 is in range, "-0" and "-0.0" are valid spellings of it, so y may start at 0
        low = Bound(-hi.value, hi.exclusive) if hi.value <= 0 else Bound(Fraction(0))
        opts.append(seq(Lit("-"), _nonneg_decimal(low, high, frac)))
    return alt(*opts)


# ------------------------------------------------------------------------------------------ grammar
@dataclass
class Grammar:
    """Named rules; `root` is the start rule. `to_gbnf()` renders them in definition order."""

    rules: dict[str, Node] = field(default_factory=dict)
    root: str = "root"

    def to_gbnf(self) -> str:
        return "\n".join(f"{name} ::= {render(node)}" for name, node in self.rules.items()) + "\n"


def max_bytes(grammar: Grammar) -> float:
    """UTF-8 length of the grammar's longest sentence (inf if unbounded or recursive).

    With a byte-level BPE tokenizer every token covers at least one byte, so `max_bytes + 1` new tokens
    (the +1 for end of turn) always hold a complete sentence: no output can be cut off. Rules are sized
    in definition order first, so long rule chains (byte-capped strings) never recurse deeply.
    """
    memo: dict[str, float] = {}

    def size(node: Node, stack: frozenset[str]) -> float:
        if isinstance(node, Lit):
            return float(len(node.text.encode("utf-8")))
        if isinstance(node, Chars):
            if node.negated:
                return 4.0
            return float(max(len(chr(b).encode("utf-8")) for _, b in node.ranges))
        if isinstance(node, Never):
            return 0.0
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

    for name in grammar.rules:
        if name.startswith("sb-") and name not in memo:
            memo[name] = size(grammar.rules[name], frozenset({name}))
    return size(Ref(grammar.root), frozenset())
