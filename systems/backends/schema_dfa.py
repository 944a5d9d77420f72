"""Schema-constrained diffusion decoding: a token automaton from the JSON Schema, and a Viterbi x0 choice.

Why. A small masked-diffusion LM writes long records whose structure falls apart (docs/systems-diffusion.md,
"Competence on the other families"): on TruthfulQA and Self-Instruct plain `llada` parses 0.000. An AR
decoder fixes structure with a grammar (`ar-grammar`), masking the next token's logits. A diffusion
decoder cannot: it predicts every masked position at once, so a per-position mask does not make the
*combination* valid. Following DINGO (Suresh et al. 2025, "Constrained Inference for Diffusion LLMs"),
the sampler's per-position choice x0 is replaced by the highest-scoring canvas the automaton accepts:
a Viterbi pass over (position, automaton state), with committed tokens fixed and masked positions free.

What.
- `build_automaton` turns a JSON Schema into a regular expression (outlines-core's
  `build_regex_from_schema`, the JSON-Schema-to-regex converter of the Outlines project) and a token-level
  DFA over the DLM's vocabulary (outlines-core's `Index`, which walks each token's bytes through the
  byte-level regex automaton). We add one state, DONE: every accepting state goes to DONE on EOS and DONE
  loops on EOS, so a record may end anywhere in the window and is followed only by EOS padding.
- `SchemaChooser` is the sampler's `choose_x0` hook (systems/backends/llada_sampler.py). For one row and
  block it runs Viterbi over every response position from the block's start to the window's end: positions
  already committed allow only their token; masked positions of the block score tokens by the sampler's own
  Gumbel-perturbed log scores (so temperature still samples); masked positions after the block score by the
  model's log-softmax. The path must end in an accepting state or DONE. The sampler then commits the most
  confident positions of that path, confidence being the model's probability of the chosen token, as in
  LLaDA's low-confidence remasking. Every canvas the sampler can then reach still has a valid completion,
  so the final text matches the regex.
- Per-position scores add up to a path score; a per-position normaliser adds the same constant to every
  path, so raw logits (T = 0) and log-probabilities give the same path.

Departures, written here and in docs/systems-diffusion.md: with T > 0 the choice is the argmax of
Gumbel-perturbed scores under the constraint, not an exact sample of the constrained distribution (DINGO
decodes greedily). When no accepted canvas exists (the window is shorter than the shortest record, or a
length hook forbids every accepted length) the row falls back to the unconstrained choice and the chooser
counts it in `unsatisfiable`.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from bench.errors import BenchError
from bench.types import JSON

WHITESPACE = " ?"
"""Whitespace the regex allows between JSON tokens: none or one space, as `json.dumps` writes records
(the embedded DLM trains on `json.dumps` text, so longer runs would only be a place to go astray)."""


@dataclass(frozen=True)
class TokenAutomaton:
    """A token-level DFA as edge lists (src, token, dst), dense states 0..n_states-1, DONE last."""

    n_states: int
    initial: int
    src: torch.Tensor  # (E,) long
    tok: torch.Tensor  # (E,) long
    dst: torch.Tensor  # (E,) long
    accepting: torch.Tensor  # (n_states,) bool: the record may end here (DONE included)
    next_state: dict[tuple[int, int], int] = field(repr=False)
    regex: str = ""

    @property
    def classes(self) -> TokenClasses:
        """The automaton over token classes (built once; see `TokenClasses`)."""
        cached = self.__dict__.get("_classes")
        if cached is None:
            cached = TokenClasses.of(self)
            object.__setattr__(self, "_classes", cached)
        return cached

    @property
    def shortest(self) -> int:
        """Tokens in the shortest accepted record (breadth-first over the token edges, EOS excluded)."""
        cached = self.__dict__.get("_shortest")
        if cached is None:
            done = self.n_states - 1
            succ: dict[int, set[int]] = {}
            for a, d in zip(self.src.tolist(), self.dst.tolist(), strict=True):
                if d != done:
                    succ.setdefault(a, set()).add(d)
            seen, frontier, depth = {self.initial}, [self.initial], 0
            while frontier and not any(bool(self.accepting[s]) for s in frontier):
                frontier = [d for s in frontier for d in succ.get(s, ()) if d not in seen]
                seen.update(frontier)
                depth += 1
            cached = depth if frontier else self.n_states  # no accepted record: longer than any window
            object.__setattr__(self, "_shortest", cached)
        return cached

    def walk(self, tokens: list[int]) -> int | None:
        """The state after `tokens` from the initial state (None when a token is not allowed)."""
        s = self.initial
        for t in tokens:
            nxt = self.next_state.get((s, int(t)))
            if nxt is None:
                return None
            s = nxt
        return s


@dataclass(frozen=True)
class TokenClasses:
    """Tokens that every state treats alike, merged: Viterbi then runs over classes, not tokens.

    In a JSON automaton most tokens are plain string content (no quote, backslash or control byte) and
    move every string state to the same next state. On TruthfulQA with a 1024-token vocabulary the 14,361
    token edges become 4,149 class edges (243 classes), and a Viterbi pass takes about a third of the time."""

    tokens: torch.Tensor  # (U,) the usable token ids
    token_class: torch.Tensor  # (U,) the class of each usable token
    n_classes: int
    src: torch.Tensor  # (C_E,) class edges: source state
    cls: torch.Tensor  # (C_E,) class
    dst: torch.Tensor  # (C_E,) destination state
    into: list[int]  # class edges are sorted by destination: state s owns edges into[s]..into[s + 1] - 1

    @classmethod
    def of(cls, auto: TokenAutomaton) -> TokenClasses:
        moves: dict[int, list[tuple[int, int]]] = {}
        for a, t, d in zip(auto.src.tolist(), auto.tok.tolist(), auto.dst.tolist(), strict=True):
            moves.setdefault(t, []).append((a, d))
        signature: dict[tuple[tuple[int, int], ...], int] = {}
        tokens, token_class = [], []
        for t in sorted(moves):
            key = tuple(sorted(moves[t]))
            tokens.append(t)
            token_class.append(signature.setdefault(key, len(signature)))
        edges = sorted(
            {(a, c, d) for key, c in signature.items() for a, d in key}, key=lambda e: (e[2], e[0], e[1])
        )
        e = torch.tensor(edges, dtype=torch.long)
        counts = torch.bincount(e[:, 2], minlength=auto.n_states)
        return cls(
            tokens=torch.tensor(tokens, dtype=torch.long),
            token_class=torch.tensor(token_class, dtype=torch.long),
            n_classes=len(signature),
            src=e[:, 0].contiguous(),
            cls=e[:, 1].contiguous(),
            dst=e[:, 2].contiguous(),
            into=[0, *torch.cumsum(counts, 0).tolist()],
        )


def schema_regex(schema: JSON) -> str:
    """The regular expression outlines-core derives from `schema` (a clear error when it cannot)."""
    from outlines_core.json_schema import build_regex_from_schema

    try:
        return build_regex_from_schema(json.dumps(schema), WHITESPACE)
    except Exception as exc:  # outlines-core raises ValueError/TypeError for unsupported keywords
        raise BenchError(
            f"grammar-constrained diffusion: cannot compile the schema to a regex: {exc}"
        ) from exc


BUILD_SECONDS = 20.0
"""Time budget for building one token automaton. Some schemas never finish: on JSONSchemaBench's
Github_easy split 3 of 100 ran past 20 s, and one of them past 120 s even over a 256-byte vocabulary
(docs/systems-diffusion.md), so the build runs in a child process that is stopped at the budget."""


def _index_moves(regex: str, by_bytes: dict[bytes, list[int]], eos: int) -> tuple[dict, list[int], int]:
    """outlines-core's token DFA as plain data (runs in the child process)."""
    from outlines_core import Index, Vocabulary

    index = Index(regex, Vocabulary(eos, by_bytes))
    return index.get_transitions(), list(index.get_final_states()), index.get_initial_state()


def _moves_within_budget(
    regex: str, by_bytes: dict[bytes, list[int]], eos: int, seconds: float
) -> tuple[dict, list[int], int]:
    """`_index_moves` in a forked child, stopped after `seconds` (a stuck native build cannot be
    interrupted from a thread)."""
    import multiprocessing
    import os

    from bench.executors import die_with_parent

    # leaving the block terminates the child; a worker killed at its cell's timeout takes it along
    with multiprocessing.get_context("fork").Pool(1, die_with_parent, (os.getpid(),)) as pool:
        pending = pool.apply_async(_index_moves, (regex, by_bytes, eos))
        try:
            return pending.get(timeout=seconds)
        except multiprocessing.TimeoutError:
            raise BenchError(
                f"grammar-constrained diffusion: the schema's token automaton did not build within "
                f"{seconds:.0f} s (regex of {len(regex)} characters)"
            ) from None
        except Exception as exc:
            raise BenchError(
                f"grammar-constrained diffusion: cannot build the token automaton: {exc}"
            ) from exc


def build_automaton(
    regex: str, token_bytes: list[bytes | None], eos_ids: Sequence[int], seconds: float | None = None
) -> TokenAutomaton:
    """Token DFA of `regex` over a vocabulary (`token_bytes[i]` None: a special id the record never uses).

    Any of `eos_ids` ends the record and pads the rest of the window (LLaDA pads with more than one).
    A build that takes longer than `seconds` (default `BUILD_SECONDS`) is a BenchError."""
    if not eos_ids:
        raise ValueError("the automaton needs at least one EOS id")
    ends = [int(e) for e in eos_ids]
    by_bytes: dict[bytes, list[int]] = {}
    for i, b in enumerate(token_bytes):
        if b is not None and b and i not in ends:
            by_bytes.setdefault(b, []).append(i)
    budget = BUILD_SECONDS if seconds is None else seconds
    raw, final_states, initial = _moves_within_budget(regex, by_bytes, ends[0], budget)
    finals = set(final_states)
    states = sorted(set(raw) | {d for m in raw.values() for d in m.values()} | finals)
    dense = {s: k for k, s in enumerate(states)}
    done = len(states)
    edges: list[tuple[int, int, int]] = []
    for s, moves in raw.items():
        for t, d in moves.items():
            if t not in ends:
                edges.append((dense[s], int(t), dense[d]))
    for e_id in ends:
        edges += [(dense[f], e_id, done) for f in sorted(finals)]
        edges.append((done, e_id, done))
    accepting = torch.zeros(done + 1, dtype=torch.bool)
    accepting[[dense[f] for f in finals] + [done]] = True
    e = torch.tensor(edges, dtype=torch.long)
    return TokenAutomaton(
        n_states=done + 1,
        initial=dense[initial],
        src=e[:, 0].contiguous(),
        tok=e[:, 1].contiguous(),
        dst=e[:, 2].contiguous(),
        accepting=accepting,
        next_state={(a, t): d for a, t, d in edges},
        regex=regex,
    )


@lru_cache(maxsize=64)
def _cached(
    schema_json: str, vocab_key: tuple[bytes | None, ...], eos_ids: tuple[int, ...]
) -> TokenAutomaton | str:
    """The automaton, or why it cannot be built (refusals are remembered too: a build that ran out of
    time would otherwise spend its whole budget again for every cell)."""
    try:
        return build_automaton(schema_regex(json.loads(schema_json)), list(vocab_key), eos_ids)
    except BenchError as exc:
        return str(exc)


def automaton_for(schema: JSON, token_bytes: list[bytes | None], eos_ids: Sequence[int]) -> TokenAutomaton:
    """`build_automaton(schema_regex(schema), ...)`, memoised per schema and vocabulary.

    The schema is keyed as written, not with sorted keys: property order is the record's key order.
    A schema that cannot be compiled, or whose automaton does not build in time, is a BenchError."""
    got = _cached(json.dumps(schema), tuple(token_bytes), tuple(int(e) for e in eos_ids))
    if isinstance(got, str):
        raise BenchError(got)
    return got


def hf_token_bytes(tokenizer: Any) -> list[bytes | None]:
    """The bytes each id of a `transformers` tokenizer spells (None for special ids).

    Byte-level BPE vocabularies (GPT-2's printable stand-ins for bytes, as LLaDA's and our own) map back
    through the byte alphabet; otherwise SentencePiece conventions apply (`<0xNN>` byte tokens, `▁` for
    a space)."""
    from systems.backends.mdlm.tokenizer import byte_decoder

    dec = byte_decoder()
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    n = len(tokenizer)
    pieces = tokenizer.convert_ids_to_tokens(list(range(n)))
    byte_level = all(p is None or i in special or all(c in dec for c in p) for i, p in enumerate(pieces))
    out: list[bytes | None] = []
    for i, piece in enumerate(pieces):
        if piece is None or i in special:
            out.append(None)
        elif byte_level:
            out.append(bytes(dec[c] for c in piece))
        elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out.append(bytes([int(piece[3:5], 16)]))
        else:
            out.append(piece.replace("\u2581", " ").encode())
    return out


def viterbi(
    auto: TokenAutomaton, start_state: int, scores: torch.Tensor
) -> tuple[torch.Tensor, float] | None:
    """The accepted token path of maximal total score, and that score (None when no path is accepted).

    scores: (n, V) float64 additive scores per position (-inf: the token may not stand there). The path
    starts in `start_state`, reads one token per position and must end in an accepting state. Runs over
    token classes (`TokenClasses`): a class's score at a position is its best token's; the forward pass
    keeps each position's best score per state, and the path is read back by re-scoring the few class
    edges into each state on it (ties: the lowest edge, then the lowest token id)."""
    n = scores.shape[0]
    S = auto.n_states
    tc = auto.classes
    usable = scores[:, tc.tokens]  # (n, U)
    per_class = torch.full((n, tc.n_classes), -torch.inf, dtype=torch.float64).scatter_reduce(
        1, tc.token_class.expand(n, -1), usable, "amax", include_self=True
    )
    w = per_class[:, tc.cls]  # (n, class edges)
    best = torch.full((n + 1, S), -torch.inf, dtype=torch.float64)
    best[0, start_state] = 0.0
    for p in range(n):  # index_select and in-place ops: this loop is the decoder's hot path
        best[p + 1].scatter_reduce_(0, tc.dst, best[p].index_select(0, tc.src).add_(w[p]), "amax")
    final = torch.where(auto.accepting, best[n], torch.full((S,), -torch.inf, dtype=torch.float64))
    total = float(final.max())
    if total == -torch.inf:
        return None
    s = int(final.argmax())
    path = torch.empty(n, dtype=torch.long)
    for p in range(n - 1, -1, -1):
        lo, hi = tc.into[s], tc.into[s + 1]
        e = lo + int((best[p, tc.src[lo:hi]] + w[p, lo:hi]).argmax())
        members = (tc.token_class == tc.cls[e]).nonzero().squeeze(-1)
        path[p] = tc.tokens[members[usable[p, members].argmax()]]
        s = int(tc.src[e])
    return path, total


class SchemaChooser:
    """The sampler's `choose_x0` hook: per row and block, the Viterbi path through the schema automaton.

    `prompt_length` is where the response starts on the canvas; every row shares the automaton."""

    def __init__(self, auto: TokenAutomaton, prompt_length: int, mask_id: int) -> None:
        self.auto, self.prompt_length, self.mask_id = auto, prompt_length, mask_id
        self.unsatisfiable = 0  # row-steps that fell back to the unconstrained choice
        self.calls = 0

    def __call__(
        self,
        x_row: torch.Tensor,
        start: int,
        end: int,
        block_scores: torch.Tensor,
        logits_row: torch.Tensor,
        unconstrained: torch.Tensor,
    ) -> torch.Tensor:
        """x0 for positions start..end-1 of one row.

        x_row (L,): the canvas; block_scores (end-start, V): the sampler's log-domain scores for the block;
        logits_row (L, V): the model's (hooked) logits, used for masked positions after the block;
        unconstrained (end-start,): the sampler's own argmax, returned when nothing is accepted."""
        self.calls += 1
        p0 = self.prompt_length
        row = x_row.to("cpu")
        state = self.auto.walk(row[p0:start].tolist())
        if state is None:
            self.unsatisfiable += 1
            return unconstrained
        total = row.numel()
        v = block_scores.shape[-1]
        scores = torch.empty((total - start, v), dtype=torch.float64)
        scores[: end - start] = block_scores.to("cpu", torch.float64)
        if end < total:
            scores[end - start :] = torch.log_softmax(logits_row[end:].to("cpu", torch.float64), dim=-1)
        fixed = (row[start:] != self.mask_id).nonzero().squeeze(-1)
        if fixed.numel():
            scores[fixed] = -torch.inf
            scores[fixed, row[start:][fixed]] = 0.0
        found = viterbi(self.auto, state, scores)
        if found is None:
            self.unsatisfiable += 1
            return unconstrained
        return found[0][: end - start].to(unconstrained.device)


class SchemaConstrained(ABC):
    """What a diffusion backend needs to take `json_schema` requests: a chooser per schema, and a refusal.

    The backend spells its vocabulary once (`_schema_vocabulary`: each id's bytes, None for special ids,
    then the EOS ids and the mask id); the spelling is kept, so a batch only looks its automaton up."""

    @abstractmethod
    def _schema_vocabulary(self) -> tuple[list[bytes | None], Sequence[int], int]:
        """(each id's bytes, None for special ids; the EOS ids; the mask id) of the backend's tokenizer."""

    def schema_chooser(self, schema: JSON, prompt_len: int) -> SchemaChooser:
        """The Viterbi x0 choice under `schema` for a canvas whose response starts at `prompt_len`."""
        spelled = self.__dict__.get("_schema_spelling")
        if spelled is None:
            spelled = self.__dict__["_schema_spelling"] = self._schema_vocabulary()
        token_bytes, eos_ids, mask_id = spelled
        return SchemaChooser(automaton_for(schema, token_bytes, eos_ids), prompt_len, mask_id)

    def schema_refusal(self, schema: JSON) -> str | None:
        """Why `schema` cannot constrain decoding here (None: it can); the `llada` system asks first."""
        try:
            self.schema_chooser(schema, 0)
        except BenchError as exc:
            return str(exc)
        return None
