"""Memorization against the task's references: field overlap (AoD's leakage diagnostic) and novelty.

`field_overlap`: over the cell's parsed records, take every leaf (path, normalized value) pair, skipping
fields the schema makes categorical (enum, const, boolean: sharing them says nothing about copying),
boolean values, nulls and empty strings; report the share of those pairs whose value also occurs at the
same path in some reference record (micro average over all pairs of the cell).

`novelty`: the share of the cell's word 3-grams (with multiplicity, within records) that occur in no
reference record.
"""

from __future__ import annotations

from metrics.cell import NAN, CellView, per_spec
from metrics.records import leaves, ngrams, normalized_value
from metrics.schema_paths import categorical_paths


def content_pairs(record: object, skip_paths: frozenset[str]) -> list[tuple[str, str]]:
    """The (path, normalized value) pairs field overlap counts for one record."""
    out = []
    for path, value in leaves(record):
        if value is None or isinstance(value, bool) or path in skip_paths:
            continue
        norm = normalized_value(value)
        if norm:
            out.append((path, norm))
    return out


def field_overlap(cell: CellView) -> float:
    skip = categorical_paths(cell.spec.schema)
    reference_pairs = per_spec(
        cell.spec,
        "reference_pairs",
        lambda: {p for r in cell.spec.references for p in content_pairs(r, skip)},
    )
    total = hits = 0
    for record in cell.records:
        for pair in content_pairs(record, skip):
            total += 1
            hits += pair in reference_pairs
    return hits / total if total else NAN


def novelty(cell: CellView) -> float:
    counts = cell.ngram_counts(3)
    total = sum(counts.values())
    if not total:
        return NAN
    reference = per_spec(
        cell.spec, "reference_trigrams", lambda: {g for t in cell.reference_tokens for g in ngrams(t, 3)}
    )
    novel = sum(c for g, c in counts.items() if g not in reference)
    return novel / total
