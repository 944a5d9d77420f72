"""Markdown output: the per-run `report.md` the runner writes at the end of every run, and Markdown tables.

The content comes from `reports.run_report.build_run_report` (the same document the terminal prints);
this module only renders it. Every user string is escaped with backslashes, never with HTML entities
(a report.md is read as text as often as it is rendered): system and task names come from suites and may
hold Markdown or HTML syntax.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from reports.aggregate import write_results_csv
from reports.document import Bullets, Document, Facts, Heading, Paragraph, TableBlock
from reports.run_report import build_run_report, table_block

if TYPE_CHECKING:
    from reports.reproduction import Reproduction
    from reports.table import Table

# CommonMark lets any ASCII punctuation be backslash-escaped; these are the ones that can start or end
# markup (incl. < > & for inline HTML and entities) in a GitHub-flavoured table cell.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]#|~^$<>&])")


def md_escape(text: object) -> str:
    """Escape Markdown punctuation (and <, >, &) with backslashes; newlines become spaces."""
    s = _MD_SPECIAL.sub(r"\\\1", str(text))
    return s.replace("\r", " ").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table from already-escaped cell strings."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    rule = [":---" if a == "l" else "---:" if a == "r" else ":---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def md_code(text: object) -> str:
    """Text for inside a `code span`: backticks cannot be escaped there, so they become quotes."""
    return str(text).replace("`", "'").replace("\n", " ")


def render_block_md(block: object) -> str:
    if isinstance(block, Heading):
        return f"\n{'#' * block.level} {md_escape(block.text)}\n\n"
    if isinstance(block, Facts):
        return "\n".join(f"- **{md_escape(k)}**: {md_escape(v)}" for k, v in block.items) + "\n"
    if isinstance(block, TableBlock):
        rows = []
        for i, row in enumerate(block.rows):
            if i in block.group_rows:
                rows.append([f"*{md_escape(row[0])}*", *row[1:]])
                continue
            rows.append(
                [f"**{md_escape(c)}**" if (i, j) in block.bold else md_escape(c) for j, c in enumerate(row)]
            )
        caption = f"**{md_escape(block.caption)}**\n\n" if block.caption else ""
        return caption + md_table([md_escape(h) for h in block.header], rows, block.align or None)
    if isinstance(block, Bullets):
        lines = []
        for it in block.items:
            parts = [it.mark] if it.mark else []
            if it.code:
                parts.append(f"`{md_code(it.code)}`" + (":" if it.text else ""))
            parts.append(md_escape(it.text))
            lines.append("- " + " ".join(p for p in parts if p))
        return "\n".join(lines) + "\n"
    if isinstance(block, Paragraph):
        text = md_escape(block.text)
        return f"\n_{text}_\n" if block.emphasis else f"\n{text}\n"
    raise TypeError(f"unknown report block {type(block).__name__}")


def render_document_md(doc: Document) -> str:
    return f"# {md_escape(doc.title)}\n\n" + "".join(render_block_md(b) for b in doc.blocks)


def render_report_md(run_dir: Path | str) -> str:
    """The text of report.md for RUN_DIR."""
    return render_document_md(build_run_report(run_dir))


def write_report_md(run_dir: Path | str) -> str:
    """Write RUN_DIR/report.md (and results.csv next to it) and return the Markdown text.

    The runner calls this at the end of every run; it never raises on a run with failed or missing cells.
    """
    from bench.store import atomic_write_text

    text = render_report_md(run_dir)
    atomic_write_text(Path(run_dir) / "report.md", text, errors="replace")
    write_results_csv(run_dir)
    return text


def render_table_md(table: Table) -> str:
    """Markdown rendering of a table model (same cells, bold and arrows as the LaTeX one)."""
    return render_block_md(table_block(table))


def render_reproduction_md(repro: Reproduction) -> str:
    """Markdown of the reproduction view: "ours / paper ↑" per cell, then its notes."""
    from reports.run_report import reproduction_block

    return render_block_md(reproduction_block(repro)) + "\n" + md_escape(" ".join(repro.notes)) + "\n"
