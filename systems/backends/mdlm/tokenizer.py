"""A byte-level BPE tokenizer trained on a task's texts, so the embedded DLM's sequences stay short.

Written for this project (no tokenizer library): text is split into chunks (letter runs, digit runs of
up to 3, punctuation runs, whitespace), each chunk is UTF-8 bytes, and merges of the most frequent
adjacent symbol pair are learned greedily (ties broken by the pair's bytes, so training is
deterministic). Any text round-trips exactly: unseen characters fall back to single bytes.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

CHUNK = re.compile(r" ?[^\W\d_]+| ?\d{1,3}| ?[^\w\s]+|\s+(?!\S)|\s+|_+")

SPECIALS = ("<pad>", "<mask>", "<eos>", "<nul>", "<sep>")
"""pad: left padding of prompts; mask: the diffusion mask; eos: response end / fill;
nul: empty position inside a skeleton value slot (stripped afterwards); sep: prompt/response boundary."""


class BPETokenizer:
    """Byte-level BPE with a handful of special tokens at ids 0..4."""

    def __init__(self, merges: list[tuple[bytes, bytes]]) -> None:
        self.merges = merges
        self.ranks = {pair: i for i, pair in enumerate(merges)}
        self.vocab: list[bytes | str] = list(SPECIALS) + [bytes([i]) for i in range(256)]
        for a, b in merges:
            self.vocab.append(a + b)
        self.index: dict[bytes, int] = {v: i for i, v in enumerate(self.vocab) if isinstance(v, bytes)}
        self._encode_chunk = lru_cache(maxsize=200_000)(self._encode_chunk_uncached)

    # special ids
    pad_id, mask_id, eos_id, nul_id, sep_id = range(5)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _encode_chunk_uncached(self, chunk: str) -> tuple[int, ...]:
        syms = [bytes([c]) for c in chunk.encode("utf-8")]
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i : i + 2] = [syms[i] + syms[i + 1]]
        return tuple(self.index[s] for s in syms)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for chunk in CHUNK.findall(text):
            out.extend(self._encode_chunk(chunk))
        return out

    def decode(self, ids: Iterable[int]) -> str:
        """Bytes of non-special tokens joined and decoded (special tokens are dropped)."""
        buf = b"".join(self.vocab[i] for i in ids if i >= len(SPECIALS))  # type: ignore[misc]
        return buf.decode("utf-8", errors="replace")

    def token_text(self, i: int) -> str:
        v = self.vocab[i]
        return v if isinstance(v, str) else v.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, object]:
        return {"kind": "bytebpe-v1", "merges": [[a.hex(), b.hex()] for a, b in self.merges]}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> BPETokenizer:
        return cls([(bytes.fromhex(a), bytes.fromhex(b)) for a, b in d["merges"]])  # type: ignore[union-attr]

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        return cls.from_json(json.loads(path.read_text()))


def train_bpe(texts: Iterable[str], vocab_size: int) -> BPETokenizer:
    """Learn `vocab_size - 261` merges from `texts` (deterministic: ties go to the smallest pair)."""
    n_merges = max(0, vocab_size - len(SPECIALS) - 256)
    chunk_freq: Counter[str] = Counter()
    for t in texts:
        chunk_freq.update(CHUNK.findall(t))
    words = [[bytes([c]) for c in w.encode("utf-8")] for w in chunk_freq]
    freqs = list(chunk_freq.values())
    pair_count: Counter[tuple[bytes, bytes]] = Counter()
    where: dict[tuple[bytes, bytes], set[int]] = defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:], strict=False):
            pair_count[(a, b)] += freqs[wi]
            where[(a, b)].add(wi)
    merges: list[tuple[bytes, bytes]] = []
    for _ in range(n_merges):
        if not pair_count:
            break
        best_n = max(pair_count.values())
        if best_n < 2:
            break
        pair = min(p for p, n in pair_count.items() if n == best_n)
        merges.append(pair)
        merged = pair[0] + pair[1]
        for wi in list(where.get(pair, ())):
            w = words[wi]
            f = freqs[wi]
            for a, b in zip(w, w[1:], strict=False):
                pair_count[(a, b)] -= f
                if pair_count[(a, b)] <= 0:
                    del pair_count[(a, b)]
                where[(a, b)].discard(wi)
            i, new = 0, []
            while i < len(w):
                if i + 1 < len(w) and w[i] == pair[0] and w[i + 1] == pair[1]:
                    new.append(merged)
                    i += 2
                else:
                    new.append(w[i])
                    i += 1
            words[wi] = new
            for a, b in zip(new, new[1:], strict=False):
                pair_count[(a, b)] += f
                where[(a, b)].add(wi)
    return BPETokenizer(merges)
