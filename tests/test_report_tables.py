"""The table model: `tables:` spec validation, the significance bold rule, CSV/Markdown, `bench report`."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as st

from bench.cli import main
from bench.errors import BenchError
from reports.csv_table import render_table_csv
from reports.fixtures import write_run
from reports.markdown import render_table_md
from reports.table import parse_tables, tables_for_run

ROOT = Path(__file__).resolve().parents[1]
TABLE = {
    "name": "main",
    "caption": "Main results",
    "label": "tab:main",
    "groups": [
        {"label": "Autoregressive", "rows": ["ar"]},
        {"label": "Ours", "rows": [{"system": "aod", "label": "AoD"}]},
    ],
    "columns": [{"metric": "tsr", "label": "TSR", "decimals": 2}, "field_overlap"],
}


def test_spec_errors_name_the_table_and_key():
    with pytest.raises(BenchError, match=r"tables\[0\].*exactly one of `rows` or `groups`"):
        parse_tables([{"name": "x", "columns": ["tsr"]}])
    with pytest.raises(BenchError, match=r"tables\[0\]\.colums"):
        parse_tables([{"name": "x", "rows": ["a"], "columns": ["tsr"], "colums": []}])
    with pytest.raises(BenchError, match="duplicate table"):
        parse_tables([{"name": "x", "rows": ["a"], "columns": ["tsr"]}] * 2)


def _run(tmp_path, aod_tsr, ar_tsr, name="run"):
    return write_run(
        tmp_path / name,
        {
            ("ar", "truthfulqa"): {"tsr": ar_tsr, "field_overlap": [0.40, 0.41, 0.39, 0.40, 0.42]},
            ("aod", "truthfulqa"): {"tsr": aod_tsr, "field_overlap": [0.30, 0.29, 0.31, 0.30, 0.28]},
        },
        tables=[TABLE],
    )


def test_best_is_bold_only_when_significantly_better(tmp_path):
    ar = [0.60, 0.62, 0.58, 0.61, 0.59]
    clear = tables_for_run(_run(tmp_path, [0.70, 0.72, 0.69, 0.71, 0.70], ar, "clear"))[0]
    p = st.ttest_rel([0.70, 0.72, 0.69, 0.71, 0.70], ar).pvalue
    assert p < 0.05
    assert clear.cell("aod", "tsr").bold and not clear.cell("ar", "tsr").bold
    assert clear.cell("aod", "field_overlap").bold  # lower is better, and clearly lower
    noisy_aod = [0.70, 0.55, 0.66, 0.52, 0.64]  # higher mean, but not significantly
    assert st.ttest_rel(noisy_aod, ar).pvalue > 0.05 and np.mean(noisy_aod) > np.mean(ar)
    noisy = tables_for_run(_run(tmp_path, noisy_aod, ar, "noisy"))[0]
    assert not noisy.cell("aod", "tsr").bold and not noisy.cell("ar", "tsr").bold


def test_csv_and_markdown_show_the_same_cells(tmp_path):
    table = tables_for_run(_run(tmp_path, [0.70, 0.72, 0.69, 0.71, 0.70], [0.60, 0.62, 0.58, 0.61, 0.59]))[0]
    rows = list(csv.DictReader(io.StringIO(render_table_csv(table))))
    assert len(rows) == 4
    aod = next(r for r in rows if r["system"] == "aod" and r["metric"] == "tsr")
    assert float(aod["mean"]) == pytest.approx(0.704) and aod["bold"] == "1" and aod["group"] == "Ours"
    assert float(aod["std"]) == pytest.approx(np.std([0.70, 0.72, 0.69, 0.71, 0.70], ddof=1))
    assert "macro mean over all tasks; 5 seed(s)" in aod["provenance"]
    md = render_table_md(table)
    assert "| AoD | **0.70 \u00b1 0.01** |" in md
    assert "TSR \u2191" in md and "field\\_overlap \u2193" in md


def test_bench_report_formats(tmp_path, capsys):
    run = _run(tmp_path, [0.70, 0.72, 0.69, 0.71, 0.70], [0.60, 0.62, 0.58, 0.61, 0.59])
    assert main(["report", str(run), "--format", "latex"]) == 0
    assert r"\label{tab:main}" in capsys.readouterr().out
    assert main(["report", str(run), "--format", "csv", "--table", "main"]) == 0
    assert capsys.readouterr().out.startswith("table,group,system")
    assert main(["report", str(run), "--table", "nope"]) == 2  # a user error, with the known names
    assert "no table 'nope'" in capsys.readouterr().err
    paper = ROOT / "reports" / "paper_results" / "agents_of_diffusion_table1.json"
    assert main(["report", str(paper), "--format", "md"]) == 0
    assert "| AoD | **0.88** |" in capsys.readouterr().out
    assert main(["report", str(run), "--format", "html"]) == 0
    assert (run / "report.html").exists()


def test_table1_suite_lays_out_every_row_of_the_paper():
    import json

    from bench.suite import load_suite

    suite = load_suite(ROOT / "suites" / "table1.yaml").suite
    (spec,) = parse_tables(suite.tables)
    paper = json.loads((ROOT / "reports" / "paper_results" / "agents_of_diffusion_table1.json").read_text())
    assert spec.systems() == [r["system"] for r in paper["systems"]]
    assert [c.metric for c in spec.columns] == paper["metrics"]
    assert suite.profile == "embedded" and len(suite.tasks) == 4
    paper_suite = load_suite(ROOT / "suites" / "table1.yaml", {"profile": "paper"}).suite
    assert paper_suite.seed_list() == list(range(15)) and paper_suite.samples == 32  # the paper's scale
    assert set(suite.pending) == set(spec.systems()) - set(suite.systems)  # every row is run or pending
