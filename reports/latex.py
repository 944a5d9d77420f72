"""LaTeX rendering of a table model: booktabs, grouped rows, arrows in headers, bold best, escaped text.

Why escape everything: system, task and caption strings come from suites users write, and one stray `_`,
`%` or `&` breaks a paper's build (or, with `\\input`, runs arbitrary TeX). Every string passes through
`latex_escape`; only the renderer's own markup is raw.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reports.table import Table, TableCell

if TYPE_CHECKING:
    from reports.reproduction import Reproduction

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "\u00b1": r"$\pm$",
    "\u2013": "--",
    "\u2014": "---",
    "\u00d7": r"$\times$",
    "\u25cb": r"$\circ$",
    "\u00b7": r"$\cdot$",
    "\u2191": r"$\uparrow$",
    "\u2193": r"$\downarrow$",
    "\u2020": r"$^\dagger$",
}
_ARROW = {"up": r"$\uparrow$", "down": r"$\downarrow$"}


def latex_escape(text: object) -> str:
    """Escape every TeX special character (and map ±, en and em dashes); newlines become spaces."""
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text).replace("\r", " ").replace("\n", " "))


def _cell_tex(cell: TableCell, show_std: bool) -> str:
    if cell.mark:
        return latex_escape(cell.text(show_std))
    if cell.missing:
        return "--"
    from reports.fmt import decimals_for, fmt_num

    d = cell.decimals if cell.decimals is not None else decimals_for(cell.mean)
    mean = fmt_num(cell.mean, d)
    if cell.bold:
        mean = rf"\textbf{{{mean}}}"
    partial = r"$^\dagger$" if cell.tasks else ""  # a mean over fewer tasks than the system ran
    if show_std and cell.std == cell.std:  # not NaN
        return rf"{mean}\,{{\scriptsize$\pm${fmt_num(cell.std, d)}}}{partial}"
    return mean + partial


def render_table_latex(table: Table, *, float_env: bool = True) -> str:
    """A `table` float (or bare tabular) with booktabs rules; paste it into a paper as is (the float
    shrinks a table wider than the line with graphicx's `\\resizebox`, so it needs `graphicx`)."""
    ncol = 1 + len(table.columns)
    header = [latex_escape(table.row_header)] + [
        latex_escape(c.label) + (f" {_ARROW[c.better]}" if c.better in _ARROW else "") for c in table.columns
    ]
    lines: list[str] = []
    if float_env:
        lines += [r"\begin{table}[t]", r"\centering", r"\small"]
        if table.caption:
            lines.append(rf"\caption{{{latex_escape(table.caption)}}}")
        if table.label:
            lines.append(rf"\label{{{latex_escape(table.label)}}}")
    if float_env:  # rows name the model that served them: long labels must not run off the page
        lines.append(r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%")
    lines += [rf"\begin{{tabular}}{{l{'r' * len(table.columns)}}}", r"\toprule", " & ".join(header) + r" \\"]
    grouped = len(table.groups) > 1 or any(g.label for g in table.groups)
    for group in table.groups:
        lines.append(r"\midrule")
        if grouped and group.label:
            lines.append(rf"\multicolumn{{{ncol}}}{{l}}{{\textit{{{latex_escape(group.label)}}}}} \\")
        for row in group.rows:
            cells = [_cell_tex(table.cell(row.key, c.key), table.show_std) for c in table.columns]
            lines.append(" & ".join([latex_escape(row.label), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if float_env:
        lines.append("}")
    if table.notes:
        lines.append(r"\par\smallskip{\footnotesize " + latex_escape(" ".join(table.notes)) + "}")
    if float_env:
        lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def render_reproduction_latex(repro: Reproduction) -> str:
    """The reproduction view as a `table*` float: "ours / paper ↑" per cell (booktabs, escaped)."""
    header = [latex_escape("System")] + [
        latex_escape(c.label) + (f" {_ARROW[c.better]}" if c.better in _ARROW else "") for c in repro.columns
    ]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\scriptsize",
        rf"\caption{{{latex_escape(repro.caption)}}}",
        r"\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{%",
        rf"\begin{{tabular}}{{l{'r' * len(repro.columns)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    for r in repro.rows:
        cells = [latex_escape(repro.cell(r.key, c.key).text(c.decimals)) for c in repro.columns]
        lines.append(" & ".join([latex_escape(r.label), *cells]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", "}"]
    lines.append(r"\par\smallskip{\footnotesize " + latex_escape(" ".join(repro.notes)) + "}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def render_latex_document(tables: list[Table], extra: list[str] | None = None) -> str:
    """A standalone article holding the tables: what `bench report --format latex --standalone` and the
    pdflatex test compile. Needs only texlive-latex-base + texlive-latex-recommended (booktabs)."""
    body = "\n".join([*(render_table_latex(t) for t in tables), *(extra or [])])
    return (
        "\\documentclass{article}\n"
        "\\usepackage[T1]{fontenc}\n"
        "\\usepackage[utf8]{inputenc}\n"
        "\\IfFileExists{lmodern.sty}{\\usepackage{lmodern}}{}\n"  # scalable fonts when installed
        "\\usepackage{booktabs}\n"
        "\\usepackage{graphicx}\n"  # \\resizebox: wide tables shrink to the text width
        "\\usepackage[margin=1.5cm,landscape]{geometry}\n"
        "\\begin{document}\n" + body + "\\end{document}\n"
    )
