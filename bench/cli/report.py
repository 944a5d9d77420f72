"""`bench report RUN_DIR|RESULTS.json [--format latex|md|csv|html] [--table NAME]`.

Renders the tables a suite declares (`tables:`), or a default table of every system and metric, from a
run directory; or the tables of a published results file (reports/paper_results/*.json) through the
same pipeline. `html` writes RUN_DIR/report.html with plots (or the file `-o` names); the other formats
print (or write `-o`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="render a run's tables (LaTeX, Markdown, CSV) or its HTML report")
    p.add_argument(
        "source", help="run directory, or a results JSON file such as reports/paper_results/*.json"
    )
    p.add_argument("--format", choices=["latex", "md", "csv", "html"], default="md")
    p.add_argument("--table", action="append", help="only this table (repeatable; default: all)")
    p.add_argument(
        "--standalone", action="store_true", help="latex: a complete document that pdflatex compiles"
    )
    p.add_argument("--no-std", action="store_true", help="print means only (overrides the table's show_std)")
    p.add_argument("-o", "--out", help="write to this file instead of stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from bench.errors import BenchError
    from bench.store import atomic_write_text

    source = Path(args.source)
    is_run = source.is_dir()
    if not is_run and not (source.is_file() and source.suffix == ".json"):
        raise BenchError(f"{source}: neither a run directory nor a results .json file")
    if is_run and not (source / "manifest.json").exists() and not (source / "cells").exists():
        raise BenchError(f"{source}: not a run directory (no manifest.json, no cells/)")
    if args.format == "html":
        if not is_run:
            raise BenchError("--format html needs a run directory")
        if not args.out:
            from reports.html import write_report_html

            print(write_report_html(source))
            return 0
        # -o: the page goes there (plots are embedded in it); RUN_DIR/report.html is left as it is
        from reports.html import render_report_html
        from reports.plots import write_plots

        out = Path(args.out)
        atomic_write_text(out, render_report_html(source, plots=write_plots(source)))
        print(out)
        return 0

    from reports.table import tables_for_results, tables_for_run

    tables = tables_for_run(source, args.table) if is_run else tables_for_results(source, args.table)
    if args.no_std:
        for t in tables:
            t.show_std = False
    from reports.reproduction import build_reproduction

    repros = [build_reproduction(t, t.reproduces) for t in tables if getattr(t, "reproduces", None)]
    if args.format == "latex":
        from reports.latex import render_latex_document, render_reproduction_latex, render_table_latex

        extra = [render_reproduction_latex(r) for r in repros]
        text = (
            render_latex_document(tables, extra)
            if args.standalone
            else "\n".join([*(render_table_latex(t) for t in tables), *extra])
        )
    elif args.format == "md":
        from reports.markdown import render_reproduction_md, render_table_md

        text = "\n".join(
            [*(render_table_md(t) for t in tables), *(render_reproduction_md(r) for r in repros)]
        )
    else:
        from reports.csv_table import render_table_csv

        text = "".join(
            render_table_csv(t) if i == 0 else render_table_csv(t).split("\n", 1)[1]
            for i, t in enumerate(tables)
        )
    if args.out:
        atomic_write_text(Path(args.out), text, errors="replace")
        print(args.out, file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
