"""Privacy: does a cell leak near-copies of the records a system could see? (opt-in metrics, `[quality]`)

- `dcr_share_closer_to_train`: distance to the closest record (DCR), the definition of SDMetrics'
  DCROverfittingProtection applied to the profile embedder's features instead of table rows (records are
  mostly text, where row distances say little). For each parsed record, d_ref is its smallest cosine
  distance (1 - cosine) to the task's references (what a system may copy) and d_hold the smallest to the
  holdout (never shown). The value is the share of records with d_ref < d_hold, ties counting one half.
  A system that generalises is as close to unseen real records as to seen ones: 0.5 is ideal, 1.0 means
  every record sits on a reference. When the two sets differ in size, the larger is subsampled to the
  smaller's size by a seeded draw (seed 0), so the ideal stays 0.5.
- `near_copy_rate`: share of parsed records within normalised Levenshtein distance `NEAR_COPY_MAX`
  (0.1: at most one edit in ten characters) of some reference, both written as their values text
  (metrics.records.values_text: leaf values in order, no keys, since the keys every record shares would
  make unrelated records look alike). `field_overlap` only sees exact values; this catches a reference
  with a changed digit.
Both are NaN for a cell with no parsed record or a task with no references (or, for DCR, no holdout).
"""

from __future__ import annotations

import random

import numpy as np

from metrics.cell import NAN, CellView
from metrics.optional import require

NEAR_COPY_MAX = 0.1
DCR_SUBSAMPLE_SEED = 0


def _equal_sizes(refs: list, holdout: list) -> tuple[list, list]:
    m = min(len(refs), len(holdout))
    rnd = random.Random(DCR_SUBSAMPLE_SEED)
    pick = lambda xs: xs if len(xs) == m else [xs[i] for i in sorted(rnd.sample(range(len(xs)), m))]  # noqa: E731
    return pick(list(refs)), pick(list(holdout))


def dcr_share_closer_to_train(cell: CellView) -> float:
    if not cell.records or not cell.spec.references or not cell.spec.holdout:
        return NAN
    from metrics.records import values_text

    refs, hold = _equal_sizes(cell.spec.references, cell.spec.holdout)
    enc = cell.embedder.encode
    ref_emb = np.asarray(enc([values_text(r) for r in refs]), dtype=np.float64)
    hold_emb = np.asarray(enc([values_text(r) for r in hold]), dtype=np.float64)
    x = cell.embeddings.astype(np.float64)
    d_ref = 1.0 - np.max(x @ ref_emb.T, axis=1)
    d_hold = 1.0 - np.max(x @ hold_emb.T, axis=1)
    closer = np.where(np.isclose(d_ref, d_hold, atol=1e-9), 0.5, (d_ref < d_hold).astype(np.float64))
    cell.info["dcr"] = {
        "n_compared": len(refs),
        "median_dcr_references": float(np.median(d_ref)),
        "median_dcr_holdout": float(np.median(d_hold)),
    }
    return float(np.mean(closer))


def near_copy_rate(cell: CellView) -> float:
    rf = require("rapidfuzz", "rapidfuzz", metric="near_copy_rate")
    from rapidfuzz.distance import Levenshtein

    if not cell.records or not cell.spec.references:
        return NAN
    from metrics.records import values_text

    refs = [values_text(r) for r in cell.spec.references]
    hits = 0
    for r in cell.records:
        best = rf.process.extractOne(
            values_text(r), refs, scorer=Levenshtein.normalized_distance, score_cutoff=NEAR_COPY_MAX
        )
        hits += best is not None
    cell.info["near_copy"] = {"max_normalised_distance": NEAR_COPY_MAX, "near_copies": hits}
    return hits / len(cell.records)
