"""Draw random sentences straight from a grammar tree (the one rendered to GBNF).

Why: a sentence drawn from the grammar and then validated by `jsonschema` is a direct soundness probe
(every sentence must validate); tests and `benchmarks/grammar/coverage.py` use it beside llama.cpp's
engine. The walk is iterative, so long rule chains (byte-capped strings) do not hit Python's recursion
limit; recursive grammars are cut off after a fixed number of expansions (the draw is then skipped).
"""

from __future__ import annotations

import random

from systems.backends.grammar.nodes import Alt, Chars, Grammar, Lit, Never, Ref, Rep, Seq

# characters tried for negated classes: ASCII, accents, CJK, emoji, spaces and JSON's specials
POOL = [chr(c) for c in range(0x20, 0x7F)] + list("éß中😀\u00a0\u2028\u3000\ufeff٣\n\t\x00\x7f")


class TooDeep(Exception):
    """The draw expanded too many rules (a recursive grammar); skip it."""


def _pick(node: Chars, rng: random.Random) -> str:
    if node.negated:
        options = [c for c in POOL if not any(a <= ord(c) <= b for a, b in node.ranges)]
        return rng.choice(options)
    for _ in range(8):  # prefer code points below plane 3: SmolLM2's vocabulary cannot spell some above
        a, b = rng.choice(node.ranges)
        c = rng.choice([a, b, rng.randint(a, b)])
        if c < 0x30000:
            break
    return chr(c)


def draw(grammar: Grammar, rng: random.Random, max_steps: int = 20000) -> str:
    """One random sentence (unbounded repeats draw at most 3 more than their minimum)."""
    out: list[str] = []
    stack: list = [grammar.rules[grammar.root]]
    steps = 0
    while stack:
        node = stack.pop()
        steps += 1
        if steps > max_steps:
            raise TooDeep()
        if isinstance(node, Lit):
            out.append(node.text)
        elif isinstance(node, Chars):
            out.append(_pick(node, rng))
        elif isinstance(node, Ref):
            stack.append(grammar.rules[node.name])
        elif isinstance(node, Seq):
            stack.extend(reversed(node.items))
        elif isinstance(node, Alt):
            stack.append(rng.choice(node.options))
        elif isinstance(node, Rep):
            hi = node.hi if node.hi is not None else node.lo + 3
            k = rng.choice([node.lo, hi, rng.randint(node.lo, hi)])
            stack.extend([node.node] * k)
        elif isinstance(node, Never):
            raise TooDeep()
        else:
            raise TypeError(node)
    return "".join(out)


def sentences(grammar: Grammar, n: int, seed: int = 0) -> list[str]:
    """Up to `n` random sentences (draws that recurse too deeply are skipped)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        try:
            out.append(draw(grammar, rng))
        except TooDeep:
            continue
    return out
