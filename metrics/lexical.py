"""Lexical diversity: distinct-n (Li et al. 2016), unigram entropy, and self-BLEU (Zhu et al. 2018).

Words are `\\w+` matches of the lower-cased values text of each parsed record; n-grams are taken
within one record and pooled over the cell (never across two records).

Self-BLEU follows Texygen (Zhu et al. 2018): every record is a hypothesis scored by sentence-level BLEU
against all *other* records of the cell as references, and the scores are averaged. We use BLEU-4
(uniform weights) with NLTK's smoothing method 1 (epsilon 0.1 for zero n-gram matches), and reproduce
NLTK's `sentence_bleu` exactly (tests compare against it). Instead of NLTK's O(N^2) loop we keep, per
n-gram, its largest and second-largest count over the cell's records: the clipping count of a
hypothesis against "all other records" is the largest count held by any other record, so all N
hypotheses are scored in O(total n-grams). Closest reference lengths come from the sorted multiset of
record lengths minus the hypothesis itself.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter

from metrics.cell import NAN, CellView
from metrics.records import ngrams

SELF_BLEU_ORDER = 4
SMOOTHING_EPSILON = 0.1  # NLTK SmoothingFunction().method1 default


def pooled_ngrams(token_lists: list[list[str]], n: int) -> Counter[tuple[str, ...]]:
    """n-gram counts within each token list, summed over the lists."""
    counts: Counter[tuple[str, ...]] = Counter()
    for toks in token_lists:
        if len(toks) >= n:
            counts.update(ngrams(toks, n))
    return counts


def distinct_n(cell: CellView, n: int) -> float:
    counts = cell.ngram_counts(n)
    total = sum(counts.values())
    return len(counts) / total if total else NAN


def distinct_1(cell: CellView) -> float:
    return distinct_n(cell, 1)


def distinct_2(cell: CellView) -> float:
    return distinct_n(cell, 2)


def distinct_3(cell: CellView) -> float:
    return distinct_n(cell, 3)


def entropy(cell: CellView) -> float:
    """Shannon entropy in nats of the pooled word-unigram distribution."""
    counts = cell.ngram_counts(1)
    total = sum(counts.values())
    if not total:
        return NAN
    return -math.fsum((c / total) * math.log(c / total) for c in counts.values())


def _closest_other_length(lengths: list[int], length_counts: Counter[int], h: int) -> int:
    """nltk closest_ref_length over every record length except one copy of the hypothesis's own."""
    best: tuple[int, int] | None = None
    pos = bisect.bisect_left(lengths, h)
    for start, step in ((pos, 1), (pos - 1, -1)):
        i = start
        while 0 <= i < len(lengths):
            length = lengths[i]
            if length_counts[length] - (1 if length == h else 0) > 0:
                cand = (abs(length - h), length)
                if best is None or cand < best:
                    best = cand
                break
            i += step
    assert best is not None
    return best[1]


def self_bleu_scores(token_lists: list[list[str]], order: int = SELF_BLEU_ORDER) -> list[float]:
    """Per-record sentence BLEU against all other records (NLTK semantics, method-1 smoothing)."""
    n_rec = len(token_lists)
    if n_rec < 2:
        return []
    numerators = [[0] * order for _ in range(n_rec)]
    denominators = [[1] * order for _ in range(n_rec)]
    for n in range(1, order + 1):
        per_record = [Counter(ngrams(t, n)) if len(t) >= n else Counter() for t in token_lists]
        best: dict[tuple[str, ...], int] = {}
        best_rec: dict[tuple[str, ...], int] = {}
        second: dict[tuple[str, ...], int] = {}
        for i, counts in enumerate(per_record):
            for g, c in counts.items():
                b = best.get(g, 0)
                if c > b:
                    second[g] = b
                    best[g] = c
                    best_rec[g] = i
                elif c > second.get(g, 0):
                    second[g] = c
        for i, counts in enumerate(per_record):
            num = 0
            for g, c in counts.items():
                other = second.get(g, 0) if best_rec[g] == i else best[g]
                num += c if c < other else other
            numerators[i][n - 1] = num
            denominators[i][n - 1] = max(1, sum(counts.values()))
    lengths_multiset = Counter(len(t) for t in token_lists)
    lengths = sorted(lengths_multiset)
    scores = []
    weight = 1.0 / order
    for i, toks in enumerate(token_lists):
        if numerators[i][0] == 0:
            scores.append(0.0)
            continue
        h = len(toks)
        r = _closest_other_length(lengths, lengths_multiset, h)
        bp = 1.0 if h > r else (0.0 if h == 0 else math.exp(1 - r / h))
        log_p = [
            math.log((SMOOTHING_EPSILON if num == 0 else num) / den)
            for num, den in zip(numerators[i], denominators[i], strict=True)
        ]
        scores.append(bp * math.exp(math.fsum(weight * lp for lp in log_p)))
    return scores


def self_bleu(cell: CellView) -> float:
    """Mean self-BLEU-4 in [0, 1] (lower = more diverse); NaN with fewer than two parsed records."""
    scores = self_bleu_scores(cell.tokens)
    return math.fsum(scores) / len(scores) if scores else NAN
