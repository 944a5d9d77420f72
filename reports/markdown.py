"""Markdown output: the per-run `report.md` the runner writes at the end of every run, and Markdown tables.

report.md is the first thing a user opens after `bench run`, so it shows, per (system, task), every suite
metric as mean ± sample std over seeds with the number of seeds, NaN as a dash, the per-system macro mean
(as in the paper's tables) and every failed cell with its reason. Every user string is escaped: system and
task names come from suites and may hold Markdown or HTML syntax.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    write_results_csv,
)
from reports.fmt import fmt_mean_std

if TYPE_CHECKING:
    from reports.reproduction import Reproduction
    from reports.table import Table

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]#|~^$])")
_ARROW = {"up": "\u2191", "down": "\u2193"}


def md_escape(text: object) -> str:
    """Escape Markdown punctuation with backslashes and HTML's <, >, & as entities; newlines become spaces."""
    s = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return s.replace("\r", " ").replace("\n", " ")


def md_table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table from already-escaped cell strings."""
    align = align or ["l"] + ["r"] * (len(header) - 1)
    rule = [":---" if a == "l" else "---:" if a == "r" else ":---:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def metric_header(name: str) -> str:
    arrow = _ARROW.get(metric_better(name) or "", "")
    return md_escape(name) + (f" {arrow}" if arrow else "")


def render_report_md(run_dir: Path | str) -> str:
    """The text of report.md for RUN_DIR (see module docstring)."""
    manifest = read_manifest(run_dir)
    df = load_run(run_dir)
    metrics = metric_order(df)
    suite = manifest.get("suite") or {}
    title = suite.get("name") or Path(run_dir).name
    out: list[str] = [f"# Run report: {md_escape(title)}\n"]
    facts = _manifest_facts(manifest, run_dir)
    out.append("\n".join(f"- **{k}**: {md_escape(v)}" for k, v in facts) + "\n")

    cells = cell_stats(df)
    pairs = [tuple(p.split("\x00")) for p in unique_in_order(f"{s}\x00{t}" for s, t, _ in cells)]
    declared = [m for m in suite_metric_names(manifest) if m in metrics]
    main = declared or metrics
    other = [m for m in metrics if m not in main]
    if not pairs:
        out.append("\n_No cells in this run yet._\n")
    else:
        out.append("\n## Per system and task (mean \u00b1 std over seeds)\n\n")
        out.append(_cell_table(cells, pairs, main))
        sys_stats = system_stats(df)
        systems = unique_in_order(s for s, _ in sys_stats)
        out.append("\n## Per system (macro mean over tasks; mean \u00b1 std over seeds)\n\n")
        header = ["system", "seeds", *[metric_header(m) for m in main]]
        rows = []
        for s in systems:
            n = max((sys_stats[(s, m)][0].n for m in main if (s, m) in sys_stats), default=0)
            vals = [
                fmt_mean_std(sys_stats[(s, m)][0].mean, sys_stats[(s, m)][0].std)
                if (s, m) in sys_stats
                else fmt_mean_std(None, None)
                for m in main
            ]
            rows.append([md_escape(s), str(n), *vals])
        out.append(md_table(header, rows, ["l", "r", *["r"] * len(main)]))
        if other:
            out.append("\n## Efficiency and other values (per system and task)\n\n")
            out.append(_cell_table(cells, pairs, other))

    if pairs and suite.get("tables"):
        from reports.table import tables_for_run

        for table in tables_for_run(run_dir):
            out.append(f"\n## Table {md_escape(table.name)}\n\n{render_table_md(table)}")
            out.append("\n" + md_escape(" ".join(table.notes)) + "\n")
            if table.reproduces:
                from reports.reproduction import build_reproduction

                repro = build_reproduction(table, table.reproduces)
                out.append(
                    f"\n## Reproduction of {md_escape(repro.source)}\n\n{render_reproduction_md(repro)}"
                )

    expectations = [e for e in manifest.get("expectations") or [] if isinstance(e, dict)]
    if expectations:
        passed = sum(bool(e.get("passed")) for e in expectations)
        skipped = sum(bool(e.get("skipped")) for e in expectations)
        counts = f"{passed} passed, {len(expectations) - passed - skipped} failed"
        out.append(f"\n## Expectations ({counts}{f', {skipped} skipped' if skipped else ''})\n\n")
        for e in expectations:
            mark = "SKIP" if e.get("skipped") else "PASS" if e.get("passed") else "FAIL"
            out.append(f"- {mark} `{md_code(e.get('text', ''))}`: {md_escape(e.get('detail', ''))}\n")

    failed = failed_cells(run_dir)
    out.append(f"\n## Failed cells ({len(failed)})\n\n")
    if not failed:
        out.append("None.\n")
    else:
        for f in failed:
            out.append(
                f"- `{md_code(f['system'])}` / `{md_code(f['task'])}` / seed {f['seed']} "
                f"({md_escape(f['status'])}): {md_escape(f['error'])}\n"
            )
    out.append(
        "\nNaN (a metric undefined for every seed, e.g. no parsed record) is shown as \u2013. "
        "Failed cells are harness or system failures and never enter a mean.\n"
    )
    return "".join(out)


def _cell_table(cells: dict, pairs: list[tuple[str, ...]], metrics: list[str]) -> str:
    """Markdown table: one row per (system, task), one column per metric, with seed counts."""
    header = ["system", "task", "seeds", *[metric_header(m) for m in metrics]]
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
        rows.append([md_escape(s), md_escape(t), seeds, *vals])
    return md_table(header, rows, ["l", "l", "r", *["r"] * len(metrics)])


def md_code(text: object) -> str:
    """Text for inside a `code span`: backticks cannot be escaped there, so they become quotes."""
    return str(text).replace("`", "'").replace("\n", " ")


def _manifest_facts(manifest: dict[str, Any], run_dir: Path | str) -> list[tuple[str, str]]:
    suite = manifest.get("suite") or {}
    git = manifest.get("git") or {}
    facts = [("run", str(manifest.get("run_id") or Path(run_dir).name))]
    if manifest.get("profile"):
        facts.append(("profile", str(manifest["profile"])))
    seeds = suite.get("seeds")
    if isinstance(seeds, list):
        facts.append(("seeds", ", ".join(str(s) for s in seeds)))
    if suite.get("samples") is not None:
        facts.append(("samples per cell", str(suite["samples"])))
    if manifest.get("scale"):
        facts.append(("scale", str(manifest["scale"])))
    served = manifest.get("served_by") or {}
    for system, entry in served.items() if isinstance(served, dict) else []:
        if isinstance(entry, dict) and entry.get("text"):
            facts.append((f"served {system}", str(entry["text"])))
    if git.get("commit"):
        facts.append(("git", f"{git['commit']}{' (dirty)' if git.get('dirty') else ''}"))
    roles = manifest.get("roles") or {}
    for key, spec in roles.items():
        if isinstance(spec, dict) and all(isinstance(v, dict) for v in spec.values()):
            # system -> role -> model spec (the runner's layout): one line per system
            used = ", ".join(f"{role}={_model_name(s)}" for role, s in sorted(spec.items()))
            facts.append((f"models of {key}", used))
        else:
            facts.append((f"role {key}", _model_name(spec)))
    for k in ("created", "finished"):
        if manifest.get(k):
            facts.append((k, str(manifest[k])))
    cache = manifest.get("cache") or {}
    if cache:
        facts.append(("cache", f"{cache.get('hits', 0)} hits, {cache.get('misses', 0)} misses"))
    return facts


def _model_name(spec: object) -> str:
    if isinstance(spec, dict):
        return str(spec.get("name") or spec.get("model") or "?")
    return str(spec)


def write_report_md(run_dir: Path | str) -> str:
    """Write RUN_DIR/report.md (and results.csv next to it) and return the Markdown text.

    The runner calls this at the end of every run; it never raises on a run with failed or missing cells.
    """
    from bench.store import atomic_write_text

    text = render_report_md(run_dir)
    atomic_write_text(Path(run_dir) / "report.md", text)
    write_results_csv(run_dir)
    return text


def render_table_md(table: Table) -> str:
    """Markdown rendering of a table model (same cells, bold and arrows as the LaTeX one)."""
    header = [md_escape(table.row_header)] + [
        md_escape(c.label) + (f" {_ARROW[c.better]}" if c.better in _ARROW else "") for c in table.columns
    ]
    rows: list[list[str]] = []
    for group in table.groups:
        if group.label and len(table.groups) > 1:
            rows.append([f"*{md_escape(group.label)}*"] + [""] * len(table.columns))
        for row in group.rows:
            cells = []
            for col in table.columns:
                cell = table.cell(row.key, col.key)
                text = cell.text(table.show_std)
                cells.append(f"**{text}**" if cell.bold else text)
            rows.append([md_escape(row.label), *cells])
    out = ""
    if table.caption:
        out += f"**{md_escape(table.caption)}**\n\n"
    return out + md_table(header, rows)


def render_reproduction_md(repro: Reproduction) -> str:
    """Markdown of the reproduction view: "ours / paper ↑" per cell, then its notes."""
    header = [md_escape("System")] + [
        md_escape(c.label) + (f" {_ARROW[c.better]}" if c.better in _ARROW else "") for c in repro.columns
    ]
    rows = [
        [md_escape(r.label), *[md_escape(repro.cell(r.key, c.key).text(c.decimals)) for c in repro.columns]]
        for r in repro.rows
    ]
    out = f"**{md_escape(repro.caption)}**\n\n" + md_table(header, rows)
    return out + "\n" + md_escape(" ".join(repro.notes)) + "\n"
