"""report.html: self-contained, escapes hostile strings, and loads in headless Chromium without console
errors while showing the expected rows (the sample browser is built by the page's own script)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.fixtures import write_run
from reports.html import write_report_html

HOSTILE_SYSTEM = "sys_&%$#{}~^\\<script>document.body.setAttribute('data-pwned','1')</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _hostile_run(tmp_path: Path) -> Path:
    system = HOSTILE_SYSTEM.replace("</script>", "")  # no "/" in a system name: it is a directory
    task = "task/<b>x</b>&"
    samples = {
        (system, task, 0): [
            {
                "text": "</script><script>document.body.setAttribute('data-pwned','2')</script>",
                "scored": {"status": "invalid_json", "tsr": False, "tsr_failures": ["not_parsed"]},
            },
            {"text": '{"name": "ok"}', "scored": {"status": "ok", "tsr": True}},
        ],
        ("llada", task, 1): [{"text": '{"name": "x"}', "scored": {"status": "ok", "tsr": True}}],
    }
    traces = {("llada", task, s): [{"iteration": i, "reward": 0.1 * i} for i in range(3)] for s in range(3)}
    return write_run(
        tmp_path / "run",
        {
            (system, task): {
                "tsr": [0.5, 0.6, 0.7],
                "similarity": [0.8, 0.82, 0.84],
                "diversity": [0.3, 0.4, 0.5],
            },
            ("llada", task): {
                "tsr": [0.1, 0.2, 0.3],
                "similarity": [0.6, 0.7, 0.65],
                "diversity": [0.6, 0.7, 0.8],
            },
        },
        samples=samples,
        traces=traces,
        failed={
            ("llada", task, 2): "<img src=x onerror=\"document.body.setAttribute('data-pwned','3')\"> crashed"
        },
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """One rendered report (plots take seconds to draw) shared by the tests of this module."""
    return write_report_html(_hostile_run(tmp_path_factory.mktemp("html")))


def test_report_html_is_self_contained_and_escaped(report):
    tmp_path = report.parent.parent
    page = report.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["'](https?:)?//""", page)  # nothing from the network
    assert page.count("<script") == 2  # our JSON data block and our script, nothing else
    assert "&lt;img src=x onerror=" in page and "<img src=x" not in page
    assert "data:image/png;base64," in page  # plots embedded
    assert (tmp_path / "run" / "plots" / "reward_curves.pdf").exists()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt: chromium)")
def test_report_loads_in_headless_chromium_without_console_errors(report, tmp_path):
    html = report
    proc = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    dom = proc.stdout
    body = re.search(r"<body[^>]*>", dom).group(0)  # attributes the page's script set at run time
    assert 'data-ready="1"' in body and "data-js-error" not in body and "data-pwned" not in body
    assert len(re.findall(r'<tr class="sample valid"', dom)) == 2
    assert len(re.findall(r'<tr class="sample invalid"', dom)) == 1
    assert "3 of 3 samples shown" in dom
    assert len(re.findall(r'<tr class="system-row"', dom)) == 2
    assert len(re.findall(r'<tr class="failed-cell"', dom)) == 1
    assert "sys_&amp;%$#{}~^\\&lt;script&gt;" in dom
    assert "task/&lt;b&gt;x&lt;/b&gt;&amp;" in dom and "<b>x</b>" not in dom
