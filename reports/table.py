"""The table model: rows (systems, in groups), columns (metrics with a direction), cells with provenance.

Why a model separate from renderers: LaTeX, Markdown, CSV and HTML must show the same numbers, the same
bold cells and the same arrows, and each renderer only has to escape and lay out. Tables are declared in
a suite's `tables:` key (validated here by `TableSpec`) and filled from a *source*: a run directory
(`RunSource`, seed-level data, so bold can be tested for significance) or a results file such as the
paper's Table 1 (`ResultsFileSource`, published means only).

Bold rule (`bold: significant`, the default): in each column with a direction, the best value is bold
only when it is significantly better than the runner-up: paired t-test on shared seeds when both rows
have at least three, else Welch's t-test from mean, std and n, at level `alpha` (default 0.05). A tie or
missing seed-level data means no bold. `bold: best` bolds the strict best (what papers without seed data
do, e.g. the published Table 1); `bold: none` never bolds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.errors import BenchError
from bench.stats import Stat, paired_test, welch_p
from reports.fmt import DASH, MARKS, PARTIAL_MARK, fmt_mean_std, fmt_num, is_missing, marks_note

if TYPE_CHECKING:
    import pandas as pd

Better = Literal["up", "down"]


# ----------------------------------------------------------------------------------------- the spec
class ColumnSpec(BaseModel):
    """One column: a metric, its header label, its direction and printed decimals."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(..., description="metric name as in metrics.json")
    label: str | None = Field(None, description="header text (default: the metric name)")
    better: Better | None = Field(None, description="'up' or 'down' (default: the metric registry's)")
    decimals: int | None = Field(None, ge=0, le=6, description="decimals printed (default: by magnitude)")


class RowSpec(BaseModel):
    """One row: a system of the run (or of the results file) and its printed label."""

    model_config = ConfigDict(extra="forbid")

    system: str = Field(..., description="system name as in the suite's `systems:`")
    label: str | None = Field(None, description="row text (default: the system name)")


class GroupSpec(BaseModel):
    """A block of rows under a heading, e.g. 'Autoregressive' or 'Diffusion'."""

    model_config = ConfigDict(extra="forbid")

    label: str = Field(..., description="group heading")
    rows: list[RowSpec] = Field(..., min_length=1, description="systems in this group, in order")

    @field_validator("rows", mode="before")
    @classmethod
    def _row_strings(cls, v: Any) -> Any:
        return [{"system": r} if isinstance(r, str) else r for r in v] if isinstance(v, list) else v


class TableSpec(BaseModel):
    """A report table as declared under a suite's `tables:` key (see docs/reports.md)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="table name for `bench report --table NAME` and file names")
    caption: str = Field("", description="caption text (escaped in every format)")
    label: str | None = Field(None, description="LaTeX \\label key, e.g. tab:main")
    rows: list[RowSpec] | None = Field(None, description="systems as rows, when there are no groups")
    groups: list[GroupSpec] | None = Field(None, description="grouped rows (paper style)")
    columns: list[ColumnSpec] = Field(..., min_length=1, description="metrics as columns")
    tasks: list[str] | None = Field(None, description="tasks to macro-average over (default: all)")
    show_std: bool = Field(True, description="print mean ± std (std over seeds)")
    bold: Literal["significant", "best", "none"] = Field("significant", description="bold rule")
    alpha: float = Field(0.05, gt=0, lt=1, description="significance level of the bold rule")
    row_header: str = Field("System", description="header of the row-label column")
    reproduces: str | None = Field(
        None,
        description="a published results file (name in reports/paper_results/ or a path): reports add the "
        "reproduction view, this table beside the published one with the direction of each difference",
    )

    @field_validator("rows", mode="before")
    @classmethod
    def _row_strings(cls, v: Any) -> Any:
        return [{"system": r} if isinstance(r, str) else r for r in v] if isinstance(v, list) else v

    @field_validator("columns", mode="before")
    @classmethod
    def _column_strings(cls, v: Any) -> Any:
        return [{"metric": c} if isinstance(c, str) else c for c in v] if isinstance(v, list) else v

    @model_validator(mode="after")
    def _rows_or_groups(self) -> TableSpec:
        if (self.rows is None) == (self.groups is None):
            raise ValueError("a table needs exactly one of `rows` or `groups`")
        return self

    def group_list(self) -> list[GroupSpec]:
        return self.groups if self.groups is not None else [GroupSpec(label="", rows=self.rows or [])]

    def systems(self) -> list[str]:
        return [r.system for g in self.group_list() for r in g.rows]


def parse_tables(raw: list[dict[str, Any]] | None, where: str = "tables") -> list[TableSpec]:
    """Validate a suite's raw `tables:` list; errors name the table index and key."""
    out: list[TableSpec] = []
    for i, t in enumerate(raw or []):
        try:
            out.append(TableSpec.model_validate(t))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"])
            raise BenchError(f"{where}[{i}]{'.' + loc if loc else ''}: {err['msg']}") from None
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise BenchError(f"{where}: duplicate table name(s) {sorted(dup)}")
    return out


# ---------------------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class TableColumn:
    key: str
    label: str
    better: Better | None
    decimals: int | None


@dataclass(frozen=True)
class TableRow:
    key: str
    label: str


@dataclass(frozen=True)
class TableGroup:
    label: str
    rows: tuple[TableRow, ...]


@dataclass
class TableCell:
    """One number with where it came from; `seeds` (seed -> value) enables paired significance tests."""

    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    ci95: tuple[float, float] = (math.nan, math.nan)
    seeds: dict[int, float] | None = None
    provenance: str = ""
    decimals: int | None = None
    bold: bool = False
    mark: str | None = None  # failed | pending | not_run (reports.fmt.MARKS); None: a number or a NaN
    tasks: tuple[int, int] | None = None  # (tasks with a value, tasks run) when the mean covers fewer

    @property
    def missing(self) -> bool:
        return is_missing(self.mean)

    def text(self, show_std: bool) -> str:
        """Plain text (no markup): "m ± s", "m", a mark (failed, pending, not run) or the dash."""
        if self.mark:
            return MARKS[self.mark]
        if self.missing:
            return DASH
        partial = PARTIAL_MARK if self.tasks else ""
        if show_std:
            return fmt_mean_std(self.mean, self.std, self.decimals) + partial
        return fmt_num(self.mean, self.decimals) + partial


@dataclass
class Table:
    name: str
    caption: str
    label: str | None
    row_header: str
    columns: list[TableColumn]
    groups: list[TableGroup]
    cells: dict[tuple[str, str], TableCell]
    show_std: bool = True
    notes: list[str] = field(default_factory=list)
    reproduces: str | None = None  # published results file to set beside this table

    def cell(self, row: str, column: str) -> TableCell:
        return self.cells.get((row, column)) or TableCell()

    def rows(self) -> list[TableRow]:
        return [r for g in self.groups for r in g.rows]


# --------------------------------------------------------------------------------------- the sources
class TableSource(Protocol):
    """Where a table's numbers come from."""

    def value(self, system: str, metric: str, tasks: list[str] | None) -> TableCell: ...

    def systems(self) -> list[str]: ...

    def metrics(self) -> list[str]: ...

    def describe(self) -> str: ...


class RunSource:
    """Per-system macro means over tasks from a run directory, with seed-level values for the tests."""

    def __init__(self, run_dir: Path | str, df: pd.DataFrame | None = None):
        from reports.aggregate import load_run, read_manifest

        self.run_dir = Path(run_dir)
        self.df = load_run(run_dir) if df is None else df
        self.manifest = read_manifest(run_dir)
        self._cache: dict[tuple[str, ...], Any] = {}

    def describe(self) -> str:
        return f"run {self.manifest.get('run_id') or self.run_dir.name}"

    def systems(self) -> list[str]:
        return list(dict.fromkeys(self.df["system"].tolist()))

    def _systems(self) -> set[str]:
        if ("systems",) not in self._cache:
            self._cache[("systems",)] = set(self.systems())
        return self._cache[("systems",)]

    def seed_count(self) -> int:
        """Seeds of the run (the manifest's seed list; else the seeds present in cells)."""
        seeds = (self.manifest.get("suite") or {}).get("seeds")
        if isinstance(seeds, list) and seeds:
            return len(seeds)
        return int(self.df["seed"].nunique()) if len(self.df) else 0

    def metrics(self) -> list[str]:
        """The suite's metrics (efficiency values the runner adds stay out of default tables)."""
        from reports.aggregate import metric_order, suite_metric_names

        present = metric_order(self.df)
        declared = [m for m in suite_metric_names(self.manifest) if m in present]
        return declared or present

    def _frame(self, tasks: list[str] | None) -> pd.DataFrame:
        return self.df if not tasks else self.df[self.df["task"].isin(tasks)]

    def value(self, system: str, metric: str, tasks: list[str] | None) -> TableCell:
        from reports.aggregate import per_seed_macro, system_stats, task_coverage

        key = tuple(tasks or ())
        if key not in self._cache:
            frame = self._frame(tasks)
            self._cache[key] = (system_stats(frame), per_seed_macro(frame), task_coverage(frame))
        stats, macro, coverage = self._cache[key]
        if system not in self._systems():
            suite = self.manifest.get("suite") or {}
            pending = suite.get("pending") or {}
            if system in pending:
                return TableCell(mark="pending", provenance=f"pending: {pending[system]}")
            return TableCell(mark="not_run", provenance=f"{self.describe()}: {system} is not in this run")
        if (system, metric) not in stats:
            return TableCell(provenance=f"{self.describe()}: no cell of {system} has {metric}")
        st, n_failed = stats[(system, metric)]
        if st.n == 0 and st.n_nan == 0 and n_failed:
            return TableCell(mark="failed", provenance=f"{self.describe()}: all {n_failed} cell(s) failed")
        rows = macro[(macro["system"] == system) & (macro["metric"] == metric)]
        seeds = {
            int(s): float(v) for s, v in zip(rows["seed"], rows["value"], strict=True) if not math.isnan(v)
        }
        scope = "all tasks" if not tasks else ", ".join(tasks)
        prov = f"{self.describe()}: macro mean over {scope}; {st.n} seed(s)"
        if n_failed:
            prov += f", {n_failed} failed cell(s) left out"
        defined, ran = coverage.get((system, metric), (0, 0))
        partial = (defined, ran) if 0 < defined < ran else None
        if partial:
            prov += f"; defined on {defined} of the {ran} tasks it ran (the others have no value)"
        from reports.aggregate import metric_bounds

        cell = TableCell(st.mean, st.std, st.n, st.bounded_interval(metric_bounds(metric)), seeds, prov)
        cell.tasks = partial
        return cell


class ResultsFileSource:
    """Published numbers (means only) from a JSON results file, e.g. reports/paper_results/*.json.

    File shape: {"source": str, "n_seeds": int|null, "metrics": [names], "systems": [{"system", "label",
    "group", "values": {metric: number|null}, "std": {metric: number} (optional)}], "tables": [TableSpec]}.
    null means the source does not give the value; it is shown as a dash, never guessed.
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        try:
            self.data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BenchError(f"{path}: cannot read results file: {exc}") from None
        self._rows = {r["system"]: r for r in self.data.get("systems", [])}

    def describe(self) -> str:
        return str(self.data.get("source") or self.path.name)

    def systems(self) -> list[str]:
        return list(self._rows)

    def metrics(self) -> list[str]:
        return list(self.data.get("metrics") or [])

    def tables(self) -> list[dict[str, Any]]:
        return list(self.data.get("tables") or [])

    def value(self, system: str, metric: str, tasks: list[str] | None) -> TableCell:
        row = self._rows.get(system) or {}
        v = (row.get("values") or {}).get(metric)
        sd = (row.get("std") or {}).get(metric)
        n = int(self.data.get("n_seeds") or 0)
        if v is None:
            return TableCell(n=0, provenance=f"{self.describe()}: not given")
        return TableCell(
            float(v),
            float(sd) if sd is not None else math.nan,
            n,
            (math.nan, math.nan),
            None,
            self.describe(),
        )


# --------------------------------------------------------------------------------------- building
def default_spec(source: TableSource, name: str = "main") -> TableSpec:
    """All systems as rows, all metrics as columns: the table a suite without `tables:` gets. The
    synthetic-data quality metrics have a table of their own (`quality_spec`)."""
    quality = set(_quality_metrics())
    columns = [m for m in source.metrics() if m not in quality]
    return TableSpec(name=name, rows=source.systems() or [], columns=columns or source.metrics() or ["tsr"])


def _quality_metrics() -> list[str]:
    try:
        from metrics.registry import QUALITY_METRICS
    except ImportError:  # reports render published results without the metrics package
        return []
    return list(QUALITY_METRICS)


def quality_spec(source: TableSource) -> TableSpec | None:
    """The "quality" table (distribution fidelity, privacy, utility) when the run scored any of them."""
    present = set(source.metrics())
    columns = [m for m in _quality_metrics() if m in present]
    if not columns:
        return None
    return TableSpec(
        name="quality",
        caption="Synthetic-data quality: distribution fidelity, privacy and utility",
        rows=source.systems() or [],
        columns=columns,
    )


def build_table(spec: TableSpec, source: TableSource) -> Table:
    """Fill `spec` from `source` and apply the bold rule."""
    from reports.aggregate import metric_better

    columns = [
        TableColumn(c.metric, c.label or c.metric, c.better or metric_better(c.metric), c.decimals)
        for c in spec.columns
    ]
    groups = [
        TableGroup(g.label, tuple(TableRow(r.system, r.label or r.system) for r in g.rows))
        for g in spec.group_list()
    ]
    cells: dict[tuple[str, str], TableCell] = {}
    for g in groups:
        for r in g.rows:
            for c in columns:
                cell = source.value(r.key, c.key, spec.tasks)
                cell.decimals = c.decimals
                cells[(r.key, c.key)] = cell
    table = Table(spec.name, spec.caption, spec.label, spec.row_header, columns, groups, cells, spec.show_std)
    mark_best(table, spec.bold, spec.alpha)
    return table


def _better_than(a: float, b: float, better: Better) -> bool:
    return a > b if better == "up" else a < b


def significantly_better(best: TableCell, runner_up: TableCell, alpha: float) -> tuple[bool, float]:
    """(is significant, p-value): paired t-test on >= 3 shared seeds, else Welch from summaries."""
    if best.seeds and runner_up.seeds:
        shared = sorted(set(best.seeds) & set(runner_up.seeds))
        if len(shared) >= 3:
            p = paired_test([runner_up.seeds[s] for s in shared], [best.seeds[s] for s in shared]).p_ttest
            return (not math.isnan(p) and p < alpha, p)
    if best.n >= 2 and runner_up.n >= 2 and not is_missing(best.std) and not is_missing(runner_up.std):
        a = Stat(best.n, best.mean, best.std**2 * (best.n - 1))
        b = Stat(runner_up.n, runner_up.mean, runner_up.std**2 * (runner_up.n - 1))
        p = welch_p(a, b)
        return (not math.isnan(p) and p < alpha, p)
    return (False, math.nan)


def mark_best(table: Table, rule: str, alpha: float) -> None:
    """Set `bold` on the best cell of each directional column according to `rule` (module docstring)."""
    untestable: list[str] = []
    for col in table.columns:
        if col.better is None or rule == "none":
            continue
        cands = [(r.key, table.cell(r.key, col.key)) for r in table.rows()]
        cands = [(k, c) for k, c in cands if not c.missing and not c.tasks]  # partial means: not compared
        if not cands:
            continue
        cands.sort(key=lambda kc: kc[1].mean, reverse=col.better == "up")
        best = cands[0][1]
        if len(cands) == 1:
            best.bold = rule == "best"
            continue
        runner = cands[1][1]
        if not _better_than(best.mean, runner.mean, col.better):
            continue  # a tie: nobody is best
        if rule == "best":
            best.bold = True
            continue
        sig, p = significantly_better(best, runner, alpha)
        best.bold = sig
        if math.isnan(p):
            untestable.append(col.label)
    if rule == "significant":
        table.notes.append(
            f"Bold: best value, only where significantly better than the runner-up (p < {alpha:g}; paired "
            "t-test on shared seeds, else Welch)."
        )
        if untestable:
            table.notes.append("Not testable (no seed-level data): " + ", ".join(untestable) + ".")
    elif rule == "best":
        table.notes.append("Bold: best value in each column (no significance test).")
    if table.show_std:
        table.notes.append("Values: mean \u00b1 sample std over seeds.")
    else:
        table.notes.append("Values: mean over seeds.")
    table.notes.append(marks_note())
    if any(c.tasks for c in table.cells.values()):
        table.notes.append(
            f"{PARTIAL_MARK}: mean over only the tasks where the value is defined; the system ran more "
            "(a task without a parsed record or with a failed cell has no value)."
        )


def tables_for_run(run_dir: Path | str, names: list[str] | None = None) -> list[Table]:
    """Every table the run's suite declares (or the default one), built from the run directory."""
    source = RunSource(run_dir)
    suite = source.manifest.get("suite") or {}
    specs = parse_tables(suite.get("tables")) or [default_spec(source)]
    quality = quality_spec(source)
    if quality is not None and all(sp.name != "quality" for sp in specs):
        specs.append(quality)
    tables = []
    all_tasks = list(dict.fromkeys(source.df["task"].tolist()))
    seeds = source.seed_count()
    profile = str(source.manifest.get("profile") or "")
    for spec in _select(specs, names):
        spec = spec.model_copy(update={"caption": fill_caption(spec.caption, seeds, profile)})
        table = build_table(spec, source)
        label_served(table, source.manifest)
        tasks = [t for t in all_tasks if not spec.tasks or t in spec.tasks]
        table.notes.insert(0, f"Macro mean over {len(tasks)} task(s): {', '.join(tasks)}.")
        table.reproduces = spec.reproduces
        tables.append(table)
    return tables


def fill_caption(caption: str, seeds: int, profile: str) -> str:
    """`{seeds}` -> "3 seeds" (from the run, never from the suite text), `{profile}` -> the profile."""
    word = f"{seeds} seed" + ("" if seeds == 1 else "s")
    return caption.replace("{seeds}", word).replace("{profile}", profile)


def label_served(table: Table, manifest: dict[str, Any]) -> None:
    """Every row names the model that served it (manifest `served_by`, bench/served.py)."""
    served = manifest.get("served_by") or {}
    groups = []
    for g in table.groups:
        rows = []
        for r in g.rows:
            entry = served.get(r.key) if isinstance(served, dict) else None
            text = entry.get("text") if isinstance(entry, dict) else None
            rows.append(TableRow(r.key, f"{r.label} ({text})" if text else r.label))
        groups.append(TableGroup(g.label, tuple(rows)))
    table.groups = groups
    notes = sorted(
        {
            f"{s}: {n}"
            for s, e in (served.items() if isinstance(served, dict) else [])
            if isinstance(e, dict) and s in {r.key for r in table.rows()}
            for n in e.get("notes") or []
        }
    )
    if notes:
        table.notes.append("Stand-ins: " + "; ".join(notes) + ".")


def tables_for_results(path: Path | str, names: list[str] | None = None) -> list[Table]:
    """Every table a results file declares (or the default one), built from its published values."""
    source = ResultsFileSource(path)
    specs = parse_tables(source.tables(), where=f"{path}: tables") or [default_spec(source)]
    tables = [build_table(s, source) for s in _select(specs, names)]
    for t in tables:
        t.notes.insert(0, f"Source: {source.describe()} (published values; best among the rows given).")
        t.notes.extend(str(n) for n in source.data.get("notes") or [])
    return tables


def _select(specs: list[TableSpec], names: list[str] | None) -> list[TableSpec]:
    if not names:
        return specs
    from bench.registry import suggest

    known = [s.name for s in specs]
    for n in names:
        if n not in known:
            raise BenchError(f"no table {n!r}{suggest(n, known)} (tables: {', '.join(known)})")
    return [s for s in specs if s.name in names]
