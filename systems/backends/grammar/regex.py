"""Regex (`pattern`) -> grammar for the JSON string contents that the regex fully matches.

Soundness first: every string the grammar yields must be found by `re.search(pattern, s)` (the judge,
`jsonschema`, uses Python's `re`) and by an ECMA-262 engine (what the JSON Schema spec names). So a class
is under-approximated where it is used positively and over-approximated where it is negated:

- `\\d \\w \\s` used positively are their ASCII sets (inside both engines' sets);
- negated (`\\D \\W \\S`, `[^\\d]`, `[^\\s]`) they exclude Python's Unicode sets plus ECMA's extra space
  characters, so `^\\S$` never yields NBSP;
- `.` excludes every line terminator of either engine;
- characters that would need a JSON escape are left out of classes (a subset); a literal quote, backslash
  or control character is written as its JSON escape.

Supported: literals, escapes (`\\xHH`, `\\uHHHH`, `\\UHHHHHHHH`, `\\n` ...), classes (ranges, negation),
groups (also `(?:`), alternation, greedy and lazy quantifiers (unbounded ones capped), and `^` / `$` at the
ends. Strings that fully match the body are a subset of those `re.search` finds. Lookarounds,
backreferences, word boundaries, possessive quantifiers, inline flags and octal escapes raise.
"""

from __future__ import annotations

import functools
import json
import re
import sys

from systems.backends.grammar.nodes import Chars, Lit, Node, alt, rep, seq

Ranges = list[tuple[int, int]]
MAX_CP = sys.maxunicode
JSON_UNSAFE: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F), (0xD800, 0xDFFF)]
_ASCII = {
    "d": [(0x30, 0x39)],
    "w": [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)],
    "s": [(0x09, 0x0D), (0x20, 0x20)],
}
_ECMA_SPACE = [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
               0xFEFF, *range(0x2000, 0x200B)]  # fmt: skip
LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]


def normalise(ranges: Ranges) -> Ranges:
    """Sorted, merged, non-overlapping ranges."""
    out: Ranges = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def complement(ranges: Ranges) -> Ranges:
    out, start = [], 0
    for a, b in normalise(ranges):
        if a > start:
            out.append((start, a - 1))
        start = b + 1
    if start <= MAX_CP:
        out.append((start, MAX_CP))
    return out


def subtract(ranges: Ranges, holes: Ranges) -> Ranges:
    keep = complement(holes)
    out = []
    for a, b in normalise(ranges):
        for c, d in keep:
            lo, hi = max(a, c), min(b, d)
            if lo <= hi:
                out.append((lo, hi))
    return normalise(out)


@functools.cache
def _unicode_set(letter: str) -> tuple[tuple[int, int], ...]:
    """Every code point Python's `\\d` / `\\w` / `\\s` matches (plus ECMA's spaces for `s`), as ranges."""
    rx = re.compile(f"\\{letter}")
    found: Ranges = []
    for c in range(MAX_CP + 1):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if rx.match(chr(c)):
            if found and found[-1][1] == c - 1:
                found[-1] = (found[-1][0], c)
            else:
                found.append((c, c))
    if letter == "s":
        found += [(c, c) for c in _ECMA_SPACE]
    return tuple(normalise(found + _ASCII[letter]))


def class_escape(letter: str, positive: bool) -> Ranges:
    """Code points for `\\d` etc. (lower case) or `\\D` etc. (upper case), approximated from the safe side.

    `positive` says whether the class is used as written (under-approximate) or inside a negation
    (over-approximate, so that its complement stays inside the engines' sets).
    """
    low = letter.lower()
    under, over = _ASCII[low], list(_unicode_set(low))
    if letter.islower():
        return list(under if positive else over)
    return complement(over) if positive else complement(under)


_SIMPLE_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "a": 0x07}


class RegexToGrammar:
    """Parse one pattern into a grammar node over JSON string contents (see the module docstring)."""

    def __init__(self, pattern: str, where: str, cap: int, ascii_only: bool = False):
        self.p = pattern
        self.i = 0
        self.where = where
        self.cap = cap
        self.ascii_only = ascii_only
        try:
            re.compile(pattern)
        except re.error as exc:
            raise self.fail(f"a regex Python cannot compile ({exc})") from None

    def fail(self, what: str):
        from systems.backends.grammar.errors import UnsupportedSchema

        return UnsupportedSchema(f"pattern {self.p!r} at {self.where}: {what} is not supported")

    def peek(self, k: int = 0) -> str:
        return self.p[self.i + k] if self.i + k < len(self.p) else ""

    def parse(self) -> Node:
        if self.peek() == "^":
            self.i += 1
        node = self.alternation()
        if self.peek() == "$":
            self.i += 1
        if self.i != len(self.p):
            raise self.fail(f"{self.p[self.i]!r} at offset {self.i}")
        return node

    def chars(self, ranges: Ranges) -> Node:
        """A class restricted to what can stand unescaped in a JSON string (ASCII only if asked)."""
        safe = subtract(ranges, JSON_UNSAFE)
        if self.ascii_only:
            safe = subtract(safe, [(0x7F, MAX_CP)])
        if not safe:
            raise self.fail("a class of characters that all need JSON escapes")
        return Chars(tuple(safe))

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
                raise self.fail("a group extension (lookaround, named group, flags)")
            inner = self.alternation()
            if self.peek() != ")":
                raise self.fail("an unclosed group")
            self.i += 1
            return inner
        if c == "[":
            return self.char_class()
        if c == ".":
            return self.chars(complement(LINE_TERMINATORS))
        if c == "\\":
            got = self.escape()
            return self.chars(got) if isinstance(got, list) else self.char(got)
        if c in "*+?{" and not (c == "{" and not re.match(r"\{\d+(,\d*)?\}", self.p[self.i - 1 :])):
            raise self.fail(f"a quantifier {c!r} without an atom")
        if c in "^$":
            raise self.fail("an anchor inside the pattern")
        return self.char(ord(c))

    def char(self, code: int) -> Node:
        ch = chr(code)
        if 0xD800 <= code <= 0xDFFF:
            raise self.fail("a surrogate code point")
        if self.ascii_only and code >= 0x7F:
            raise self.fail("a non-ASCII literal in ASCII mode")
        if ch in '"\\' or code < 0x20 or code == 0x7F:
            return Lit(json.dumps(ch)[1:-1])  # its JSON escape: the decoded string holds the character
        return Lit(ch)

    def escape(self, positive: bool = True) -> int | Ranges:
        """One escape after a backslash: a code point, or a class's ranges."""
        c = self.peek()
        self.i += 1
        if c.lower() in _ASCII:
            return class_escape(c, positive)
        if c in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[c]
        for letter, width in (("x", 2), ("u", 4), ("U", 8)):
            if c == letter:
                digits = self.p[self.i : self.i + width]
                if not re.fullmatch(f"[0-9a-fA-F]{{{width}}}", digits):
                    raise self.fail(f"the escape \\{c}{digits}")
                self.i += width
                return int(digits, 16)
        if c == "" or c.isalnum():  # backreferences, \b \B \A \Z, octal, \N{...}, ...
            raise self.fail(f"the escape \\{c}")
        return ord(c)

    def char_class(self) -> Node:
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        positive = not negated
        ranges: Ranges = []
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
            if c == "[" and self.peek() in ":=.":
                raise self.fail("a POSIX class")
            lo: int | Ranges = self.escape(positive) if c == "\\" else ord(c)
            if isinstance(lo, list):
                ranges.extend(lo)
                continue
            hi = lo
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                h = self.peek()
                self.i += 1
                got = self.escape(positive) if h == "\\" else ord(h)
                if isinstance(got, list):
                    raise self.fail("a class escape as a range end")
                hi = got
                if hi < lo:
                    raise self.fail("a reversed range")
            ranges.append((lo, hi))
        return self.chars(complement(ranges) if negated else ranges)

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
        if self.peek() == "?":  # a lazy quantifier matches the same strings
            self.i += 1
        elif self.peek() == "+":
            raise self.fail("a possessive quantifier")
        if lo > 4096:
            raise self.fail(f"a repeat of at least {lo}")
        if hi is None or hi > max(lo, self.cap):  # capped: a subset of the strings it matches
            hi = max(lo, self.cap)
        return rep(node, lo, hi)
