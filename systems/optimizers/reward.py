"""The scorer of the judge cluster: one scalar reward plus named subrewards per evaluated batch.

The scalar drives the edit policy and the choice of the best prompt; in `aod` the optimizer agent never
sees it (only the evaluator's sentences), in `aod-scalar` it sees only this number. Every subreward is in
[0, 1] and higher is better; an undefined metric (NaN: nothing parsed) counts as 0, so a prompt that
breaks the JSON cannot score well on diversity by accident.

Weights (ours; the paper does not publish its scorer): task success dominates, then schema validity and
the judge's yes-share, then the variety and anti-copying signals that keep the optimizer from collapsing
onto the references.
"""

from __future__ import annotations

import math

WEIGHTS: dict[str, float] = {
    "tsr": 0.30,
    "schema_valid": 0.15,
    "judge": 0.15,
    "diversity": 0.10,
    "novelty": 0.10,
    "similarity": 0.10,
    "originality": 0.10,  # 1 - field_overlap
}


def _unit(x: float | None) -> float:
    if x is None or math.isnan(x):
        return 0.0
    return min(1.0, max(0.0, float(x)))


def subrewards(values: dict[str, float], judge_yes: float | None) -> dict[str, float]:
    """Each signal mapped onto [0, 1]; `judge` is absent when no judge ran (baselines)."""
    fo = values.get("field_overlap")
    out = {
        "tsr": _unit(values.get("tsr")),
        "schema_valid": _unit(values.get("schema_valid")),
        "diversity": _unit(values.get("diversity")),
        "novelty": _unit(values.get("novelty")),
        "similarity": _unit(values.get("similarity")),
        "originality": 0.0 if fo is None or math.isnan(fo) else 1.0 - _unit(fo),
    }
    if judge_yes is not None:
        out["judge"] = _unit(judge_yes)
    return out


def reward(parts: dict[str, float]) -> float:
    """Weighted mean of the subrewards present (weights renormalised when the judge is absent)."""
    total = sum(WEIGHTS[k] for k in parts)
    return sum(WEIGHTS[k] * v for k, v in parts.items()) / total if total else 0.0
