"""benchmarks.diffusion.note_directions: the labels of relation notes and the probe's arithmetic.

The labels are checked against statements written out by hand; the probe against embeddings whose
separability is known by construction (the real MiniLM numbers are the benchmark's, in the docs)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from benchmarks.diffusion.note_directions import Texts, control_texts, probe, relation_texts
from systems.diffusion_notes import NoteSpace

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
needs_data = pytest.mark.skipif(
    not Path(os.environ["BENCH_DATA_DIR"]).exists(), reason="BENCH_DATA_DIR absent"
)

RECORD = {"arriveBy": "12:09", "leaveAt": "11:52", "departure": "ely", "destination": "cambridge"}


@pytest.fixture(scope="module")
def space() -> NoteSpace:
    from bench.tasks import load_task

    return NoteSpace(load_task("multiwoz/train", n_references=None, n_holdout=None))


@needs_data
def test_relation_labels_say_what_the_note_asks_of_the_record(space: NoteSpace) -> None:
    order = relation_texts(space, "order", RECORD)
    label = dict(zip(order.texts, order.labels, strict=True))
    # arriveBy 12:09 is later than leaveAt 11:52 in RECORD
    assert label["The arriveBy is later than the leaveAt."] == "True"
    assert label["The leaveAt is earlier than the arriveBy."] == "True"
    assert label["The leaveAt is later than the arriveBy."] == "False"
    assert label["The arriveBy comes before the leaveAt."] == "False"
    eq = relation_texts(space, "eq", RECORD)
    label = dict(zip(eq.texts, eq.labels, strict=True))
    assert label["The departure differs from the destination."] == "True"
    assert label["The destination and the departure are the same."] == "False"
    # both directions in all eight phrasings, for both field orders, balanced
    assert len(order.texts) == len(eq.texts) == 32
    assert order.labels.count("True") == eq.labels.count("True") == 16
    control = control_texts(space)
    assert {"in the morning", "in the evening"} == set(control.labels)


def _texts(labels: list[str], phrasing: list[int], words: list[str]) -> Texts:
    return Texts("toy", [f"t{i}" for i in range(len(labels))], labels, phrasing, words)


def test_probe_reads_a_label_the_vectors_carry_and_not_one_they_do_not() -> None:
    n_phrasings = 8
    labels = ["a", "b"] * n_phrasings
    phrasing = [i // 2 for i in range(2 * n_phrasings)]
    words = [str(p) for p in phrasing]  # each phrasing's two texts share their words
    t = _texts(labels, phrasing, words)
    rng = np.random.default_rng(0)
    per_phrasing = rng.normal(size=(n_phrasings, 6))
    # blind: a text's vector depends on its phrasing only, so both labels of a phrasing get one vector
    blind = np.array([per_phrasing[p] for p in phrasing])
    row = probe(blind, t, n_phrasings)
    assert row.held_out_accuracy == 0.5  # one prediction for the two texts of each held-out phrasing
    assert row.leave_one_phrasing_out_accuracy == 0.5
    assert row.cos_same_words_opposite == pytest.approx(1.0)
    # readable: the label adds its own direction, larger than the phrasing's spread
    sign = np.array([1.0 if x == "a" else -1.0 for x in labels])
    readable = blind + 10.0 * sign[:, None] * np.eye(6)[0]
    row = probe(readable, t, n_phrasings)
    assert row.held_out_accuracy == 1.0
    assert row.leave_one_phrasing_out_accuracy == 1.0
    assert row.cos_same_label > row.cos_opposite_label
    # the cosines against a direct computation
    v = readable / np.linalg.norm(readable, axis=1, keepdims=True)
    same = [v[i] @ v[j] for i in range(16) for j in range(i + 1, 16) if labels[i] == labels[j]]
    assert row.cos_same_label == pytest.approx(float(np.mean(same)))
    assert row.n_held_out == 4 and row.n_texts == 16


def test_no_shared_words_gives_no_swapped_cosine() -> None:
    t = _texts(["a", "b"] * 4, [0, 0, 1, 1, 2, 2, 3, 3], [f"w{i}" for i in range(8)])
    row = probe(np.random.default_rng(1).normal(size=(8, 4)), t, 4)
    assert math.isnan(row.cos_same_words_opposite)
