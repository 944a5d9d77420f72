"""Records as a table of leaf fields, and which fields are numeric or categorical, for the quality metrics.

Why a table: SDMetrics and scikit-learn compare columns. A record's scalar leaves become columns named by
their path (`price.double`, `lead_passenger.first_name`); list positions are left out (a column needs
one value per record). Column kinds are decided from the real records (the holdout), the same for every
system of a task:
- numeric: every present value is a JSON number (booleans are not numbers here);
- categorical: a boolean, or a string field whose real values repeat (distinct values at most half of the
  present values, and at most `MAX_CATEGORIES`), e.g. `day`, `area`, `category`;
- free text: every other string field (`question`, `address`): left out of the marginal and pair
  scores, which would compare near-unique strings by exact equality.
A value a record lacks is the category `<missing>`, so a generator that drops a field is penalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.types import JSON

MISSING = "<missing>"
MAX_CATEGORIES = 50


def scalar_leaves(record: Any, path: str = "") -> dict[str, Any]:
    """Path -> value of every scalar leaf outside lists (JSON null included)."""
    out: dict[str, Any] = {}
    if isinstance(record, dict):
        for key, value in record.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(value, dict):
                out.update(scalar_leaves(value, sub))
            elif not isinstance(value, list):
                out[sub] = value
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


@dataclass(frozen=True)
class Columns:
    numeric: tuple[str, ...]
    categorical: tuple[str, ...]
    free_text: tuple[str, ...]


def column_kinds(real: Sequence[JSON]) -> Columns:
    """Numeric, categorical and free-text leaf fields of the real records (module docstring)."""
    values: dict[str, list[Any]] = {}
    for r in real:
        for k, v in scalar_leaves(r).items():
            values.setdefault(k, []).append(v)
    numeric, categorical, free = [], [], []
    for k in sorted(values):
        present = [v for v in values[k] if v is not None]
        if not present:
            continue
        if all(_is_number(v) for v in present):
            numeric.append(k)
        elif all(isinstance(v, bool) for v in present):
            categorical.append(k)
        else:
            distinct = {str(v) for v in present}
            if len(distinct) <= max(1, len(present) // 2) and len(distinct) <= MAX_CATEGORIES:
                categorical.append(k)
            else:
                free.append(k)
    return Columns(tuple(numeric), tuple(categorical), tuple(free))


def frame(records: Sequence[JSON], columns: Columns) -> Any:
    """A pandas frame with one row per record: numeric columns as floats (NaN where absent or not a
    number), categorical columns as strings with `<missing>` for an absent value."""
    import math

    import pandas as pd

    rows = []
    for r in records:
        leaves = scalar_leaves(r)
        row: dict[str, Any] = {}
        for c in columns.numeric:
            v = leaves.get(c)
            row[c] = float(v) if _is_number(v) and math.isfinite(float(v)) else math.nan
        for c in columns.categorical:
            v = leaves.get(c, None)
            row[c] = MISSING if v is None else (str(v).lower() if isinstance(v, bool) else str(v))
        rows.append(row)
    return pd.DataFrame(rows, columns=[*columns.numeric, *columns.categorical])
