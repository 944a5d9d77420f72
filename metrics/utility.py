"""Utility: train on synthetic, test on real (TSTR), the machine-learning efficiency test of synthetic-data
papers (DiffLM, Zhou et al. 2024, among them). Opt-in metrics `tstr` and `tstr_ratio`, `[quality]`.

Per task family one categorical target field is declared (`TSTR_TARGETS`); families without a sensible
target (self_instruct, superni: free text only) get NaN. The classifier is a scikit-learn pipeline: the
record's other scalar fields written as "field: value" lines, TF-IDF over word 1-2-grams, then logistic
regression (lbfgs, C = 1, 1000 iterations, no randomness). It is trained on the cell's parsed records
that carry the target, and tested on the holdout. The baseline is the same classifier trained on an
equal number of references (a seeded draw, seed 0), tested on the same holdout:
- `tstr`: accuracy of the classifier trained on the cell's records;
- `tstr_ratio`: that accuracy over the baseline's (1.0: as useful as real data of the same size).
A training set with one class predicts that class (logistic regression needs two).
"""

from __future__ import annotations

import random
from typing import Any

from bench.types import JSON
from metrics.cell import NAN, CellView
from metrics.optional import require
from metrics.tabular import scalar_leaves

#: task name (or family prefix ending in "/") -> categorical target field.
TSTR_TARGETS: dict[str, str] = {
    "multiwoz/train": "day",
    "multiwoz/hotel": "pricerange",
    "multiwoz/restaurant": "pricerange",
    "multiwoz/attraction": "area",
    "truthfulqa": "category",
    "demo/booking": "cabin",
}
BASELINE_SEED = 0


def target_for(task: str) -> str | None:
    if task in TSTR_TARGETS:
        return TSTR_TARGETS[task]
    for prefix, field in TSTR_TARGETS.items():
        if prefix.endswith("/") and task.startswith(prefix):
            return field
    return None


def _example(record: JSON, target: str) -> tuple[str, str] | None:
    leaves = scalar_leaves(record)
    label = leaves.get(target)
    if label is None or isinstance(label, dict | list):
        return None
    text = "\n".join(f"{k}: {v}" for k, v in sorted(leaves.items()) if k != target and v is not None)
    return text, str(label)


def _accuracy(train: list[tuple[str, str]], test: list[tuple[str, str]]) -> float:
    require("sklearn", "scikit-learn", metric="tstr")
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    labels = {y for _, y in train}
    if len(labels) == 1:
        only = next(iter(labels))
        return sum(y == only for _, y in test) / len(test)
    model: Any = make_pipeline(
        TfidfVectorizer(ngram_range=(1, 2), token_pattern=r"(?u)\b\w+\b"),
        LogisticRegression(max_iter=1000, C=1.0),
    )
    model.fit([x for x, _ in train], [y for _, y in train])
    pred = model.predict([x for x, _ in test])
    return float(sum(p == y for p, (_, y) in zip(pred, test, strict=True)) / len(test))


def _tstr(cell: CellView) -> tuple[float, float]:
    if "_tstr" in cell.__dict__:
        return cell.__dict__["_tstr"]
    out = (NAN, NAN)
    target = target_for(cell.spec.name)
    if target is not None and cell.records and cell.spec.holdout:
        synth = [e for e in (_example(r, target) for r in cell.records) if e is not None]
        test = [e for e in (_example(r, target) for r in cell.spec.holdout) if e is not None]
        real = [e for e in (_example(r, target) for r in cell.spec.references) if e is not None]
        if synth and test and real:
            k = min(len(synth), len(real))
            base_train = [real[i] for i in sorted(random.Random(BASELINE_SEED).sample(range(len(real)), k))]
            acc = _accuracy(synth, test)
            base = _accuracy(base_train, test)
            out = (acc, acc / base if base > 0 else NAN)
            cell.info["tstr"] = {
                "target": target,
                "n_train": len(synth),
                "n_test": len(test),
                "baseline_accuracy": base,
                "baseline_n_train": k,
            }
    cell.__dict__["_tstr"] = out
    return out


def tstr(cell: CellView) -> float:
    return _tstr(cell)[0]


def tstr_ratio(cell: CellView) -> float:
    return _tstr(cell)[1]
