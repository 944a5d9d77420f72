"""The run goes on when a cell fails or hangs; failures are recorded with reasons; exit code says so.

Uses the `file` system (external generations), so no model is needed: the runner, executor, store,
scoring and expectations are all the real code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.cli import main
from bench.runner import RunOptions, run_suite
from bench.store import RunStore
from bench.tasks import load_task


def suite_text(gen_dir: Path, extra: str = "") -> str:
    return f"""\
name: file-suite
seeds: 2
samples: 4
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
systems:
  ext: {{type: file, params: {{path: "{gen_dir}/{{task_dir}}/{{seed}}.jsonl"}}}}
metrics: [parse_rate, schema_valid, tsr]
expect:
  - ext.parse_rate > 0.5
  - ext.schema_valid >= 0.25
{extra}"""


def write_generations(gen_dir: Path, seeds: list[int]) -> None:
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    d = gen_dir / "demo__booking"
    d.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        rows = [
            {"record": dict(spec.holdout[seed])},  # valid, unseen
            {"text": "```json\n" + json.dumps(spec.holdout[seed + 2]) + "\n```"},  # valid in a fence
            {"text": '{"broken": '},  # not JSON
            {"record": {"unexpected": 1}},
        ]  # parses, violates the schema
        (d / f"{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_file_system_scores_external_generations(tmp_path):
    gen = tmp_path / "gen"
    write_generations(gen, [0, 1])
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text(gen))
    res = run_suite(suite, opts=RunOptions(out=str(tmp_path / "run"), workers=0, progress=False))
    assert res.ok, (res.failed_cells, res.expectations)
    for cell in RunStore(res.run_dir).iter_cells():
        assert cell.metrics["parse_rate"] == pytest.approx(0.75)
        assert cell.metrics["schema_valid"] == pytest.approx(0.5)
    assert (res.run_dir / "report.md").exists()


def test_missing_file_fails_only_that_cell_and_exit_code(tmp_path, capsys):
    gen = tmp_path / "gen"
    write_generations(gen, [0])  # seed 1 has no file
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text(gen))
    code = main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED cell ext/demo/booking/seed-1: BenchError: file system: no generations" in out
    cells = {c.key.seed: c for c in RunStore(tmp_path / "run").iter_cells()}
    assert cells[0].status == "ok" and cells[1].status == "failed"
    assert "no generations" in cells[1].record["error"]
    assert out.strip().splitlines()[-1] == "2 passed, 0 failed; 1 of 2 cells failed"


def test_hanging_cell_times_out_in_worker_and_run_goes_on(tmp_path):
    gen = tmp_path / "gen"
    write_generations(gen, [0])
    os.mkfifo(gen / "demo__booking" / "1.jsonl")  # opening a FIFO with no writer blocks forever
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text(gen, "timeout_s: 20\n"))
    res = run_suite(suite, opts=RunOptions(out=str(tmp_path / "run"), workers=1, progress=False))
    status = {o.key.seed: (o.status, o.error) for o in res.outcomes}
    assert status[0][0] == "ok"
    assert status[1] == ("failed", "timeout after 20s")
    manifest = RunStore(res.run_dir).read_manifest()
    assert manifest["cell_status"]["failed"] == 1 and manifest["finished"]


def test_expectations_on_systems_left_out_of_a_subset_run_are_skipped(tmp_path, capsys):
    gen = tmp_path / "gen"
    write_generations(gen, [0, 1])
    suite = tmp_path / "s.yaml"
    extra = (
        "  - ext.parse_rate >= other.parse_rate\n"
        "  - ext[demo/booking].tsr >= 0\n"
        "  - ext[multiwoz/train].tsr >= 0\n"
        "  - ext[demo/bookings].tsr >= 0\n"  # a typo, not a left-out task: it still fails
    )
    text = suite_text(gen, extra).replace(
        "systems:\n", 'systems:\n  other: {type: file, params: {path: "/nonexistent/{seed}.jsonl"}}\n'
    )
    text = text.replace("tasks:\n", "tasks:\n  - {name: multiwoz/train, n_references: 12, n_holdout: 8}\n")
    suite.write_text(text)
    args = ["run", str(suite), "--systems", "ext", "--tasks", "demo/booking", "--out", str(tmp_path / "run")]
    code = main([*args, "--workers", "0", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 1  # only because of the typo
    assert (
        "SKIPPED ext.parse_rate >= other.parse_rate  (not evaluated: system 'other' left out of this run)"
        in out
    )
    assert "SKIPPED ext[multiwoz/train].tsr >= 0  (not evaluated: task 'multiwoz/train' left out" in out
    assert "FAILED ext[demo/bookings].tsr >= 0" in out
    assert out.strip().splitlines()[-1] == "3 passed, 1 failed, 2 skipped"
    report = (tmp_path / "run" / "report.md").read_text()
    assert "## Expectations (3 passed, 1 failed, 2 skipped)" in report and "- SKIP `ext.parse_rate" in report
