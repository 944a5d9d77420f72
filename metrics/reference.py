"""Reference-based scores against each record's nearest holdout record: BLEU, ROUGE-L, METEOR (x100).

The nearest holdout record is the one with the highest embedding cosine (same embedder and texts as
`similarity`), so a system is compared with the real record it most resembles rather than an arbitrary
one. Hypothesis and reference texts are the records' values text.

- `bleu`: sacrebleu corpus BLEU (default 13a tokenizer, exp smoothing) over the cell; already x100.
- `rouge_l`: rouge-score ROUGE-L F1 with Porter stemming, mean over records, x100.
- `meteor`: nltk METEOR (alpha 0.9, beta 3, gamma 0.5) on `\\w+` word lists, mean over records, x100,
  with WordNet synonyms when a WordNet database is found (metrics.wordnet); the variant is recorded in
  the cell info under "meteor".
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from metrics.cell import NAN, CellView
from metrics.records import words


def _pairs(cell: CellView) -> list[tuple[str, str]]:
    """(hypothesis text, nearest holdout text) per parsed record."""
    if not cell.records or not cell.spec.holdout:
        return []
    return [(h, cell.holdout_texts[j]) for h, j in zip(cell.texts, cell.nearest_holdout, strict=True)]


def bleu(cell: CellView) -> float:
    import sacrebleu

    pairs = _pairs(cell)
    if not pairs:
        return NAN
    hyps, refs = zip(*pairs, strict=True)
    return float(sacrebleu.corpus_bleu(list(hyps), [list(refs)]).score)


@lru_cache(maxsize=1)
def _rouge() -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def rouge_l(cell: CellView) -> float:
    pairs = _pairs(cell)
    if not pairs:
        return NAN
    scorer = _rouge()
    return 100.0 * math.fsum(scorer.score(ref, hyp)["rougeL"].fmeasure for hyp, ref in pairs) / len(pairs)


def meteor(cell: CellView) -> float:
    from nltk.translate.meteor_score import meteor_score

    from metrics.wordnet import NoSynonyms, meteor_wordnet

    wordnet, variant = meteor_wordnet()
    cell.info["meteor"] = variant
    pairs = _pairs(cell)
    if not pairs:
        return NAN
    wn = wordnet if wordnet is not None else NoSynonyms()
    total = math.fsum(meteor_score([words(ref)], words(hyp), wordnet=wn) for hyp, ref in pairs)
    return 100.0 * total / len(pairs)
