"""The content of a run's report (report.md and what `bench run` prints), as a `Document`.

It shows, per (system, task), every suite metric as mean ± sample std over seeds with the number of seeds,
NaN as a dash, the per-system macro mean (as in the paper's tables) and every failed cell with its reason.
A run that never finished (killed, or still running) is marked partial, and what its manifest could not
record yet (cache hits and misses, cell counts) is computed from the cells on disk. Each system's line of
models lists only the roles that system asked for during generation (from its cells' usage.json), so an
AR row does not claim a `dlm`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reports.aggregate import (
    cell_stats,
    failed_cells,
    load_run,
    metric_better,
    metric_order,
    read_manifest,
    suite_metric_names,
    system_stats,
    unique_in_order,
)
from reports.document import Bullets, Document, Facts, Heading, Item, Paragraph, TableBlock
from reports.fmt import fmt_mean_std

ARROWS = {"up": "\u2191", "down": "\u2193"}
SCORING_ROLES = ("embedder", "scorer")  # roles the metrics use, not the system


def metric_label(name: str) -> str:
    arrow = ARROWS.get(metric_better(name) or "", "")
    return name + (f" {arrow}" if arrow else "")


def build_run_report(run_dir: Path | str) -> Document:
    manifest = read_manifest(run_dir)
    df = load_run(run_dir)
    metrics = metric_order(df)
    suite = manifest.get("suite") or {}
    doc = Document(f"Run report: {suite.get('name') or Path(run_dir).name}")
    doc.add(Facts(manifest_facts(manifest, run_dir)))

    cells = cell_stats(df)
    pairs = [tuple(p.split("\x00")) for p in unique_in_order(f"{s}\x00{t}" for s, t, _ in cells)]
    declared = [m for m in suite_metric_names(manifest) if m in metrics]
    main = declared or metrics
    other = [m for m in metrics if m not in main]
    if not pairs:
        doc.add(Paragraph("No cells in this run yet.", emphasis=True))
    else:
        doc.add(Heading("Per system and task (mean \u00b1 std over seeds)"))
        doc.add(cell_table(cells, pairs, main))
        doc.add(Heading("Per system (macro mean over tasks; mean \u00b1 std over seeds)"))
        doc.add(system_table(df, main))
        if other:
            doc.add(Heading("Efficiency and other values (per system and task)"))
            doc.add(cell_table(cells, pairs, other))

    if pairs:
        from reports.table import tables_for_run

        # the suite's own tables; without any, the per-system table above is the main one and only the
        # synthetic-data quality table (when the run scored those metrics) is added
        tables = [t for t in tables_for_run(run_dir) if suite.get("tables") or t.name == "quality"]
        for table in tables:
            doc.add(Heading(f"Table {table.name}"))
            doc.add(table_block(table))
            doc.add(Paragraph(" ".join(table.notes)))
            if getattr(table, "reproduces", None):
                from reports.reproduction import build_reproduction

                repro = build_reproduction(table, table.reproduces)
                doc.add(Heading(f"Reproduction of {repro.source}"))
                doc.add(reproduction_block(repro))
                doc.add(Paragraph(" ".join(repro.notes)))

    expectations = [e for e in manifest.get("expectations") or [] if isinstance(e, dict)]
    if expectations:
        passed = sum(bool(e.get("passed")) for e in expectations)
        skipped = sum(bool(e.get("skipped")) for e in expectations)
        counts = f"{passed} passed, {len(expectations) - passed - skipped} failed"
        doc.add(Heading(f"Expectations ({counts}{f', {skipped} skipped' if skipped else ''})"))
        items = []
        for e in expectations:
            mark = "SKIP" if e.get("skipped") else "PASS" if e.get("passed") else "FAIL"
            items.append(Item(str(e.get("detail", "")), mark, str(e.get("text", ""))))
        doc.add(Bullets(items))

    failed = failed_cells(run_dir)
    doc.add(Heading(f"Failed cells ({len(failed)})"))
    if not failed:
        doc.add(Paragraph("None."))
    else:
        doc.add(
            Bullets(
                [
                    Item(
                        f"seed {f['seed']} ({f['status']}): {f['error']}",
                        code=f"{f['system']} / {f['task']}",
                    )
                    for f in failed
                ]
            )
        )
    doc.add(
        Paragraph(
            "NaN (a metric undefined for every seed, e.g. no parsed record) is shown as \u2013. "
            "Failed cells are harness or system failures and never enter a mean."
        )
    )
    return doc


def cell_table(cells: dict, pairs: list[tuple[str, ...]], metrics: list[str]) -> TableBlock:
    """One row per (system, task), one column per metric, with seed counts."""
    rows = []
    for s, t in pairs:
        present = [cells[(s, t, m)] for m in metrics if (s, t, m) in cells]
        n_seeds = max((st.n + st.n_nan for st, _ in present), default=0)
        n_failed = max((nf for _, nf in present), default=0)
        seeds = str(n_seeds) + (f" (+{n_failed} failed)" if n_failed else "")
        vals = [
            fmt_mean_std(cells[(s, t, m)][0].mean, cells[(s, t, m)][0].std)
            if (s, t, m) in cells
            else fmt_mean_std(None, None)
            for m in metrics
        ]
        rows.append([s, t, seeds, *vals])
    return TableBlock(
        ["system", "task", "seeds", *[metric_label(m) for m in metrics]],
        rows,
        ["l", "l", "r", *["r"] * len(metrics)],
    )


def system_table(df: Any, metrics: list[str]) -> TableBlock:
    sys_stats = system_stats(df)
    rows = []
    for s in unique_in_order(s for s, _ in sys_stats):
        n = max((sys_stats[(s, m)][0].n for m in metrics if (s, m) in sys_stats), default=0)
        vals = [
            fmt_mean_std(sys_stats[(s, m)][0].mean, sys_stats[(s, m)][0].std)
            if (s, m) in sys_stats
            else fmt_mean_std(None, None)
            for m in metrics
        ]
        rows.append([s, str(n), *vals])
    return TableBlock(
        ["system", "seeds", *[metric_label(m) for m in metrics]], rows, ["l", "r", *["r"] * len(metrics)]
    )


def table_block(table: Any) -> TableBlock:
    """A `reports.table.Table` as a block: the same cells, bold and arrows as the LaTeX rendering."""
    header = [table.row_header] + [
        c.label + (f" {ARROWS[c.better]}" if c.better in ARROWS else "") for c in table.columns
    ]
    rows: list[list[str]] = []
    bold: set[tuple[int, int]] = set()
    group_rows: set[int] = set()
    for group in table.groups:
        if group.label and len(table.groups) > 1:
            group_rows.add(len(rows))
            rows.append([group.label] + [""] * len(table.columns))
        for row in group.rows:
            cells = []
            for j, col in enumerate(table.columns):
                cell = table.cell(row.key, col.key)
                if cell.bold:
                    bold.add((len(rows), j + 1))
                cells.append(cell.text(table.show_std))
            rows.append([row.label, *cells])
    return TableBlock(header, rows, ["l"] + ["r"] * len(table.columns), bold, group_rows, table.caption or "")


def reproduction_block(repro: Any) -> TableBlock:
    """The reproduction view (reports.reproduction): "ours / paper" with the direction, per cell."""
    header = ["System"] + [
        c.label + (f" {ARROWS[c.better]}" if c.better in ARROWS else "") for c in repro.columns
    ]
    rows = [
        [r.label, *[repro.cell(r.key, c.key).text(c.decimals) for c in repro.columns]] for r in repro.rows
    ]
    return TableBlock(header, rows, ["l"] + ["r"] * len(repro.columns), caption=repro.caption)


# ------------------------------------------------------------------------------------------ header facts
def manifest_facts(manifest: dict[str, Any], run_dir: Path | str) -> list[tuple[str, str]]:
    """The header lines of a report: run, status, profile, seeds, git, models per system, cache."""
    from bench.store import RunStore

    suite = manifest.get("suite") or {}
    git = manifest.get("git") or {}
    cells = list(RunStore(run_dir).iter_cells()) if RunStore(run_dir).exists() else []
    facts = [("run", str(manifest.get("run_id") or Path(run_dir).name))]
    finished = bool(manifest.get("finished"))
    if not finished:
        planned_cells = manifest.get("cells")
        planned = (
            f" of {len(planned_cells)} planned" if isinstance(planned_cells, dict) and planned_cells else ""
        )
        facts.append(
            (
                "status",
                f"PARTIAL: the run did not finish (killed or still running); {len(cells)} cell(s) on disk"
                f"{planned}; figures below are computed from those cells",
            )
        )
    if manifest.get("profile"):
        facts.append(("profile", str(manifest["profile"])))
    seeds = suite.get("seeds")
    if isinstance(seeds, list):
        facts.append(("seeds", ", ".join(str(s) for s in seeds)))
    if suite.get("samples") is not None:
        facts.append(("samples per cell", str(suite["samples"])))
    if git.get("commit"):
        facts.append(("git", f"{git['commit']}{' (dirty)' if git.get('dirty') else ''}"))
    if manifest.get("scale"):
        facts.append(("scale", str(manifest["scale"])))
    served = manifest.get("served_by") or {}
    for system, entry in served.items() if isinstance(served, dict) else []:
        if isinstance(entry, dict) and entry.get("text"):
            facts.append((f"served {system}", str(entry["text"])))
    used = roles_used_by_system(cells)
    scoring: dict[str, str] = {}
    roles = manifest.get("roles") or {}
    for key, spec in roles.items():
        if isinstance(spec, dict) and all(isinstance(v, dict) for v in spec.values()):
            # system -> role -> model spec (the runner's layout): one line per system, its own roles only
            mine = used.get(key)
            shown = {r: s for r, s in spec.items() if mine is None or r in mine}
            for r in SCORING_ROLES:
                if r in spec and mine is not None:
                    scoring.setdefault(r, model_name(spec[r]))
            text = ", ".join(f"{role}={model_name(s)}" for role, s in sorted(shown.items()))
            facts.append((f"models of {key}", text or "none (makes no model call)"))
        else:
            facts.append((f"role {key}", model_name(spec)))
    if scoring:
        facts.append(("scoring models", ", ".join(f"{r}={n}" for r, n in sorted(scoring.items()))))
    for k in ("created", "finished"):
        if manifest.get(k):
            facts.append((k, str(manifest[k])))
    cache = manifest.get("cache") or {}
    if finished and cache:
        facts.append(("cache", f"{cache.get('hits', 0)} hits, {cache.get('misses', 0)} misses"))
    elif cells:
        hits = sum(int(c.usage.get("cache_hits") or 0) for c in cells)
        misses = sum(int(c.usage.get("cache_misses") or 0) for c in cells)
        facts.append(("cache", f"{hits} hits, {misses} misses (from the {len(cells)} cell(s) on disk)"))
    return facts


def roles_used_by_system(cells: list[Any]) -> dict[str, set[str]]:
    """system -> roles its cells asked for while generating (usage.json "roles"); systems whose cells
    predate that record are absent, and then every role of the manifest is shown."""
    out: dict[str, set[str]] = {}
    for c in cells:
        roles = c.usage.get("roles") if isinstance(c.usage, dict) else None
        if isinstance(roles, list):
            out.setdefault(c.key.system, set()).update(str(r) for r in roles)
    return out


def model_name(spec: object) -> str:
    if isinstance(spec, dict):
        return str(spec.get("name") or spec.get("model") or "?")
    return str(spec)
