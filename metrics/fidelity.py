"""Distribution fidelity of a cell's records against the task's holdout (opt-in metrics, `[quality]`).

The paper's metrics score records one at a time or as bags of words; these ask whether the set of
records covers the real distribution or only its modes, with the libraries the field uses:

- `mauve`: MAUVE (Pillutla et al. 2021) through `mauve-text`, on the profile embedder's features of the
  records' values text (the same MiniLM rows `similarity` uses) against the holdout's. Settings:
  `num_buckets` = max(3, round(min(n_records, n_holdout) / 10)) (the library's 'auto' rule, but never
  2 buckets, where the library scores identical histograms 0.75), PCA keeping 90%
  of the variance, k-means with 5 restarts and 500 iterations, `mauve_scaling_factor` 5, seed 25; all
  the library's defaults, stated here because cells are small (8 to 64 records).
- `precision`, `recall`, `density`, `coverage` (Naeem et al. 2020) through `prdc`, on the same features
  (Euclidean distance between L2-normalised rows, a monotone function of cosine), real = holdout,
  fake = records, k = min(5, n_holdout - 1, n_records - 1) (the paper's k = 5, lowered only when a set is
  smaller).
- `marginal_fidelity`: per leaf field (metrics.tabular), SDMetrics KSComplement for numeric fields and
  TVComplement for categorical ones, averaged over fields; per-field values in
  `info["marginal_fidelity"]`.
- `pair_fidelity`: SDMetrics ContingencySimilarity over every pair of categorical fields, averaged;
  per-pair values in `info["pair_fidelity"]`. It shows whether relations between fields (departure
  against destination) survive.

Each is NaN for a cell with no parsed record, a task with no holdout, or (marginal, pair) no field of
the needed kind.
"""

from __future__ import annotations

import contextlib
import io
import math
from itertools import combinations
from typing import Any

import numpy as np

from metrics.cell import NAN, CellView
from metrics.optional import require
from metrics.tabular import column_kinds, frame

PRDC_K = 5
MAUVE_SEED = 25
#: With 2 buckets mauve-text 0.4 scores two identical histograms 0.75 (measured on identical MiniLM
#: feature sets: [0.75, 0.25] against itself gives 0.75, while 3 and 5 buckets give 1.0), so never fewer than 3.
MIN_BUCKETS = 3


def _features(cell: CellView) -> tuple[np.ndarray, np.ndarray] | None:
    if not cell.records or not cell.spec.holdout:
        return None
    return cell.embeddings.astype(np.float32), cell.holdout_embeddings.astype(np.float32)


def mauve(cell: CellView) -> float:
    lib = require("mauve", "mauve-text", metric="mauve")
    feats = _features(cell)
    if feats is None:
        return NAN
    p, q = feats
    buckets = max(MIN_BUCKETS, round(min(len(p), len(q)) / 10))
    out = lib.compute_mauve(p_features=p, q_features=q, num_buckets=buckets, seed=MAUVE_SEED, verbose=False)
    cell.info["mauve"] = {"num_buckets": buckets, "scaling_factor": 5, "n_p": len(p), "n_q": len(q)}
    return float(out.mauve)


def _prdc(cell: CellView) -> dict[str, float]:
    if "_prdc" in cell.__dict__:
        return cell.__dict__["_prdc"]
    lib = require("prdc", "prdc", metric="precision/recall/density/coverage")
    feats = _features(cell)
    out = dict.fromkeys(("precision", "recall", "density", "coverage"), NAN)
    if feats is not None:
        fake, real = feats
        # prdc takes each point's (k+1)-th smallest distance, itself included, so k <= n - 2 per set
        k = min(PRDC_K, len(real) - 2, len(fake) - 2)
        if k >= 1:
            with contextlib.redirect_stdout(io.StringIO()):  # the library prints the set sizes
                got = lib.compute_prdc(real_features=real, fake_features=fake, nearest_k=k)
            out = {m: float(got[m]) for m in out}
            cell.info["prdc"] = {"k": k, "n_real": len(real), "n_fake": len(fake)}
    cell.__dict__["_prdc"] = out
    return out


def precision(cell: CellView) -> float:
    return _prdc(cell)["precision"]


def recall(cell: CellView) -> float:
    return _prdc(cell)["recall"]


def density(cell: CellView) -> float:
    return _prdc(cell)["density"]


def coverage(cell: CellView) -> float:
    return _prdc(cell)["coverage"]


def _tables(cell: CellView) -> tuple[Any, Any, Any] | None:
    if not cell.records or not cell.spec.holdout:
        return None
    cols = column_kinds(cell.spec.holdout)
    return cols, frame(cell.spec.holdout, cols), frame(cell.records, cols)


def marginal_fidelity(cell: CellView) -> float:
    sd = require("sdmetrics.single_column", "sdmetrics", metric="marginal_fidelity")
    tables = _tables(cell)
    if tables is None:
        return NAN
    cols, real, synth = tables
    per: dict[str, float] = {}
    for c in cols.numeric:
        r, s = real[c].dropna(), synth[c].dropna()
        per[c] = float(sd.KSComplement.compute(r, s)) if len(r) and len(s) else 0.0
    for c in cols.categorical:
        per[c] = float(sd.TVComplement.compute(real[c], synth[c]))
    cell.info["marginal_fidelity"] = per
    cell.info["free_text_fields"] = list(cols.free_text)
    return float(np.mean(list(per.values()))) if per else NAN


def pair_fidelity(cell: CellView) -> float:
    sd = require("sdmetrics.column_pairs", "sdmetrics", metric="pair_fidelity")
    tables = _tables(cell)
    if tables is None:
        return NAN
    cols, real, synth = tables
    per: dict[str, float] = {}
    for a, b in combinations(cols.categorical, 2):
        value = float(sd.ContingencySimilarity.compute(real[[a, b]], synth[[a, b]]))
        per[f"{a} ~ {b}"] = value if math.isfinite(value) else 0.0
    cell.info["pair_fidelity"] = per
    return float(np.mean(list(per.values()))) if per else NAN
