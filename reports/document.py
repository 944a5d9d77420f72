"""A run report as a small document model, so the Markdown file and the terminal print the same content.

Why a model: `bench run` prints the report to a terminal and writes it to `report.md`. Markdown escapes
(`parse\\_rate`) are noise on a terminal, and terminal alignment is noise in a Markdown file, so the
content is built once from unescaped strings (`reports.run_report.build_run_report`) and each renderer
(`reports.markdown.render_document_md`, `reports.terminal.render_document_text`) escapes or aligns it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Heading:
    text: str
    level: int = 2


@dataclass
class Facts:
    """Key/value lines (run id, profile, seeds, models, cache)."""

    items: list[tuple[str, str]]


@dataclass
class TableBlock:
    """A table of plain strings. `bold` marks cells by (row, column) index; `align` is 'l' or 'r' per column."""

    header: list[str]
    rows: list[list[str]]
    align: list[str] = field(default_factory=list)
    bold: set[tuple[int, int]] = field(default_factory=set)
    group_rows: set[int] = field(default_factory=set)  # rows that are a group label (italic in Markdown)
    caption: str = ""


@dataclass
class Item:
    """One bullet: a status word (PASS, FAIL, SKIP, or ''), a code part (an expectation) and a text."""

    text: str
    mark: str = ""
    code: str = ""


@dataclass
class Bullets:
    items: list[Item]


@dataclass
class Paragraph:
    text: str
    emphasis: bool = False


Block = Heading | Facts | TableBlock | Bullets | Paragraph


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, block: Block) -> None:
        self.blocks.append(block)
