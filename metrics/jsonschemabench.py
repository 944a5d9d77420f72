"""JSONSchemaBench's metrics (Geng et al. 2025, arXiv 2501.10868, §3), over a cell of per-item samples.

- declared coverage: share of samples whose engine compiled the schema (`meta.declared`; a sample without
  the flag counts as declared: an engine that takes any schema, like unconstrained `ar`, declares all);
- empirical coverage: share of samples that parse and validate against their own item's schema under Draft
  2020-12 with format checking (the cell's `schema_valid` judgement, metrics.cell);
- compliance: empirical coverage over the declared samples only;
- efficiency: grammar compile time (`meta.compile_seconds`, mean over the cell's schemas), time to first
  token (`meta.ttft_seconds` where a backend measures it, else NaN with the reason), time per output token
  (`meta.seconds / meta.tokens_out`, mean over declared samples; without a streaming backend this
  includes prompt processing) and tokens/s (total output tokens / total generation seconds).

Each value gets a bootstrap 95% interval in the cell info (`info["jsonschemabench"][metric]`): 100 resamples
of the samples with replacement, seeded, percentiles 2.5 and 97.5, as the paper reports its means.
Harness failures (backend errors, e.g. a prompt longer than the context window) are excluded from every
denominator, as for all metrics (metrics.validity), and counted in the info.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from metrics.cell import NAN, CellView, Judged

RESAMPLES = 100
BOOTSTRAP_SEED = 0


def declared(j: Judged) -> bool:
    return bool(j.sample.meta.get("declared", True))


def bootstrap_ci(
    units: Sequence[Judged], stat: Callable[[Sequence[Judged]], float], seed: int = BOOTSTRAP_SEED
) -> list[float] | None:
    """Percentile 95% interval of `stat` over RESAMPLES resamples of `units` (None when undefined)."""
    if not units:
        return None
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(RESAMPLES):
        idx = rng.integers(0, len(units), len(units))
        v = stat([units[k] for k in idx])
        if not math.isnan(v):
            values.append(v)
    if not values:
        return None
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def _record(cell: CellView, name: str, value: float, units: Sequence[Judged], stat, **extra) -> float:
    info = cell.info.setdefault("jsonschemabench", {})
    info[name] = {
        "value": value,
        "ci95": bootstrap_ci(units, stat),
        "n": len(units),
        "resamples": RESAMPLES,
        "seed": BOOTSTRAP_SEED,
        **extra,
    }
    info["harness_failures"] = cell.harness_failures
    info["samples_without_declared_flag"] = sum("declared" not in j.sample.meta for j in cell.scored)
    return value


def _share(units: Sequence[Judged], ok: Callable[[Judged], bool]) -> float:
    return sum(ok(j) for j in units) / len(units) if units else NAN


def _declared_share(units: Sequence[Judged]) -> float:
    return _share(units, declared)


def _valid_share(units: Sequence[Judged]) -> float:
    return _share(units, lambda j: j.schema_valid)


def _compliance(units: Sequence[Judged]) -> float:
    return _valid_share([j for j in units if declared(j)])


def declared_coverage(cell: CellView) -> float:
    """Declared samples / samples (harness failures excluded)."""
    units = cell.scored
    return _record(cell, "declared_coverage", _declared_share(units), units, _declared_share)


def empirical_coverage(cell: CellView) -> float:
    """Samples that parse and are schema-valid against their item / samples."""
    units = cell.scored
    return _record(cell, "empirical_coverage", _valid_share(units), units, _valid_share)


def compliance(cell: CellView) -> float:
    """Schema-valid declared samples / declared samples (NaN when nothing was declared)."""
    units = cell.scored
    return _record(cell, "compliance", _compliance(units), units, _compliance)


def _num(j: Judged, key: str) -> float | None:
    v = j.sample.meta.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _compile_mean(units: Sequence[Judged]) -> float:
    per_schema: dict[str, float] = {}
    for j in units:
        v = _num(j, "compile_seconds")
        if v is not None:
            per_schema.setdefault(str(j.sample.meta.get("schema_id", j.sample.index)), v)
    return float(np.mean(list(per_schema.values()))) if per_schema else NAN


def compile_seconds(cell: CellView) -> float:
    """Mean grammar compile time per schema, declared or refused (NaN: the engine compiles nothing)."""
    units = cell.scored
    value = _compile_mean(units)
    reason = {"reason": "no sample carries compile_seconds (no grammar)"} if math.isnan(value) else {}
    return _record(cell, "compile_seconds", value, units, _compile_mean, **reason)


def _generated(units: Sequence[Judged]) -> list[Judged]:
    return [
        j
        for j in units
        if declared(j) and (_num(j, "tokens_out") or 0) > 0 and _num(j, "seconds") is not None
    ]


def _ttft(units: Sequence[Judged]) -> float:
    vals = [v for j in _generated(units) if (v := _num(j, "ttft_seconds")) is not None]
    return float(np.mean(vals)) if vals else NAN


def ttft_seconds(cell: CellView) -> float:
    """Mean time to first token where the backend measured it (`meta.ttft_seconds`)."""
    units = cell.scored
    value = _ttft(units)
    reason = (
        {"reason": "the backend does not stream, so time to first token is not measured"}
        if math.isnan(value)
        else {}
    )
    return _record(cell, "ttft_seconds", value, units, _ttft, **reason)


def _tpot(units: Sequence[Judged]) -> float:
    vals = [_num(j, "seconds") / _num(j, "tokens_out") for j in _generated(units)]  # type: ignore[operator]
    return float(np.mean(vals)) if vals else NAN


def tpot_seconds(cell: CellView) -> float:
    """Mean of seconds / output tokens over declared samples (includes prompt processing)."""
    units = cell.scored
    return _record(cell, "tpot_seconds", _tpot(units), units, _tpot, includes_prefill=True)


def _rate(units: Sequence[Judged]) -> float:
    gen = _generated(units)
    secs = sum(_num(j, "seconds") for j in gen)  # type: ignore[misc]
    return sum(_num(j, "tokens_out") for j in gen) / secs if gen and secs > 0 else NAN  # type: ignore[misc]


def tokens_per_s(cell: CellView) -> float:
    """Total output tokens / total generation seconds over declared samples."""
    units = cell.scored
    return _record(cell, "tokens_per_s", _rate(units), units, _rate)
