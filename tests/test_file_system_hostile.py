"""Hostile generations and data files (issue 11, items 9, 10 and the /dev/zero part of 16).

A generations file is model output: every line is classified on its own, and one bad line never costs
the good ones. A re-encoded dataset file is a clear error naming the file and the byte offset.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from filesuite import bench, no_html  # noqa: F401 (autouse fixture)

from bench.cli import main
from bench.store import RunStore, read_jsonl
from bench.tasks import load_task

DATA = Path("/work/shared/datasets")


def _suite(tmp_path: Path, path: str, samples: int) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(
        f"""\
name: hostile
seeds: 1
samples: {samples}
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
systems:
  ext: {{type: file, params: {{path: "{path}"}}}}
metrics: [parse_rate, schema_valid]
"""
    )
    return p


def test_each_hostile_line_is_classified_on_its_own(tmp_path):
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    good = json.dumps({"record": spec.holdout[0]}).encode()
    deep = b"[" * 100_000 + b"]" * 100_000
    lines = [
        good,
        deep,  # a line nested 100,000 deep
        json.dumps({"text": deep.decode()}).encode(),  # the same, as a model's raw text
        b'{"text": "caf\xe9 au lait"}',  # latin-1 byte: not UTF-8
        b"42",
        b"null",
        b"[1,2,3]",
        b'{"text": "\\ud800 lone surrogate"}',
        good,
    ]
    gen = tmp_path / "gen.jsonl"
    gen.write_bytes(b"\n".join(lines) + b"\n")
    suite = _suite(tmp_path, str(gen), len(lines))
    out = tmp_path / "run"
    assert main(["run", str(suite), "--out", str(out), "--workers", "0", "--no-progress", "--no-cache"]) == 0
    (cell,) = RunStore(out).iter_cells()
    assert cell.status == "ok"
    rows = read_jsonl(cell.path / "samples.jsonl")
    assert len(rows) == len(lines)
    statuses = [r["scored"]["status"] for r in rows]
    assert statuses[0] == statuses[-1] == "ok"
    assert all(s != "ok" for s in statuses[1:-1]), statuses
    assert cell.metrics["parse_rate"] == pytest.approx(2 / len(lines))
    assert "invalid UTF-8" in rows[3]["meta"]["input_error"]
    assert rows[4]["text"] == "42" and rows[5]["text"] == "null" and rows[6]["text"] == "[1,2,3]"
    # the lone surrogate is stored (escaped) and the HTML report renders
    p = bench(tmp_path, "report", str(out), "--format", "html")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert (out / "report.html").read_text(encoding="utf-8")


def test_dev_zero_is_capped_not_read_until_memory_runs_out(tmp_path, capsys):
    suite = _suite(tmp_path, "/dev/zero", 4)
    assert main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--no-progress"]) == 1
    (cell,) = RunStore(tmp_path / "run").iter_cells()
    assert cell.status == "failed"
    assert "read more than 268435456 bytes from /dev/zero" in cell.record["error"]


def test_overlong_line_is_cut_and_scored_as_truncated(tmp_path):
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    gen = tmp_path / "gen.jsonl"
    gen.write_text('{"text": "' + "x" * 5000 + '"}\n' + json.dumps({"record": spec.holdout[0]}) + "\n")
    suite = _suite(tmp_path, str(gen), 2)
    suite.write_text(suite.read_text().replace('.jsonl"}}', '.jsonl", max_line_bytes: 1000}}'))
    assert main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--no-progress"]) == 0
    (cell,) = RunStore(tmp_path / "run").iter_cells()
    rows = read_jsonl(cell.path / "samples.jsonl")
    assert [r["scored"]["status"] for r in rows] == ["truncated", "ok"]
    assert len(rows[0]["text"]) == 1000


@pytest.mark.skipif(not (DATA / "self_instruct" / "seed_tasks.jsonl").exists(), reason="needs the datasets")
def test_latin1_seed_tasks_is_a_clear_error_in_run_and_score(tmp_path):
    data = tmp_path / "data"
    shutil.copytree(DATA / "self_instruct", data / "self_instruct")
    f = data / "self_instruct" / "seed_tasks.jsonl"
    text = f.read_text(encoding="utf-8")
    first_line = text.splitlines()[0]
    bad = first_line.replace('"instruction": "', '"instruction": "Caf\u00e9 ', 1)
    assert bad != first_line
    f.write_bytes((bad + "\n" + text.split("\n", 1)[1]).encode("latin-1", errors="replace"))
    offset = bad.encode("latin-1").index(b"\xe9")
    want = f"self_instruct/seed_tasks.jsonl: not UTF-8 (byte 0xe9 at byte offset {offset}, line 1)"

    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: l1\nseeds: 1\nsamples: 1\ntasks:\n  - {name: self_instruct}\n"
        'systems:\n  ext: {type: file, params: {path: "/nonexistent"}}\nmetrics: [parse_rate]\n'
    )
    p = bench(
        tmp_path, "run", str(suite), "--data-dir", str(data), "--out", str(tmp_path / "run"), "--no-progress"
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert want in p.stderr
    samples = tmp_path / "s.jsonl"
    samples.write_text('{"text": "{}"}\n')
    p = bench(tmp_path, "score", str(samples), "--task", "self_instruct", "--data-dir", str(data))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert want in p.stderr
