"""What a newcomer reads after a run: a terminal report without Markdown escapes, a report.md without HTML
entities, intervals that respect a metric's range, plots with titles and captions, the validator's own
words in the sample browser, and a partial run that says it is partial."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
from scipy import stats as st

from bench.stats import Stat
from reports.aggregate import load_run, metric_bounds, summarize
from reports.fixtures import write_run
from reports.html import render_report_html, why_text
from reports.markdown import render_report_md
from reports.plots import plot_caption, write_plots
from reports.terminal import render_report_text

ROOT = Path(__file__).resolve().parents[1]


def _run(tmp_path: Path, manifest: dict | None = None, **kw) -> Path:
    expectations = [{"text": "ar_grammar.parse_rate > 0.3", "passed": True, "detail": "0.67 > 0.3"}]
    return write_run(
        tmp_path / "run",
        {
            ("ar_grammar", "demo/booking"): {"parse_rate": [1.0, 1.0, 0.02], "tsr": [0.5, 0.6, 0.7]},
            ("llada", "demo/booking"): {"parse_rate": [0.9, 0.95, 1.0], "tsr": [0.1, 0.2, 0.3]},
        },
        manifest={"expectations": expectations, **(manifest or {})},
        **kw,
    )


def test_terminal_report_has_no_markdown_escapes_or_entities(tmp_path):
    run = _run(tmp_path)
    text = render_report_text(run)
    assert "parse_rate" in text and "ar_grammar" in text and "0.67 > 0.3" in text
    for noise in ("\\_", "&gt;", "&lt;", "&amp;", "**", "| ---", "\\|"):
        assert noise not in text, noise
    # columns are aligned: every line of the first table has its seeds column at the same offset
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("system") and "task" in line)
    col = lines[header].index("seeds")
    assert all(lines[i][col - 1] == " " for i in (header + 2, header + 3))


def test_report_md_stays_markdown_without_html_entities(tmp_path):
    run = write_run(tmp_path / "r", {("a<b>&c", "t"): {"tsr": [0.5, 0.6]}})
    md = render_report_md(run)
    assert "&lt;" not in md and "&gt;" not in md and "&amp;" not in md
    assert "a\\<b\\>\\&c" in md  # CommonMark backslash escapes, rendered as the literal text


def test_terminal_report_strips_control_characters(tmp_path):
    run = write_run(tmp_path / "r", {("evil\x1b[2J", "t"): {"tsr": [0.5, 0.6]}})
    assert "\x1b" not in render_report_text(run)


def test_bench_run_prints_a_terminal_report(tmp_path):
    """End to end: the real CLI on the model-free `file` system prints no Markdown escapes."""
    gens = tmp_path / "gen.jsonl"
    gens.write_text('{"text": "{\\"name\\": \\"x\\"}"}\n' * 4, encoding="utf-8")
    suite = tmp_path / "s.yaml"
    suite.write_text(
        "name: readable\nseeds: 1\nsamples: 4\ntasks: [{name: demo/booking, n_references: 8, n_holdout: 8}]\n"
        f"systems: {{my_file: {{type: file, params: {{path: {gens}}}}}}}\n"
        "metrics: [parse_rate, schema_valid]\nexpect: ['my_file.parse_rate > 0.3']\n",
        encoding="utf-8",
    )
    out = subprocess.run(
        [sys.executable, "-m", "bench", "run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "BENCH_NO_HTML": "1"},
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "parse_rate" in out.stdout and "my_file" in out.stdout
    assert "\\_" not in out.stdout and "&gt;" not in out.stdout
    md = (tmp_path / "run" / "report.md").read_text(encoding="utf-8")
    assert "parse\\_rate" in md and "&gt;" not in md


def test_bounded_interval_clips_a_rate_to_its_range():
    values = [1.0, 1.0, 0.02]  # t-interval goes far below 0 and above 1
    raw = Stat.of(values).t_interval()
    assert raw[0] < 0 and raw[1] > 1
    lo, hi = Stat.of(values).bounded_interval((0.0, 1.0))
    assert (lo, hi) == (0.0, 1.0)
    # inside the range it is exactly the t-interval (scipy as the independent computation)
    inner = [0.4, 0.5, 0.6, 0.55]
    m, sem = np.mean(inner), st.sem(inner)
    ref = st.t.interval(0.95, len(inner) - 1, loc=m, scale=sem)
    got = Stat.of(inner).bounded_interval((0.0, 1.0))
    assert math.isclose(got[0], ref[0]) and math.isclose(got[1], ref[1])


def test_summary_csv_intervals_respect_metric_bounds(tmp_path):
    run = _run(tmp_path)
    summary = summarize(load_run(run))
    rates = summary[summary["metric"] == "parse_rate"].dropna(subset=["ci95_low"])
    assert len(rates) and (rates["ci95_low"] >= 0).all() and (rates["ci95_high"] <= 1).all()
    assert metric_bounds("bleu") == (0.0, 100.0) and metric_bounds("perplexity")[0] == 1.0


def test_plots_have_titles_axis_units_and_captions(tmp_path):
    run = _run(tmp_path)
    plots = write_plots(run)
    assert "bars_parse_rate" in plots
    title, caption = plot_caption("bars_parse_rate")
    assert title == "parse_rate by system"
    assert "clipped" in caption and "[0, 1]" in caption
    html = render_report_html(run, plots=plots)
    assert "<figcaption><b>parse_rate by system.</b>" in html
    assert ">bars_parse_rate<" not in html  # no file name as a caption
    import matplotlib

    matplotlib.use("Agg", force=True)
    from reports.plots import _pyplot, metric_bars

    plt = _pyplot()
    before = set(plt.get_fignums())
    # the drawn error bars stay within [0, 1]
    captured = {}
    orig = plt.Axes.bar

    def spy(self, x, h, *a, yerr=None, **k):
        captured["means"], captured["yerr"] = list(h), yerr
        return orig(self, x, h, *a, yerr=yerr, **k)

    plt.Axes.bar = spy
    try:
        metric_bars(load_run(run), "parse_rate", tmp_path / "p" / "bars")
    finally:
        plt.Axes.bar = orig
    lows = [m - lo for m, lo in zip(captured["means"], captured["yerr"][0], strict=True)]
    highs = [m + hi for m, hi in zip(captured["means"], captured["yerr"][1], strict=True)]
    assert min(lows) >= 0.0 and max(highs) <= 1.0
    assert set(plt.get_fignums()) == before


def test_sample_browser_shows_the_validators_message():
    scored = {
        "tsr_failures": ["schema_invalid"],
        "schema_messages": ["flight_number: 'SAS3' does not match '^[A-Z]{2}[0-9]{3,4}$'"],
    }
    assert why_text(scored) == "flight_number: 'SAS3' does not match '^[A-Z]{2}[0-9]{3,4}$'"
    assert why_text({"tsr_failures": ["not_parsed"]}) == "not_parsed"
    assert why_text({"tsr_failures": ["schema_invalid", "duplicate"], "schema_messages": ["a: b"]}) == (
        "duplicate; a: b"
    )


def test_html_sample_browser_filters_by_failure_kind(tmp_path):
    samples = {
        ("ar_grammar", "demo/booking", 0): [
            {
                "text": "{}",
                "scored": {
                    "status": "schema_invalid",
                    "tsr": False,
                    "tsr_failures": ["schema_invalid"],
                    "schema_messages": ["name: 'x' is too short"],
                },
            }
        ]
    }
    html = render_report_html(_run(tmp_path, samples=samples))
    assert 'id="f-kind"' in html and 'id="f-why"' in html
    data = html.split('id="sample-data">', 1)[1].split("</script>", 1)[0]
    rows = json.loads(data)
    assert rows[0]["why"] == "name: 'x' is too short" and rows[0]["kinds"] == ["schema_invalid"]


def test_partial_run_is_marked_and_counts_cache_from_cells(tmp_path):
    cache = {
        (s, "demo/booking", k): {"cache_hits": 3, "cache_misses": 1}
        for s in ("ar_grammar", "llada")
        for k in range(3)
    }
    run = _run(tmp_path, manifest={"finished": None, "cache": {"enabled": True}}, usage=cache)
    text = render_report_text(run)
    assert "PARTIAL" in text
    assert "18 hits, 6 misses (from the 6 cell(s) on disk)" in text
    assert "0 hits, 0 misses" not in text


def test_header_lists_only_the_roles_a_system_used(tmp_path):
    spec = {"name": "smollm2-135m"}
    roles = {
        "ar_grammar": {"generator": spec, "dlm": {"name": "embedded-mdlm"}, "embedder": {"name": "minilm"}},
        "llada": {"generator": spec, "dlm": {"name": "embedded-mdlm"}, "embedder": {"name": "minilm"}},
    }
    used = {
        (s, "demo/booking", k): {"roles": ["generator"] if s == "ar_grammar" else ["dlm"]}
        for s in ("ar_grammar", "llada")
        for k in range(3)
    }
    run = _run(tmp_path, manifest={"roles": roles}, usage=used)
    text = render_report_text(run)
    line_ar = next(line for line in text.splitlines() if line.startswith("models of ar_grammar"))
    line_llada = next(line for line in text.splitlines() if line.startswith("models of llada"))
    assert "generator=smollm2-135m" in line_ar and "dlm" not in line_ar
    assert "dlm=embedded-mdlm" in line_llada and "generator" not in line_llada
    assert "scoring models" in text and "embedder=minilm" in text


def test_quality_metrics_get_their_own_table_and_plot(tmp_path):
    from reports.latex import render_table_latex
    from reports.table import tables_for_run

    run = write_run(
        tmp_path / "q",
        {
            ("ar", "multiwoz/train"): {
                "tsr": [0.5, 0.6],
                "marginal_fidelity": [0.7, 0.8],
                "dcr_share_closer_to_train": [0.6, 0.7],
                "near_copy_rate": [0.1, 0.0],
            },
            ("llada", "multiwoz/train"): {
                "tsr": [0.2, 0.3],
                "marginal_fidelity": [0.5, 0.6],
                "dcr_share_closer_to_train": [0.9, 0.95],
                "near_copy_rate": [0.5, 0.4],
            },
        },
    )
    tables = {t.name: t for t in tables_for_run(run)}
    assert set(tables) == {"main", "quality"}
    assert [c.key for c in tables["main"].columns] == ["tsr"]
    assert [c.key for c in tables["quality"].columns] == [
        "marginal_fidelity",
        "dcr_share_closer_to_train",
        "near_copy_rate",
    ]
    assert "marginal\\_fidelity" in render_table_latex(tables["quality"])
    assert "Table quality" in render_report_md(run)
    plots = write_plots(run)
    assert "fidelity_privacy" in plots
    assert plot_caption("fidelity_privacy")[0] == "Fidelity against privacy"
