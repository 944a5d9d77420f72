"""The pytest plugin (top-level conftest.py): suite expectations become test items with JUnit properties."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from reports.fixtures import write_run

ROOT = Path(__file__).resolve().parents[1]

SUITE = """
name: plugin-check
profile: embedded
seeds: 3
samples: 4
tasks: [demo/booking]
systems:
  ar: {type: file, params: {path: "unused/{seed}.jsonl"}}
  llada: {type: file, params: {path: "unused/{seed}.jsonl"}}
metrics: [parse_rate, tsr]
expect:
  - ar.parse_rate > 0.5
  - llada.tsr > 0.9
  - ar.tsr > llada.tsr
"""


def test_expectations_become_items_with_readable_failures_and_junit_properties(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE, encoding="utf-8")
    run = write_run(
        tmp_path / "run",
        {
            ("ar", "demo/booking"): {"parse_rate": [0.9, 0.8, 1.0], "tsr": [0.6, 0.7, 0.8]},
            ("llada", "demo/booking"): {"parse_rate": [0.5, 0.4, 0.6], "tsr": [0.2, 0.3, 0.1]},
        },
        failed={("llada", "demo/booking", 2): "timeout after 600 s"},
    )
    junit = tmp_path / "junit.xml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={junit}",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            f"--bench-suite={suite}",
            f"--bench-run={run}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 failed, 2 passed" in out, out
    assert "expectation failed: llada.tsr > 0.9" in out
    assert "observed: llada.tsr = 0.25 > 0.9" in out  # mean of the two ok seeds
    assert "llada/demo/booking/seed-2: timeout after 600 s" in out
    root = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert set(cases) == {"ar.parse_rate > 0.5", "llada.tsr > 0.9", "ar.tsr > llada.tsr", "cells"}
    props = {p.get("name"): p.get("value") for p in cases["ar.tsr > llada.tsr"].iter("property")}
    assert abs(float(props["ar.tsr"]) - 0.7) < 1e-12 and abs(float(props["llada.tsr"]) - 0.25) < 1e-12
    assert props["run_dir"] == str(run)
    assert cases["cells"].find("failure") is not None


def test_bench_suite_runs_the_suite_through_the_runner(tmp_path):
    """Without --bench-run the plugin runs the suite itself (real runner, `file` system, real data)."""
    import json
    import os

    data = Path(os.environ.get("BENCH_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    db = data / "multiwoz_2.2" / "db" / "hotel_db.json"
    if not db.exists():
        import pytest

        pytest.skip("no data dir")
    hotels = json.loads(db.read_text(encoding="utf-8"))
    for seed in range(2):
        path = tmp_path / "gen" / f"{seed}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(json.dumps({"record": h}) + "\n" for h in hotels[seed : seed + 4]), encoding="utf-8"
        )
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: plugin-run\nseeds: 2\nsamples: 4\n"
        "tasks: [{name: multiwoz/hotel, n_references: 8, n_holdout: 8}]\n"
        f'systems:\n  gen: {{type: file, params: {{path: "{(tmp_path / "gen").as_posix()}/{{seed}}.jsonl"}}}}\n'
        "metrics: [parse_rate, field_overlap]\nexpect:\n  - gen.parse_rate == 1\n  - gen.field_overlap < 0.01\n",
        encoding="utf-8",
    )
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            f"--bench-suite={suite}",
            f"--bench-out={out}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "BENCH_DATA_DIR": str(data)},
    )
    text = proc.stdout + proc.stderr
    # copies of database records: parsed, but their fields overlap the references (memorization)
    assert "2 passed, 1 failed" in text or "1 failed, 2 passed" in text, text
    assert "expectation failed: gen.field_overlap < 0.01" in text
    # one process although the project's addopts ask for xdist workers (each would run the suite)
    assert "bringing up nodes" not in text and "created:" not in text, text
    assert (out / "report.md").exists() and (out / "manifest.json").exists()
