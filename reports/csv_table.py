"""CSV rendering of a table model: one line per (row, column) cell, with provenance.

Why long format: spreadsheets and pandas pivot it either way, and every cell keeps its std, n, interval,
bold flag and where the number came from, which a wide CSV would have to flatten into composite headers.
The csv module quotes every field that needs it, so hostile names stay one field.
"""

from __future__ import annotations

import csv
import io
import math

from reports.table import Table

CSV_COLUMNS = [
    "table",
    "group",
    "system",
    "row_label",
    "metric",
    "column_label",
    "better",
    "mean",
    "std",
    "n",
    "ci95_low",
    "ci95_high",
    "bold",
    "provenance",
]


def _num(x: float) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.10g}"


def render_table_csv(table: Table) -> str:
    """The table as CSV text (header line first); NaN is an empty field."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for group in table.groups:
        for row in group.rows:
            for col in table.columns:
                c = table.cell(row.key, col.key)
                w.writerow(
                    [
                        table.name,
                        group.label,
                        row.key,
                        row.label,
                        col.key,
                        col.label,
                        col.better or "",
                        _num(c.mean),
                        _num(c.std),
                        c.n,
                        _num(c.ci95[0]),
                        _num(c.ci95[1]),
                        int(c.bold),
                        c.provenance,
                    ]
                )
    return buf.getvalue()
