"""Sampling text from the frozen causal LM conditioned on soft prompts, one private RNG per row.

`generate` in transformers draws from one global RNG, so a row's text would depend on its batch. Here the
prefix ([soft prompt] + assistant header) runs once with a KV cache, and each step draws every row's next
token from its own generator at the given temperature; all rows share the prefix length, so no padding
is needed. A row stops at EOS or as soon as its text holds a closed top-level JSON object (what follows
one is never part of the record, and decoding it would only cost time); `finish_reason` is `length`
when it reaches `max_new_tokens` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


def closes_object(text: str) -> bool:
    """True when `text` holds a `{` whose object is closed (string- and escape-aware depth count)."""
    start = text.find("{")
    if start < 0:
        return False
    depth, in_str, esc = 0, False, False
    for c in text[start:]:
        if in_str:
            if esc:
                esc = False
            elif c == "\\":
                esc = True
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return True
    return False


@dataclass
class Decoded:
    text: str
    tokens_out: int
    finish_reason: str


@torch.no_grad()
def decode(
    lm: Any,
    tok: Any,
    soft: torch.Tensor,
    prefix_ids: list[int],
    gens: list[torch.Generator],
    temperature: float,
    max_new_tokens: int,
    eos_ids: set[int],
) -> list[Decoded]:
    B = soft.shape[0]
    emb = lm.get_input_embeddings()
    pre = emb(torch.tensor(prefix_ids, dtype=torch.long)).unsqueeze(0).expand(B, -1, -1)
    out = lm(inputs_embeds=torch.cat([soft, pre], 1), use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]
    toks: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    fill = next(iter(eos_ids))
    for _ in range(max_new_tokens):
        nxt = []
        for b in range(B):
            if done[b]:
                nxt.append(fill)
                continue
            lg = logits[b].float()
            if temperature <= 0:
                t = int(lg.argmax())
            else:
                p = torch.softmax(lg / temperature, -1)
                t = int(torch.multinomial(p, 1, generator=gens[b]))
            if t in eos_ids:
                done[b] = True
            else:
                toks[b].append(t)
                if "}" in tok.decode([t]) and closes_object(tok.decode(toks[b])):
                    done[b] = True
            nxt.append(t)
        if all(done):
            break
        out = lm(input_ids=torch.tensor(nxt).view(B, 1), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
    return [
        Decoded(tok.decode(t, skip_special_tokens=True), len(t), "stop" if d else "length")
        for t, d in zip(toks, done, strict=True)
    ]
