"""Honest tables: a failed cell, a pending system and a system not in the run each get their own mark
(explained in the notes); the caption's seed count comes from the run; every row names the model that
served it; the reproduction view sets our numbers beside the paper's Table 1 with the direction of each
difference, in Markdown, LaTeX (which compiles) and HTML."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.fmt import MARKS
from reports.html import render_report_html
from reports.latex import render_latex_document, render_reproduction_latex, render_table_latex
from reports.markdown import render_report_md, render_reproduction_md, render_table_md
from reports.reproduction import DOWN, SAME, UP, build_reproduction
from reports.table import tables_for_run

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "reports" / "paper_results" / "agents_of_diffusion_table1.json"

TABLE = {
    "name": "t1",
    "caption": "profile {profile}; mean over {seeds}",
    "reproduces": "agents_of_diffusion_table1.json",
    "groups": [
        {
            "label": "Autoregressive",
            "rows": [
                {"system": "ar-llama31-8b", "label": "LLaMA-3.1 8B"},
                {"system": "ar-qwen3-8b", "label": "Qwen-3 8B"},
            ],
        },
        {
            "label": "Diffusion",
            "rows": [
                {"system": "llada", "label": "LLaDA 8B"},
                {"system": "diffusion-lm", "label": "Diffusion-LM"},
                {"system": "aod", "label": "AoD"},
            ],
        },
    ],
    "columns": [
        {"metric": "similarity", "decimals": 2},
        {"metric": "perplexity", "decimals": 1},
        {"metric": "tsr", "decimals": 2},
    ],
}
SERVED = {
    "ar-llama31-8b": {
        "text": "embedded: SmolLM2-135M Q4_1, T 0.7",
        "notes": ["4-bit GGUF (Q4_1), as the paper's 4-bit LLaMA"],
    },
    "llada": {"text": "embedded: masked-diffusion LM trained on the task"},
}


def make_run(tmp_path: Path) -> Path:
    from reports.fixtures import write_run

    vals = {"similarity": [0.5, 0.7], "perplexity": [30.0, 10.0], "tsr": [0.9, 0.7]}
    return write_run(
        tmp_path / "run",
        {
            ("ar-llama31-8b", "a"): vals,
            ("ar-llama31-8b", "b"): vals,
            ("llada", "a"): {"similarity": [0.1, 0.1], "perplexity": [5.0, 5.0], "tsr": [0.0, 0.0]},
        },
        failed={("llada", "a", 0): "RuntimeError: boom", ("llada", "a", 1): "RuntimeError: boom"},
        manifest={
            "suite": {"pending": {"diffusion-lm": "Li et al. 2022"}},
            "profile": "embedded",
            "served_by": SERVED,
        },
        tables=[TABLE],
    )


def test_three_kinds_of_missing_get_three_marks_and_a_footnote(tmp_path):
    (table,) = tables_for_run(make_run(tmp_path))
    assert table.cell("llada", "tsr").mark == "failed"  # ran, both seeds failed
    assert table.cell("diffusion-lm", "tsr").mark == "pending"  # declared pending in the suite
    assert table.cell("ar-qwen3-8b", "tsr").mark == "not_run"  # neither run nor pending
    assert table.cell("aod", "tsr").mark == "not_run"
    assert table.cell("ar-llama31-8b", "tsr").mark is None
    assert len({MARKS["failed"], MARKS["pending"], MARKS["not_run"]}) == 3
    md = render_table_md(table)
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("|")}
    assert MARKS["failed"] in rows["LLaDA 8B (embedded: masked-diffusion LM trained on the task)"]
    assert MARKS["pending"] in rows["Diffusion-LM"] and MARKS["not_run"] in rows["Qwen-3 8B"]
    notes = " ".join(table.notes)
    for mark in MARKS.values():
        assert f"{mark}: " in notes  # each mark is explained
    tex = render_table_latex(table)
    assert r"$\times$" in tex and r"$\circ$" in tex and " n/r " in tex


def test_caption_seed_count_and_served_model_come_from_the_run(tmp_path):
    (table,) = tables_for_run(make_run(tmp_path))
    assert table.caption == "profile embedded; mean over 2 seeds"
    labels = [r.label for r in table.rows()]
    assert labels[0] == "LLaMA-3.1 8B (embedded: SmolLM2-135M Q4_1, T 0.7)"
    assert any("Stand-ins: ar-llama31-8b: 4-bit GGUF" in n for n in table.notes)


def test_reproduction_directions_match_an_independent_comparison(tmp_path):
    (table,) = tables_for_run(make_run(tmp_path))
    repro = build_reproduction(table, table.reproduces)
    paper = {r["system"]: r["values"] for r in json.loads(PAPER.read_text())["systems"]}
    # ours for LLaMA: similarity 0.6, perplexity 20.0, tsr 0.8 (means over 2 seeds and 2 tasks)
    ours = {"similarity": 0.6, "perplexity": 20.0, "tsr": 0.8}
    decimals = {"similarity": 2, "perplexity": 1, "tsr": 2}
    better_up = {"similarity": True, "perplexity": False, "tsr": True}
    for metric, mine in ours.items():
        theirs = paper["ar-llama31-8b"][metric]
        cell = repro.cell("ar-llama31-8b", metric)
        a, b = round(mine, decimals[metric]), round(theirs, decimals[metric])
        want = SAME if a == b else UP if a > b else DOWN
        assert cell.direction == want
        if want != SAME:
            assert cell.better == ((a > b) == better_up[metric])
        assert cell.text(decimals[metric]).startswith(f"{a:.{decimals[metric]}f} / {b:.{decimals[metric]}f}")
    assert repro.cell("ar-qwen3-8b", "tsr").direction == ""  # not run, and not given by the paper
    assert repro.cell("llada", "tsr").text(2).startswith(MARKS["failed"] + " / ")
    md = render_reproduction_md(repro)
    assert "ours / published" in md and "LLaMA-3.1 8B" in md


def test_reproduction_is_in_report_md_and_report_html(tmp_path):
    run = make_run(tmp_path)
    md = render_report_md(run)
    assert "## Reproduction of Agents of Diffusion" in md
    page = render_report_html(run)
    assert 'id="repro-t1"' in page and "repro-row" in page
    assert 'class="worse"' in page or 'class="better"' in page


def _assert_compiles(tex: str, where: Path) -> None:
    """pdflatex builds `tex` in `where` without an error (the PDF lands there as t.pdf)."""
    (where / "t.tex").write_text(tex, encoding="utf-8")
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "t.tex"],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_table_and_reproduction_latex_compile(tmp_path):
    run = make_run(tmp_path)
    tables = tables_for_run(run)
    tex = render_latex_document(
        tables, [render_reproduction_latex(build_reproduction(tables[0], PAPER.name))]
    )
    _assert_compiles(tex, tmp_path)
    assert (tmp_path / "t.pdf").stat().st_size > 1000


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
def test_a_mean_over_fewer_tasks_than_the_system_ran_is_marked_and_never_bold(tmp_path):
    """`llada` parses nothing on task b, so its similarity there is NaN: the macro mean is task a's
    alone. Printed bare, 0.9 would beat LLaMA's 0.6 over both tasks, although on b llada gave nothing."""
    from reports.fixtures import write_run
    from reports.fmt import PARTIAL_MARK

    nan = float("nan")
    run = write_run(
        tmp_path / "run",
        {
            ("ar-llama31-8b", "a"): {"similarity": [0.6, 0.6, 0.6], "tsr": [0.5, 0.5, 0.5]},
            ("ar-llama31-8b", "b"): {"similarity": [0.6, 0.6, 0.6], "tsr": [0.5, 0.5, 0.5]},
            ("llada", "a"): {"similarity": [0.9, 0.9, 0.9], "tsr": [0.1, 0.1, 0.1]},
            ("llada", "b"): {"similarity": [nan, nan, nan], "tsr": [0.0, 0.0, 0.0]},
        },
        manifest={"profile": "embedded"},
        tables=[TABLE],
    )
    table = tables_for_run(run)[0]
    sim = table.cell("llada", "similarity")
    assert sim.tasks == (1, 2) and sim.mean == pytest.approx(0.9)
    assert sim.text(False).endswith(PARTIAL_MARK) and "defined on 1 of the 2 tasks" in sim.provenance
    assert not sim.bold  # a partial mean is not compared for the best value
    assert table.cell("llada", "tsr").tasks is None  # defined on both tasks: no mark
    assert table.cell("ar-llama31-8b", "similarity").tasks is None
    assert any(n.startswith(PARTIAL_MARK) for n in table.notes)
    assert PARTIAL_MARK in render_table_md(table)
    tex = render_latex_document([table])
    assert r"0.90\,{\scriptsize$\pm$0.00}$^\dagger$" in tex
    _assert_compiles(tex, tmp_path)
