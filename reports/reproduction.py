"""The reproduction view: a run's table beside a published one (the paper's Table 1), cell by cell.

Why: a reader of an embedded run wants to know, per system and metric, whether our number lies above or
below the paper's and whether that is better or worse, without holding two tables side by side. Each
cell holds our value (mean over seeds, the run table's cell), the published value, and the direction of
the difference at the printed precision: `↑` ours above the paper's, `↓` below, `=` equal when both are
rounded to the column's decimals. `better` says whether our value is the better one under the metric's
direction (None when a value is missing or the column has no direction). Rows and columns are those of
the run table; a system or metric the paper does not give shows the dash for the paper's side.

Resolution of `reproduces:`: a bare file name is looked up in `reports/paper_results/`, anything else is a
path (relative paths against the working directory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reports.fmt import DASH, decimals_for, fmt_num
from reports.table import ResultsFileSource, Table, TableCell, TableColumn, TableRow

UP, DOWN, SAME = "\u2191", "\u2193", "="
PAPER_RESULTS = Path(__file__).resolve().parent / "paper_results"


@dataclass
class ReproCell:
    ours: TableCell
    paper: TableCell
    direction: str  # UP, DOWN, SAME or "" when either side has no number
    better: bool | None  # ours better than the paper's under the metric's direction

    def ours_text(self, decimals: int | None) -> str:
        if self.ours.mark or self.ours.missing:
            return self.ours.text(False)
        return fmt_num(self.ours.mean, _dec(self.ours.mean, decimals))

    def paper_text(self, decimals: int | None) -> str:
        return DASH if self.paper.missing else fmt_num(self.paper.mean, _dec(self.paper.mean, decimals))

    def text(self, decimals: int | None) -> str:
        """ "0.31 / 0.86 ↓": ours / paper, then the direction of the difference."""
        out = f"{self.ours_text(decimals)} / {self.paper_text(decimals)}"
        return f"{out} {self.direction}" if self.direction else out


@dataclass
class Reproduction:
    name: str
    caption: str
    source: str
    columns: list[TableColumn]
    rows: list[TableRow]
    cells: dict[tuple[str, str], ReproCell]
    notes: list[str] = field(default_factory=list)

    def cell(self, row: str, column: str) -> ReproCell:
        return self.cells[(row, column)]


def _dec(x: float, decimals: int | None) -> int:
    return decimals if decimals is not None else decimals_for(x)


def direction(
    ours: TableCell, paper: TableCell, decimals: int | None, better: str | None
) -> tuple[str, bool | None]:
    """(arrow, ours better?) at the printed precision (module docstring)."""
    if ours.mark or ours.missing or paper.missing:
        return "", None
    d = _dec(paper.mean, decimals)
    a, b = round(ours.mean, d), round(paper.mean, d)
    if a == b:
        return SAME, None
    arrow = UP if a > b else DOWN
    if better not in ("up", "down"):
        return arrow, None
    return arrow, (a > b) == (better == "up")


def resolve_results(name: str) -> Path:
    path = PAPER_RESULTS / name if "/" not in name and "\\" not in name else Path(name)
    if not path.is_file():
        from bench.errors import BenchError

        raise BenchError(f"reproduces: {name!r}: no results file at {path}")
    return path


def build_reproduction(table: Table, results: str | Path) -> Reproduction:
    """Our table's cells beside the published values of the same systems and metrics."""
    path = resolve_results(str(results))
    paper = ResultsFileSource(path)
    cells: dict[tuple[str, str], ReproCell] = {}
    counts = {UP: 0, DOWN: 0, SAME: 0}
    better = worse = 0
    for row in table.rows():
        for col in table.columns:
            ours = table.cell(row.key, col.key)
            theirs = paper.value(row.key, col.key, None)
            arrow, is_better = direction(ours, theirs, col.decimals, col.better)
            cells[(row.key, col.key)] = ReproCell(ours, theirs, arrow, is_better)
            if arrow:
                counts[arrow] += 1
            better += is_better is True
            worse += is_better is False
    caption = f"Reproduction: {table.caption or table.name} beside {paper.describe()}"
    notes = [
        f"Each cell: ours / published ({paper.describe()}; means, the paper gives no std). "
        f"{UP}: ours above the published value, {DOWN}: below, {SAME}: equal at the printed precision; "
        "column arrows in the header say which direction is better.",
        f"Of {sum(counts.values())} comparable cells: {counts[UP]} {UP}, {counts[DOWN]} {DOWN}, "
        f"{counts[SAME]} {SAME}; ours better in {better}, worse in {worse}.",
        *[n for n in table.notes if n.startswith(("Macro mean", "Stand-ins"))],
    ]
    return Reproduction(table.name, caption, paper.describe(), table.columns, table.rows(), cells, notes)


def reproductions_for_run(run_dir: Path | str, names: list[str] | None = None) -> list[Reproduction]:
    """One reproduction view per run table that declares `reproduces:`."""
    from reports.table import tables_for_run

    return [build_reproduction(t, t.reproduces) for t in tables_for_run(run_dir, names) if t.reproduces]
