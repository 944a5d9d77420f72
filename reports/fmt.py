"""Number formatting shared by every renderer, so LaTeX, Markdown, CSV and HTML print the same digits."""

from __future__ import annotations

import math

DASH = "\u2013"  # en dash: how a NaN (metric undefined, e.g. no parsed record) is shown
PARTIAL_MARK = "\u2020"  # dagger: a macro mean over fewer tasks than the system ran (explained in notes)

# Why a cell has no number, when it is not a NaN: each reason has its own mark (explained in every
# table's notes), so a failed cell never looks like a system that was not run or is not built yet.
MARKS = {
    "failed": "\u00d7",  # ×: the system ran, every cell that would give this value failed (harness)
    "pending": "\u25cb",  # ○: the system is declared pending in the suite (not built yet)
    "not_run": "n/r",  # the system is not in this run (left out, e.g. with --systems)
}
MARK_NOTES = {
    "failed": "every cell failed (a harness or backend failure, listed under failed cells)",
    "pending": "system pending (not built yet)",
    "not_run": "system not in this run",
}


def marks_note() -> str:
    """The footnote that explains the marks and the dash."""
    parts = [f"{MARKS[k]}: {MARK_NOTES[k]}" for k in MARKS]
    return "; ".join(parts) + f"; {DASH}: undefined (e.g. no parsed record)."


def is_missing(x: float | None) -> bool:
    return x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x)))


def decimals_for(x: float) -> int:
    """Three significant-ish decimals for rates, fewer for large values (perplexity, BLEU x100)."""
    a = abs(x)
    if a >= 100:
        return 1
    if a >= 10:
        return 2
    return 3


def fmt_num(x: float | None, decimals: int | None = None, *, sign: bool = False, missing: str = DASH) -> str:
    """A number with a fixed number of decimals (a leading + on differences with `sign`), or `missing`
    for NaN/None/inf. Benchmark tables written in plain ASCII pass `missing="-"`."""
    if is_missing(x):
        return missing
    d = decimals_for(float(x)) if decimals is None else decimals  # type: ignore[arg-type]
    return f"{float(x):{'+' if sign else ''}.{d}f}"  # type: ignore[arg-type]


def fmt_p(p: float | None, spec: str = ".3f", below: str | None = None, missing: str = DASH) -> str:
    """A p-value in format `spec`, "<`below`" under that floor (e.g. below="1e-4" prints "<1e-4"), or
    `missing` when no test was possible. Each table keeps its own precision: stored tables in the docs
    were written with these exact formats."""
    if is_missing(p):
        return missing
    if below is not None and float(p) < float(below):  # type: ignore[arg-type]
        return f"<{below}"
    return format(float(p), spec)  # type: ignore[arg-type]


def fmt_mean_std(mean: float | None, std: float | None, decimals: int | None = None) -> str:
    """ "m ± s" with both at the mean's precision; just "m" when std is undefined (one seed)."""
    if is_missing(mean):
        return DASH
    d = decimals_for(float(mean)) if decimals is None else decimals  # type: ignore[arg-type]
    if is_missing(std):
        return fmt_num(mean, d)
    return f"{fmt_num(mean, d)} \u00b1 {fmt_num(std, d)}"
