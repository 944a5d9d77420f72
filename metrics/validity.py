"""Structure metrics: parse rate, schema validity, task success, and per-field diagnostics.

Denominators are the samples that reached the model-facing part of the pipeline: harness failures
(backend_error, timeout) are excluded and counted by `harness_failures` instead (design §7). The
diagnostics `missing_required`, `type_violations`, `enum_violations` are shares of *parsed* records
with at least one error of that kind; their per-field counts go to the cell's info (`structure`).
"""

from __future__ import annotations

from collections import Counter

from metrics.cell import NAN, CellView


def parse_rate(cell: CellView) -> float:
    """parsed / n."""
    return cell.share(sum(j.parsed for j in cell.scored), cell.n)


def schema_valid(cell: CellView) -> float:
    """schema-valid (Draft 2020-12 with format checks) / n."""
    return cell.share(sum(j.schema_valid for j in cell.scored), cell.n)


def tsr(cell: CellView) -> float:
    """schema-valid AND default rubric passes / n (metrics.rubric)."""
    return cell.share(sum(j.tsr_pass for j in cell.scored), cell.n)


def tsr_judge(cell: CellView) -> float:
    """tsr AND the LLM judge said yes to every rubric question (Sample.meta["judge"], a list of bools).

    The judge runs inside the system (AoD's judge cluster) and leaves its verdicts on the sample; a
    sample without a verdict fails. NaN when no sample of the cell carries a verdict (no judge ran).
    """
    verdicts = [j.sample.meta.get("judge") for j in cell.scored]
    if not any(isinstance(v, list) for v in verdicts):
        return NAN
    ok = sum(
        j.tsr_pass and isinstance(v, list) and bool(v) and all(x is True for x in v)
        for j, v in zip(cell.scored, verdicts, strict=True)
    )
    return cell.share(ok, cell.n)


def truncation_rate(cell: CellView) -> float:
    """Samples classified TRUNCATED / n."""
    return cell.share(sum(bool(j.extraction and j.extraction.truncated) for j in cell.scored), cell.n)


def harness_failures(cell: CellView) -> float:
    """Count of samples the harness failed to produce (excluded from every denominator)."""
    return float(cell.harness_failures)


def field_errors(cell: CellView) -> dict[str, dict[str, int]]:
    """kind -> {field path: count} over the cell's parsed records (the per-field diagnostics)."""
    per_kind: dict[str, Counter[str]] = {}
    for j in cell.scored:
        if j.check is None:
            continue
        for (kind, path), n in j.check.counts.items():
            per_kind.setdefault(kind, Counter())[path] += n
    return {k: dict(sorted(c.items())) for k, c in sorted(per_kind.items())}


def _records_with(cell: CellView, kind: str) -> float:
    parsed = [j for j in cell.scored if j.check is not None]
    return cell.share(sum(kind in j.check.kinds() for j in parsed if j.check is not None), len(parsed))


def missing_required(cell: CellView) -> float:
    """Share of parsed records missing at least one required key."""
    return _records_with(cell, "missing_required")


def type_violations(cell: CellView) -> float:
    """Share of parsed records with at least one value of the wrong JSON type."""
    return _records_with(cell, "type_violation")


def enum_violations(cell: CellView) -> float:
    """Share of parsed records with at least one value outside its enum/const."""
    return _records_with(cell, "enum_violation")
