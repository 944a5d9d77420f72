"""A tokenizer over a task's serialised JSON records in which every structural character is its own token.

Diffusion-LM (Li et al. 2022) rounds each position to one vocabulary item; if a token could glue a quote
to a word (`"day`), a single rounding error would break both the string and the structure. So the JSON
structure characters `{ } [ ] : , "` are split off before BPE (the `tokenizers` library, byte-level, so
any text round-trips and nothing is unknown) and can never be part of a merge. One special token,
`<pad>`, fills each sequence to the fixed length, as in Diffusion-LM's E2E setup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from bench.types import JSON

STRUCTURAL = '{}[]:,"'
PAD = "<pad>"


def serialise(record: JSON) -> str:
    """Compact JSON (no spaces after `,` and `:`): the text the model learns and must reproduce."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


class JSONTokenizer:
    """Byte-level BPE with isolated structural characters; id 0 is `<pad>`."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.pad_id = tok.token_to_id(PAD)
        if self.pad_id != 0:
            raise ValueError("the JSON tokenizer needs <pad> at id 0")

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tok.decode([i for i in ids if i != self.pad_id], skip_special_tokens=True)

    def token_text(self, i: int) -> str:
        return self.tok.decode([i])

    def to_str(self) -> str:
        return self.tok.to_str()

    @classmethod
    def from_str(cls, s: str) -> JSONTokenizer:
        return cls(Tokenizer.from_str(s))


def _pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    cls = "[" + "".join("\\" + c for c in STRUCTURAL) + "]"
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(cls), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> JSONTokenizer:
    """Learn BPE merges on `texts` (deterministic: the library's trainer is single-pass and tie-stable)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = _pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    return JSONTokenizer(tok)
