"""The embedded DLM's tokenizer: byte-level BPE from the `tokenizers` library, trained on the task's texts.

Byte-level BPE (GPT-2 pre-tokenisation: letter runs with their leading space, digit runs, punctuation
runs, whitespace) keeps a MultiWOZ record at ~60 tokens with a 1024-id vocabulary and round-trips any
text (unseen characters fall back to byte tokens). Five special tokens come first, at ids 0..4.
`pre_tokenizer("phrase")` is the opt-in alternative whose merges cross spaces; `"digits"` and
`"digit-pairs"` write digits one or two to a token (see its docstring).

Determinism: `BpeTrainer` breaks count ties by the pair's ids, and without a continuing-subword prefix
every id it assigns comes from the sorted byte alphabet or an earlier merge, so the same texts in the
same order give the same merges in every process (tests/test_mdlm.py checks two processes). The trained
tokenizer is saved next to the model in the DLM cache (`tokenizer.json`, the library's own format).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIALS = ("<pad>", "<mask>", "<eos>", "<nul>", "<sep>")
"""pad: left padding of prompts; mask: the diffusion mask; eos: response end / fill;
nul: empty position inside a skeleton value slot (stripped afterwards); sep: prompt/response boundary."""

FORMAT = "hf-bytelevel-bpe-v1"


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """Inverse of the byte-level alphabet: the printable character standing for each byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), 256))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class BPETokenizer:
    """A trained `tokenizers.Tokenizer` with the interface the DLM code uses (ids, bytes per id)."""

    pad_id, mask_id, eos_id, nul_id, sep_id = range(5)

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tk = tokenizer
        # text is data: "<mask>" in a prompt or record is spelled in bytes, never the mask id
        self.tk.encode_special_tokens = True
        for i, s in enumerate(SPECIALS):
            if tokenizer.token_to_id(s) != i:
                raise ValueError(f"tokenizer must have {s!r} at id {i}")
        dec = byte_decoder()
        n = tokenizer.get_vocab_size()
        self.vocab: list[bytes | str] = []
        for i in range(n):
            t = tokenizer.id_to_token(i)
            self.vocab.append(t if i < len(SPECIALS) else bytes(dec[c] for c in t))
        self._line_cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return self.tk.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.tk.encode_batch(list(texts), add_special_tokens=False)]

    def encode_line(self, line: str) -> tuple[int, ...]:
        """Tokens of one prompt line (memoised: prompts repeat their lines across samples)."""
        got = self._line_cache.get(line)
        if got is None:
            got = tuple(self.encode(line))
            if len(self._line_cache) < 200_000:
                self._line_cache[line] = got
        return got

    def decode(self, ids: Iterable[int]) -> str:
        """Bytes of non-special tokens joined and decoded (special tokens are dropped)."""
        buf = b"".join(self.vocab[i] for i in ids if i >= len(SPECIALS))  # type: ignore[misc]
        return buf.decode("utf-8", errors="replace")

    def token_bytes(self, i: int) -> bytes:
        v = self.vocab[i]
        return v.encode() if isinstance(v, str) else v

    def token_text(self, i: int) -> str:
        v = self.vocab[i]
        return v if isinstance(v, str) else v.decode("utf-8", errors="replace")

    def to_json(self) -> dict[str, object]:
        return {"kind": FORMAT, "tokenizer": json.loads(self.tk.to_str())}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> BPETokenizer:
        if d.get("kind") != FORMAT:
            raise ValueError(f"unknown tokenizer format {d.get('kind')!r} (expected {FORMAT})")
        return cls(Tokenizer.from_str(json.dumps(d["tokenizer"])))

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path: Path) -> BPETokenizer:
        return cls.from_json(json.loads(path.read_text()))


JSON_PUNCTUATION = r'[\s{}\[\]":,]*[{}\[\]":,]+[\s{}\[\]":,]*'
"""A run of JSON punctuation (braces, brackets, quotes, colons, commas) with the whitespace around it."""

PRE_TOKENIZATIONS = ("gpt2", "phrase", "digits", "digit-pairs", "numbers")


def pre_tokenizer(kind: str) -> pre_tokenizers.PreTokenizer:
    """How text is split before BPE merges.

    `gpt2`: words with their leading space, digit runs, punctuation runs (GPT-2's rule; merges stay
    inside a word). `phrase`: only runs of JSON punctuation split the text, so merges may cross spaces
    and a phrase that repeats in the training texts becomes one token (the idea of SuperBPE, Liu et al.
    2025), while keys, quotes and separators never share a token with the words they enclose. A
    TruthfulQA record is about half as many tokens (docs/systems-diffusion.md). `digits`: GPT-2's rule
    after every digit is split off on its own, so no merge spans two digits (as LLaMA's tokenizer does,
    Touvron et al. 2023). Under `gpt2` a MultiWOZ train ID is "TR" and one to four digit tokens
    ("9547"; "6", "10", "1"), so how many positions an ID takes depends on which merges its digits
    happen to have; with `digits` every ID is "TR" and four digits (docs/systems-diffusion.md, "Digit
    tokens"). `digit-pairs`: GPT-2's rule after each run of digits is cut into pairs from the left
    ("9547" is "95" "47", "105" is "10" "5"), and every pair "00".."99" is a token (`DIGIT_PAIRS` join
    the training texts), so an ID is "TR" and two tokens and a clock time keeps its two-digit tokens.
    `numbers`: as `digit-pairs`, but a run of one to three digits stays whole and every number 0..999
    is a token (`NUMBERS` join the training texts; their ids come on top of `vocab_size`), so "105 minutes"
    and "45 minutes" both write their number in one token, where under `digit-pairs` "105" is "10" "5"
    and came out as "10" (docs/systems-diffusion.md, "Digit tokens")."""
    if kind == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "phrase":
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(JSON_PUNCTUATION), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if kind in ("digits", "digit-pairs", "numbers"):
        split = {
            "digits": pre_tokenizers.Digits(individual_digits=True),
            "digit-pairs": pre_tokenizers.Split(Regex(r"\d\d"), behavior="isolated"),
            # a whole run of 1-3 digits, else pairs from the left (a longer run's odd last digit alone)
            "numbers": pre_tokenizers.Split(Regex(r"(?<!\d)\d{1,3}(?!\d)|\d\d"), behavior="isolated"),
        }[kind]
        return pre_tokenizers.Sequence(
            [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        )
    raise ValueError(f"unknown pre-tokenization {kind!r} (one of {', '.join(PRE_TOKENIZATIONS)})")


DIGIT_PAIRS = [" ".join(f"{i:02d}" for i in range(100))] * 2
"""Added to the training texts of `digit-pairs` so that every pair is merged (merges need 2 sightings)."""

NUMBERS = [" ".join(str(i) for i in range(1000))] * 2 + DIGIT_PAIRS
"""Added to the training texts of `numbers`: every number 0..999 and every pair 00..99 is merged."""

FORCED_IDS = {"numbers": 1000}
"""Merges the forced texts need, granted on top of `vocab_size`: each number is seen twice, so under the
cap its merge is among the first cut (891 of the 1000 numbers stayed split in the test's small BPE)."""


def train_bpe(texts: Iterable[str], vocab_size: int, pre: str = "gpt2") -> BPETokenizer:
    """Train a byte-level BPE of at most `vocab_size` ids (specials + 256 bytes + merges) on `texts`,
    plus `FORCED_IDS[pre]` for a pre-tokenization whose forced number tokens the cap would cut."""
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizer(pre)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size + FORCED_IDS.get(pre, 0),
        min_frequency=2,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    forced = {"digit-pairs": DIGIT_PAIRS, "numbers": NUMBERS}.get(pre, [])
    tk.train_from_iterator(list(texts) + forced, trainer)
    return BPETokenizer(tk)
