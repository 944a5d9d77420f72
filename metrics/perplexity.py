"""Perplexity of the cell's parsed records under a scorer LM: exp(total NLL / total tokens).

The text scored is each record's compact JSON in its own key order (metrics.records.compact), so the
value measures how natural the *structured record* is to the scorer, the quantity AoD's evaluator
reports. Token counts and NLLs come from the scorer through the `LogProbScorer` protocol (embedded
profile: SmolLM2-135M through llama.cpp; paper profile: gpt2-large through transformers); the pooled
(micro) average weights long records by their length, as corpus perplexity does. The scorer's identity
is recorded in the cell info next to the value.
"""

from __future__ import annotations

import math

from metrics.cell import NAN, CellView
from metrics.records import compact


def corpus_perplexity(results: list[tuple[float, int]]) -> float:
    """exp(sum NLL / sum tokens) over (total_nll_nats, n_tokens) pairs; NaN without tokens."""
    tokens = sum(n for _, n in results)
    if tokens <= 0:
        return NAN
    return math.exp(math.fsum(nll for nll, _ in results) / tokens)


def perplexity(cell: CellView) -> float:
    if not cell.records:
        return NAN
    return corpus_perplexity(cell.scorer.nll([compact(r) for r in cell.records]))
