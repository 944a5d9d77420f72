"""Lexical, diversity and memorization metrics against hand computations and NLTK's sentence BLEU."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from bench.types import Sample, TaskSpec
from metrics.lexical import self_bleu_scores
from metrics.records import leaves, values_text, words
from metrics.registry import MODEL_FREE_METRICS
from metrics.scoring import score_cell

SCHEMA = {
    "type": "object",
    "properties": {
        "q": {"type": "string"},
        "cat": {"enum": ["a", "b"]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "n": {"type": "number"},
    },
}


def _cell(records: list[dict], refs: tuple[dict, ...] = ()) -> list[Sample]:
    return [Sample(index=i, text=json.dumps(r)) for i, r in enumerate(records)]


def _score(
    records: list[dict], refs: tuple[dict, ...] = (), names: list[str] | None = None
) -> dict[str, float]:
    spec = TaskSpec("t", "", SCHEMA, refs, ())
    return score_cell(_cell(records), spec, names or MODEL_FREE_METRICS).values


def test_values_text_and_paths_follow_design() -> None:
    r = {
        "q": "Hi  there",
        "n": 2.5,
        "ok": True,
        "none": None,
        "tags": ["x", {"deep": 1}],
        "price": {"double": "9"},
    }
    assert values_text(r) == "Hi  there 2.5 true x 1 9"
    assert list(leaves(r)) == [
        ("q", "Hi  there"),
        ("n", 2.5),
        ("ok", True),
        ("none", None),
        ("tags[]", "x"),
        ("tags[].deep", 1),
        ("price.double", "9"),
    ]
    assert words("The cat's 2 hats!") == ["the", "cat", "s", "2", "hats"]


def test_distinct_entropy_novelty_by_hand() -> None:
    recs = [{"q": "the cat sat"}, {"q": "the cat ran"}]
    # words: [the cat sat], [the cat ran] -> unigrams 6 (unique 4); bigrams 4 (unique 3: the cat, cat sat,
    # cat ran); trigrams 2 (unique 2). Unigram p = the 2/6, cat 2/6, sat 1/6, ran 1/6.
    refs = ({"q": "the cat sat down"},)  # reference trigrams: (the cat sat), (cat sat down)
    v = _score(recs, refs)
    assert v["distinct_1"] == pytest.approx(4 / 6)
    assert v["distinct_2"] == v["diversity"] == pytest.approx(3 / 4)
    assert v["distinct_3"] == pytest.approx(2 / 2)
    h = -(2 * (2 / 6) * math.log(2 / 6) + 2 * (1 / 6) * math.log(1 / 6))
    assert v["entropy"] == pytest.approx(h)
    assert v["novelty"] == pytest.approx(1 / 2)  # (the cat ran) is new, (the cat sat) is not


def test_ngrams_never_cross_records() -> None:
    v = _score([{"q": "a b"}, {"q": "c d"}])
    assert v["distinct_2"] == 1.0  # bigrams (a b), (c d); never (b c)
    assert math.isnan(v["distinct_3"])  # no record has three words
    assert math.isnan(v["novelty"])


def test_field_overlap_by_hand() -> None:
    refs = ({"q": "What  is X?", "cat": "a", "ok": True, "tags": ["red", "blue"], "n": 3},)
    recs = [
        # pairs counted: q "what is x?" (hit: normalisation), tags[] red (hit), tags[] green, n 3 (hit)
        # skipped: cat (enum), ok (boolean)
        {"q": " what is   x? ", "cat": "a", "ok": True, "tags": ["red", "green"], "n": 3},
        # q "new" (miss); n 3.0 -> JSON spelling "3.0" != "3" (miss); empty string skipped
        {"q": "new", "n": 3.0, "tags": [""]},
    ]
    assert _score(recs, refs)["field_overlap"] == pytest.approx(3 / 6)


def _nltk_self_bleu(token_lists: list[list[str]]) -> list[float]:
    smooth = SmoothingFunction().method1
    out = []
    for i, hyp in enumerate(token_lists):
        refs = token_lists[:i] + token_lists[i + 1 :]
        out.append(sentence_bleu(refs, hyp, smoothing_function=smooth))
    return out


def test_self_bleu_matches_nltk_on_hand_made_records() -> None:
    toks = [
        words(t)
        for t in [
            "the hotel is in the north",
            "the hotel is cheap",
            "a guest house in the north",
            "the the the the",
            "north",
            "",
        ]
    ]
    assert self_bleu_scores(toks) == pytest.approx(_nltk_self_bleu(toks), abs=1e-12)


vocab = st.sampled_from(["a", "b", "c", "d", "e", "f"])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(vocab, max_size=9), min_size=2, max_size=7))
def test_self_bleu_matches_nltk_on_random_records(token_lists: list[list[str]]) -> None:
    assert self_bleu_scores(token_lists) == pytest.approx(_nltk_self_bleu(token_lists), abs=1e-12)


def test_self_bleu_cell_value_and_single_record_nan() -> None:
    recs = [{"q": "a b c d"}, {"q": "a b c d"}, {"q": "x y z w"}]
    expected = sum(_nltk_self_bleu([words(values_text(r)) for r in recs])) / 3
    assert _score(recs)["self_bleu"] == pytest.approx(expected)
    assert math.isnan(_score(recs[:1])["self_bleu"])


text_st = st.lists(st.sampled_from(["red", "blue", "green", "tea", "cake"]), min_size=0, max_size=6).map(
    " ".join
)
records_st = st.lists(
    st.fixed_dictionaries({"q": text_st, "tags": st.lists(text_st, max_size=2)}), max_size=8
)


@settings(max_examples=80, deadline=None)
@given(records_st, st.randoms(use_true_random=False))
def test_lexical_metrics_bounded_and_invariant_to_record_order(records: list[dict], rnd: object) -> None:
    refs = ({"q": "red tea cake", "tags": ["blue green"]},)
    a = _score(records, refs)
    shuffled = list(records)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    b = _score(shuffled, refs)
    for name in (
        "distinct_1",
        "distinct_2",
        "distinct_3",
        "novelty",
        "field_overlap",
        "self_bleu",
        "entropy",
    ):
        if math.isnan(a[name]):
            assert math.isnan(b[name])
            continue
        assert a[name] == pytest.approx(b[name], abs=1e-12), name
        upper = math.log(5) + 1e-12 if name == "entropy" else 1.0  # 5-word vocabulary
        assert 0.0 <= a[name] <= upper, name
