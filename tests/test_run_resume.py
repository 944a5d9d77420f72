"""End to end with the real SmolLM2 model: determinism per seed, and SIGKILL + resume == uninterrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.runner import RunOptions, run_suite
from bench.store import RunStore

pytestmark = [pytest.mark.slow, pytest.mark.integration]

SUITE = """\
name: resume-test
seeds: 3
samples: 2
tasks:
  - {name: demo/booking, n_references: 12, n_holdout: 8}
systems:
  ar: {type: ar, params: {temperature: 0.9, k_shots: 2, max_tokens: 96}}
metrics: [parse_rate, schema_valid, tsr]
expect:
  - ar.parse_rate >= 0.0
"""


@pytest.fixture()
def suite_file(tmp_path: Path) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(SUITE)
    return p


def cell_files(run_dir: Path, name: str) -> dict[str, str]:
    return {
        str(p.parent.relative_to(run_dir)): p.read_text() for p in sorted(run_dir.glob(f"cells/*/*/*/{name}"))
    }


def test_same_seed_same_bytes_other_seed_other_samples(suite_file, tmp_path):
    opts = dict(workers=0, use_cache=False, progress=False, cache_dir=str(tmp_path / "cache"))
    a = run_suite(suite_file, opts=RunOptions(out=str(tmp_path / "a"), **opts))
    b = run_suite(suite_file, opts=RunOptions(out=str(tmp_path / "b"), **opts))
    assert a.ok and b.ok
    sa, sb = cell_files(a.run_dir, "samples.jsonl"), cell_files(b.run_dir, "samples.jsonl")
    assert len(sa) == 3 and sa == sb  # byte-identical per seed
    texts = [[json.loads(line)["text"] for line in v.splitlines()] for v in sa.values()]
    assert texts[0] != texts[1] and texts[1] != texts[2]


def test_sigkill_then_resume_matches_uninterrupted(suite_file, tmp_path):
    cache = str(tmp_path / "cache")
    ref = run_suite(
        suite_file,
        opts=RunOptions(
            out=str(tmp_path / "ref"), workers=0, use_cache=False, progress=False, cache_dir=cache
        ),
    )
    run_dir = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "bench.cli",
        "run",
        str(suite_file),
        "--out",
        str(run_dir),
        "--no-cache",
        "--no-progress",
        "--workers",
        "1",
        "--cache-dir",
        cache,
    ]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A cell is finished once its cell.json, the last file it writes, is there (docs/architecture.md,
    # "Sealed cells"). Waiting for metrics.json instead let the kill land between the two writes under
    # load, and the test then counted an unsealed cell as finished.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(run_dir.glob("cells/*/*/*/cell.json")):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = cell_files(run_dir, "cell.json")
    finished = {c for c, text in before.items() if json.loads(text)["status"] == "ok"}
    assert 1 <= len(finished) < 3, "the kill should land after the first cell and before the last"

    resumed = run_suite(
        suite_file,
        opts=RunOptions(resume=str(run_dir), workers=0, use_cache=False, progress=False, cache_dir=cache),
    )
    assert resumed.skipped == len(finished)
    after = cell_files(run_dir, "cell.json")
    for cell in finished:  # finished cells were not re-run: their records are untouched
        assert after[cell] == before[cell]
    assert cell_files(run_dir, "samples.jsonl") == cell_files(ref.run_dir, "samples.jsonl")

    def strip(d):
        return {
            k: {m: v for m, v in json.loads(t).items() if m not in ("seconds", "records_per_s")}
            for k, t in d.items()
        }

    assert strip(cell_files(run_dir, "metrics.json")) == strip(cell_files(ref.run_dir, "metrics.json"))
    manifest = RunStore(run_dir).read_manifest()
    assert manifest["resumed"] and manifest["cell_status"]["skipped"] == len(finished)


def test_a_knob_added_at_its_inert_value_keeps_finished_cells_hashes():
    """`llada`'s `choice_temperature` came after cell hashes took the resolved params: unset, it stays
    out of them (so `--resume` of an older run skips its finished llada cells; measured on Table 1's
    run), and set, it enters, so a run with the knob never reuses a cell made without it."""
    from bench.cells import cell_hash, resolved_system_params
    from systems.llada import LLaDAParams

    plain = {"type": "llada", "params": {"steps": 12}}
    noisy = {"type": "llada", "params": {"steps": 12, "choice_temperature": 0.5}}
    resolved = resolved_system_params(plain)
    assert resolved == {
        k: v for k, v in LLaDAParams(steps=12).model_dump(mode="json").items() if k != "choice_temperature"
    }
    assert resolved_system_params(noisy)["choice_temperature"] == 0.5
    assert (
        resolved_system_params({"type": "llada", "params": {"choice_temperature": 0.0}})["choice_temperature"]
        == 0.0
    )

    def h(system: dict) -> str:
        return cell_hash(system, {}, {"name": "t"}, "fp", 0, 8, resolved_system_params(system))

    assert h(plain) != h(noisy)
