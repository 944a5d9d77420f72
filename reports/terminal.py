"""Plain-text rendering of a run report for the terminal (what `bench run` prints).

Why not print report.md: Markdown escapes (`parse\\_rate`, `\\<`) and pipe tables are hard to read in a
terminal. This renderer prints the same `Document` with aligned columns and no markup at all; the
Markdown file stays Markdown. Control characters from user strings are replaced, so a hostile system
name cannot move the cursor or clear the screen.
"""

from __future__ import annotations

import re
import unicodedata

from reports.document import Bullets, Document, Facts, Heading, Paragraph, TableBlock

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(text: object) -> str:
    """One line of printable text: control characters (ESC, CR, newlines ...) become spaces."""
    return _CONTROL.sub(" ", str(text))


def width(text: str) -> int:
    """Columns a string takes in a terminal (East Asian wide characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, cols: int, align: str) -> str:
    gap = " " * max(0, cols - width(text))
    return gap + text if align == "r" else text + gap


def render_table_text(block: TableBlock) -> str:
    header = [clean(h) for h in block.header]
    rows = [[clean(c) for c in r] for r in block.rows]
    align = block.align or ["l"] + ["r"] * (len(header) - 1)
    cols = [max([width(header[j])] + [width(r[j]) for r in rows if j < len(r)]) for j in range(len(header))]
    lines = []
    if block.caption:
        lines.append(clean(block.caption))
    lines.append("  ".join(_pad(h, cols[j], align[j]) for j, h in enumerate(header)).rstrip())
    lines.append("  ".join("-" * c for c in cols))
    for r in rows:
        lines.append("  ".join(_pad(c, cols[j], align[j]) for j, c in enumerate(r)).rstrip())
    return "\n".join(lines) + "\n"


def render_document_text(doc: Document) -> str:
    out = [clean(doc.title), "=" * width(clean(doc.title))]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["", clean(b.text), "-" * width(clean(b.text))]
        elif isinstance(b, Facts):
            key_w = max((width(clean(k)) for k, _ in b.items), default=0)
            out += [f"{_pad(clean(k), key_w, 'l')}  {clean(v)}" for k, v in b.items]
        elif isinstance(b, TableBlock):
            out.append(render_table_text(b).rstrip("\n"))
        elif isinstance(b, Bullets):
            for it in b.items:
                head = " ".join(p for p in (it.mark, clean(it.code)) if p)
                out.append(
                    f"  {head}: {clean(it.text)}" if head and it.text else f"  {head or clean(it.text)}"
                )
        elif isinstance(b, Paragraph):
            out += ["", clean(b.text)]
    return "\n".join(out) + "\n"


def render_report_text(run_dir: object) -> str:
    """The run's report as terminal text (same content as report.md)."""
    from reports.run_report import build_run_report

    return render_document_text(build_run_report(run_dir))  # type: ignore[arg-type]
