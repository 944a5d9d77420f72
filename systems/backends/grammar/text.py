"""JSON string contents: the character units by UTF-8 size, byte-capped strings, and string formats.

Why byte caps: the token budget is counted in bytes (a byte-level BPE token covers at least one byte),
so a string cap in *bytes* makes the longest record exact without giving up non-ASCII text or escapes.
A string of at most N bytes has at most N characters, so it satisfies `maxLength: N` (a subset).
"""

from __future__ import annotations

from systems.backends.grammar.nodes import (
    DIGIT,
    HEX,
    NONZERO,
    Chars,
    Lit,
    Node,
    alt,
    chars,
    crange,
    rep,
    seq,
)

ASCII1 = chars((0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E))  # printable ASCII without quote and backslash
ESC2 = seq(Lit("\\"), Chars(tuple((ord(c), ord(c)) for c in '"\\/bfnrt')))
UTF2 = chars((0x80, 0x7FF))
UTF3 = chars((0x800, 0xD7FF), (0xE000, 0xFFFF))
UTF4 = chars((0x10000, 0x10FFFF))
# \u escapes outside the surrogate block (a lone surrogate would break UTF-8 re-encoding downstream)
ESC6 = seq(
    Lit("\\u"),
    alt(
        seq(chars((0x30, 0x39), (0x61, 0x63), (0x41, 0x43), (0x65, 0x66), (0x45, 0x46)), rep(HEX, 3, 3)),
        seq(chars((ord("d"), ord("d")), (ord("D"), ord("D"))), crange("0", "7"), rep(HEX, 2, 2)),
    ),
)


def units(ascii_only: bool) -> dict[int, Node]:
    """String content units grouped by their UTF-8 size in bytes."""
    if ascii_only:
        return {1: ASCII1, 2: ESC2}
    return {1: ASCII1, 2: alt(ESC2, UTF2), 3: UTF3, 4: UTF4, 6: ESC6}


# ------------------------------------------------------------------------------------------ formats
_DAY28 = alt(seq(Lit("0"), NONZERO), seq(Lit("1"), DIGIT), seq(Lit("2"), crange("0", "8")))
_DAY30 = alt(_DAY28, Lit("29"), Lit("30"))
_DAY31 = alt(_DAY30, Lit("31"))
# Every real calendar day except 29 February (leap years are not tracked): a subset of valid dates.
_MONTH_DAY = alt(
    seq(alt(*(Lit(m) for m in ("01", "03", "05", "07", "08", "10", "12"))), Lit("-"), _DAY31),
    seq(alt(*(Lit(m) for m in ("04", "06", "09", "11"))), Lit("-"), _DAY30),
    seq(Lit("02-"), _DAY28),
)
_DATE = seq(NONZERO, rep(DIGIT, 3, 3), Lit("-"), _MONTH_DAY)  # years 1000-9999: Python rejects year 0
_TIME = seq(
    alt(seq(crange("0", "1"), DIGIT), seq(Lit("2"), crange("0", "3"))),
    Lit(":"),
    crange("0", "5"),
    DIGIT,
    Lit(":"),
    crange("0", "5"),
    DIGIT,
    Lit("Z"),
)
_LOWER_DIGIT = chars((ord("a"), ord("z")), (ord("0"), ord("9")))
# Subsets of each format that the jsonschema format checker (and the RFCs) accept.
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
        rep(chars((ord("a"), ord("z")), (ord("0"), ord("9")), (ord("_"), ord("_"))), 1, 24),
        Lit("@"),
        rep(_LOWER_DIGIT, 1, 24),
        Lit("."),
        rep(chars((ord("a"), ord("z"))), 2, 6),
    ),
    "uri": seq(
        Lit("https://"),
        rep(_LOWER_DIGIT, 1, 24),
        Lit("."),
        rep(chars((ord("a"), ord("z"))), 2, 6),
        rep(seq(Lit("/"), rep(_LOWER_DIGIT, 1, 16)), 0, 3),
    ),
}
