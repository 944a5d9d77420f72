"""Shared helpers for tests that run the harness on the `file` system and the demo task (no model).

Why a helper module: the run-store, cache, CLI-gate and hostile-input tests all need the same small
suite of external generations; building it one way keeps those tests short and their numbers comparable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.runner import RunOptions, RunResult, run_suite
from bench.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_html(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in these tests write report.md but skip report.html (plots cost seconds per run)."""
    monkeypatch.setenv("BENCH_NO_HTML", "1")


def generation_rows(seed: int, n: int = 8) -> list[dict[str, Any]]:
    """n generation lines for demo/booking: valid records, fenced text, broken JSON, schema misses."""
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    kinds = [
        lambda i: {"record": dict(spec.holdout[(seed + i) % len(spec.holdout)])},
        lambda i: {
            "text": "```json\n" + json.dumps(spec.holdout[(seed + i + 3) % len(spec.holdout)]) + "\n```"
        },
        lambda i: {"text": '{"broken": '},
        lambda i: {"record": {"unexpected": i}},
    ]
    # seed-dependent mix, so the first half and the whole file score differently
    order = [0, 1, 0, 0, 2, 3, 2, 1, 0, 3, 2, 2]
    return [kinds[order[(i + seed) % len(order)]](i) for i in range(n)]


def write_generations(gen_dir: Path, seeds: list[int], n: int = 8) -> None:
    d = gen_dir / "demo__booking"
    d.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (d / f"{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in generation_rows(seed, n)))


def suite_text(
    gen_dir: Path,
    *,
    seeds: int = 2,
    samples: int = 8,
    extra: str = "",
    name: str = "store",
    systems: tuple[str, ...] = ("ext",),
    metrics: str = "parse_rate, schema_valid, tsr",
) -> str:
    """A demo/booking suite whose `file` systems (`systems`, all reading `gen_dir`) replay generations."""
    path = f"{gen_dir}/{{task_dir}}/{{seed}}.jsonl"
    lines = "".join(f'  {s}: {{type: file, params: {{path: "{path}"}}}}\n' for s in systems)
    return f"""\
name: {name}
seeds: {seeds}
samples: {samples}
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
systems:
{lines}metrics: [{metrics}]
{extra}"""


def make_suite(tmp_path: Path, **kw: Any) -> Path:
    gen = tmp_path / "gen"
    write_generations(gen, list(range(kw.get("seeds", 2))), max(8, kw.get("samples", 8)))
    p = tmp_path / "suite.yaml"
    p.write_text(suite_text(gen, **kw))
    return p


def run(suite: Path, tmp_path: Path, overrides: dict | None = None, **opts: Any) -> RunResult:
    base = dict(workers=0, progress=False, use_cache=False, cache_dir=str(tmp_path / "cache"))
    base.update(opts)
    return run_suite(suite, overrides, RunOptions(**base))


def cell_files(run_dir: Path, name: str) -> dict[str, str]:
    return {
        str(p.parent.relative_to(run_dir)): p.read_text() for p in sorted(run_dir.glob(f"cells/*/*/*/{name}"))
    }


def stable_metrics(run_dir: Path) -> dict[str, dict[str, Any]]:
    """metrics.json per cell without the wall-clock figures."""
    return {
        k: {m: v for m, v in json.loads(t).items() if m not in ("seconds", "records_per_s")}
        for k, t in cell_files(run_dir, "metrics.json").items()
    }


def bench_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(BENCH_CACHE_DIR=str(tmp_path / "cache"), BENCH_NO_HTML="1", PYTHONPATH=str(ROOT))
    return env


def bench_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def bench(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh interpreter (so tracebacks, exit codes and stderr are the real ones)."""
    return subprocess.run(
        bench_cmd(*args), cwd=ROOT, env=bench_env(tmp_path), capture_output=True, text=True, timeout=timeout
    )


def two_system_suite(tmp_path: Path, *, seeds: int = 3, samples: int = 8, name: str = "pair") -> Path:
    """A suite of two `file` systems (`first`, `second`) reading the same generations of demo/booking:
    for tests of what a run plans and runs across systems (order, resume), not of scores."""
    gen = tmp_path / "gen"
    write_generations(gen, list(range(seeds)))
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        suite_text(
            gen, seeds=seeds, samples=samples, name=name, systems=("first", "second"), metrics="parse_rate"
        )
    )
    return suite
