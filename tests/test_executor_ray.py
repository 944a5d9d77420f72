"""The Ray executor on a real local Ray cluster that the test starts (`ray start --head` on loopback, two
worker CPUs): results identical to the local executor, resume across executors, a killed Ray worker
becomes a failed cell with its reason, and a cell whose models need a GPU the cluster lacks fails at once
with that reason instead of waiting forever."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from bench.runner import RunOptions, run_suite  # noqa: E402
from bench.store import RunStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TIMING_KEYS = {"seconds", "records_per_s"}  # wall-clock figures differ between any two runs
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster(tmp_path_factory):
    """A fresh cluster per test: a killed worker or a cancelled task leaves nothing for the next test."""
    ray_bin = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # workers import this checkout, as the driver does
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "disabled",  # no token file: a test cluster on loopback, started and stopped here
    }
    temp = tmp_path_factory.mktemp("ray")
    start = [
        ray_bin,
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        f"--port={port}",
        "--num-cpus=2",
        "--num-gpus=0",
        "--include-dashboard=false",
        "--disable-usage-stats",
        f"--temp-dir={temp}",
    ]
    out = subprocess.run(start, env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    address = f"127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_AUTH_MODE", "BENCH_RAY_NODE_IP")}
    os.environ.update(RAY_ADDRESS=address, RAY_AUTH_MODE="disabled", BENCH_RAY_NODE_IP="127.0.0.1")
    try:
        yield address
    finally:
        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([ray_bin, "stop", "--force"], env=env, capture_output=True, timeout=120)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _suite(tmp_path: Path, gens: dict[str, str], seeds: int = 2, extra: str = "") -> Path:
    systems = ", ".join(f"{name}: {{type: file, params: {{path: '{path}'}}}}" for name, path in gens.items())
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"name: ray-test\nseeds: {seeds}\nsamples: 4\n"
        "tasks: [{name: demo/booking, n_references: 8, n_holdout: 8}]\n"
        f"systems: {{{systems}}}\n{extra}"
        "metrics: [parse_rate, schema_valid, tsr, diversity, field_overlap]\n",
        encoding="utf-8",
    )
    return suite


def _generations(tmp_path: Path) -> dict[str, str]:
    from bench.cells import load_task_cached

    spec = load_task_cached({"name": "demo/booking", "n_references": 8, "n_holdout": 8}, None)
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps({"record": r}) + "\n" for r in spec.holdout), encoding="utf-8")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        '{"text": "not json"}\n' + json.dumps({"record": spec.holdout[0]}) + "\n", encoding="utf-8"
    )
    return {"good": str(good), "mixed": str(mixed)}


def _cell_files(run: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for cell in RunStore(run).iter_cells():
        label = cell.key.label()
        out[f"{label}/samples"] = (cell.path / "samples.jsonl").read_bytes()
        out[f"{label}/status"] = cell.status
        out[f"{label}/metrics"] = {k: v for k, v in cell.metrics.items() if k not in TIMING_KEYS}
    return out


def _opts(out: Path | None = None, resume: Path | None = None, executor: str = "ray", **kw) -> RunOptions:
    return RunOptions(
        out=str(out) if out else None,
        resume=str(resume) if resume else None,
        executor=executor,
        workers=kw.pop("workers", 2 if executor == "ray" else 0),
        progress=False,
        write_report=False,
        **kw,
    )


def _ray_cell_workers() -> list[int]:
    import psutil

    pids = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info.get("cmdline") or [])
        if "execute_cell" in cmd and "ray::" in cmd:
            pids.append(p.pid)
    return pids


def test_a_killed_ray_worker_becomes_a_failed_cell_with_its_reason(cluster, tmp_path):
    fifo = tmp_path / "blocks.jsonl"
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes: the cell hangs in its worker
    suite = _suite(tmp_path, {"hangs": str(fifo)}, seeds=1)
    result: dict[str, object] = {}
    t = threading.Thread(target=lambda: result.update(r=run_suite(suite, None, _opts(tmp_path / "run"))))
    t.start()
    deadline = time.monotonic() + 120
    pids: list[int] = []
    while time.monotonic() < deadline and not pids:
        time.sleep(0.5)
        pids = _ray_cell_workers()
    assert pids, "no Ray worker running the cell was found"
    for pid in pids:
        os.kill(pid, 9)
    t.join(timeout=120)
    assert not t.is_alive()
    outcome = result["r"].outcomes[0]
    assert outcome.status == "failed"
    assert "ray task failed" in (outcome.error or "")
    cell = next(RunStore(tmp_path / "run").iter_cells())
    assert cell.status == "failed" and "ray task failed" in str(cell.record.get("error"))


def test_ray_results_identical_to_the_local_executor(cluster, tmp_path):
    suite = _suite(tmp_path, _generations(tmp_path))
    local = run_suite(suite, None, _opts(tmp_path / "local", executor="local"))
    remote = run_suite(suite, None, _opts(tmp_path / "ray"))
    assert all(o.status == "ok" for o in local.outcomes) and len(local.outcomes) == 4
    assert all(o.status == "ok" for o in remote.outcomes)
    a, b = _cell_files(tmp_path / "local"), _cell_files(tmp_path / "ray")
    assert a == b and len(a) == 12


def test_resume_across_executors_redoes_no_finished_cell(cluster, tmp_path):
    suite = _suite(tmp_path, _generations(tmp_path))
    first = run_suite(suite, None, _opts(tmp_path / "run", executor="local", systems=["good"]))
    assert [o.status for o in first.outcomes] == ["ok", "ok"]
    before = {
        c.key.label(): (c.path / "metrics.json").stat().st_mtime_ns
        for c in RunStore(tmp_path / "run").iter_cells()
    }
    # a bare resume keeps the run's own selection (bench.runner.resume_selection); naming both systems
    # widens it, so the resume runs the new system's cells on Ray and must skip the finished ones
    second = run_suite(suite, None, _opts(resume=tmp_path / "run", systems=["good", "mixed"]))
    assert second.skipped == 2
    assert sorted(o.status for o in second.outcomes) == ["ok", "ok", "skipped", "skipped"]
    after = {
        c.key.label(): (c.path / "metrics.json").stat().st_mtime_ns
        for c in RunStore(tmp_path / "run").iter_cells()
    }
    assert all(after[k] == v for k, v in before.items())  # finished cells untouched


def test_a_cell_needing_a_gpu_the_cluster_lacks_fails_at_once(cluster, tmp_path):
    # under the paper profile an `ar` row on the LLaMA preset asks for one GPU (the embedded profile would
    # serve it with the SmolLM2 stand-in on the CPU); preflight is off so the request reaches Ray
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "name: ray-gpu\nseeds: 1\nsamples: 1\n"
        "tasks: [{name: demo/booking, n_references: 8, n_holdout: 8}]\n"
        "systems: {gpu: {type: ar, models: {generator: llama-3.1-8b-4bit}}}\n"
        "metrics: [parse_rate]\n",
        encoding="utf-8",
    )
    t0 = time.monotonic()
    res = run_suite(suite, {"profile": "paper"}, _opts(tmp_path / "run", preflight=False))
    assert time.monotonic() - t0 < 60
    (outcome,) = res.outcomes
    assert outcome.status == "failed"
    assert "1 GPU on one node" in outcome.error and "has 2 CPU, 0 GPU" in outcome.error


def test_resource_requests_per_system():
    from bench.cells import CellJob, cell_hash
    from bench.ray_executor import resources_for
    from bench.store import CellKey

    def job(roles):
        return CellJob(CellKey("s", "t", 0), "h", {"type": "file"}, roles, "p", {}, 1, [], "r", "c")

    assert resources_for(job({"generator": {"name": "smollm2"}})) == {"num_cpus": 1.0}
    paper = {
        "generator": {"name": "llama", "resources": {"num_gpus": 1}},
        "judge": {"resources": {"num_cpus": 4}},
    }
    assert resources_for(job(paper)) == {"num_cpus": 4.0, "num_gpus": 1.0}
    assert resources_for(job({"g": {"resources": {"TPU": 2}}})) == {
        "num_cpus": 1.0,
        "resources": {"TPU": 2.0},
    }
    # placement is not identity: the same model with or without a GPU request is the same cell
    a = cell_hash({"type": "ar"}, {"generator": {"name": "m"}}, {}, "f", 0, 1)
    b = cell_hash({"type": "ar"}, {"generator": {"name": "m", "resources": {"num_gpus": 1}}}, {}, "f", 0, 1)
    assert a == b
