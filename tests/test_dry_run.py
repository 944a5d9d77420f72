"""`bench run SUITE --dry-run` lists every system, role, model, backend and setting with estimated calls,
tokens and API cost, and loads no model (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
ROOT = Path(__file__).resolve().parents[1]

TABLE1 = """\
name: table1-ar
profile: paper
seeds: 15
samples: 8
tasks:
  - {name: demo/booking, n_references: 24, n_holdout: 24}
systems:
  llama31-8b: {type: ar, models: {generator: llama-3.1-8b-4bit}}
  qwen-3-8b: {type: ar, models: {generator: qwen-3-8b}}
  deepseek-r1-8b: {type: ar, models: {generator: deepseek-r1-8b}}
  gemma-2-9b: {type: ar, models: {generator: gemma-2-9b}}
  mistral-7b: {type: ar, models: {generator: mistral-7b-8bit}}
  gpt41-nano: {type: ar, models: {generator: gpt-4.1-nano}}
  gpt41-mini: {type: ar, models: {generator: gpt-4.1-mini}, params: {temperature: 0.3}}
  gpt41: {type: ar, models: {generator: gpt-4.1}}
metrics: [parse_rate, schema_valid, perplexity]
"""


def plan_for(tmp_path: Path):
    from bench.dry_run import build_plan
    from bench.suite import load_suite

    path = tmp_path / "table1.yaml"
    path.write_text(TABLE1)
    return build_plan(load_suite(path).suite)


def test_plan_lists_the_eight_ar_models_with_their_settings(tmp_path):
    from bench.dry_run import render_plan

    plan = plan_for(tmp_path)
    rows = {r.system: r for r in plan.rows if r.role == "generator"}
    assert len(rows) == 8
    assert (
        "quantization=4bit" in rows["llama31-8b"].settings
        and "temperature=0.7" in rows["llama31-8b"].settings
    )
    assert "top_p=0.9" in rows["qwen-3-8b"].settings
    assert "top_k=40" in rows["deepseek-r1-8b"].settings
    assert "num_beams=3" in rows["gemma-2-9b"].settings
    assert "quantization=8bit" in rows["mistral-7b"].settings
    assert "temperature=0.3" in rows["gpt41-mini"].settings  # a system's explicit param beats the preset
    text = render_plan(plan)
    for model in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen3-8B",
        "gpt-4.1-nano-2025-04-14",
        "gpt-4.1-2025-04-14",
    ):
        assert model in text
    assert "openai-community/gpt2-large" in text  # the perplexity scorer of the paper profile


def test_calls_tokens_and_cost_follow_from_the_suite_and_price_table(tmp_path):
    from bench.profiles import load_catalog
    from bench.tasks.loading import load_task
    from systems.ar import ARSystem

    plan = plan_for(tmp_path)
    row = next(r for r in plan.rows if r.system == "gpt41")
    assert row.calls == 1 * 15 * 8  # tasks x seeds x samples, one call per record
    # independent recomputation: mean characters of the real prompts / 4, times the calls
    spec = load_task("demo/booking", n_references=24, n_holdout=24)
    requests, _ = ARSystem({}).build_requests(spec, 8, 0)
    mean_chars = sum(len(c) for r in requests for _, c in r.messages) / len(requests)
    assert row.tokens_in == pytest.approx(mean_chars / 4 * 120)
    price = load_catalog().prices["gpt-4.1-2025-04-14"]
    expected = (
        int(row.tokens_in) * price["input_per_mtok"] + int(row.tokens_out) * price["output_per_mtok"]
    ) / 1e6
    assert row.cost_usd == pytest.approx(expected)
    assert row.cost_usd_max >= row.cost_usd
    assert all(r.cost_usd is None for r in plan.rows if r.backend == "hf")


def test_cli_dry_run_loads_no_model(tmp_path):
    (tmp_path / "table1.yaml").write_text(TABLE1)
    code = (
        "import sys, json\n"
        "from bench.registry import BACKENDS\n"
        "from bench.cli import main\n"
        f"rc = main(['run', {str(tmp_path / 'table1.yaml')!r}, '--dry-run'])\n"
        "heavy = [m for m in ('llama_cpp', 'transformers', 'openai', 'sentence_transformers') if m in sys.modules]\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"rc": 0, "heavy": []}
    assert "llama-3.1-8b-4bit" in out.stdout and "$" in out.stdout


def test_the_table1_plan_shows_each_system_only_the_roles_it_uses():
    """`llada` uses only its DLM; before, the plan listed every role of the profile for it (scorer,
    judge, optimizer, diffusion_lm, difflm), as if it loaded them. Preflight and the plan share one rule
    (bench.preflight.roles_of)."""
    from bench.dry_run import build_plan
    from bench.suite import load_suite

    plan = build_plan(load_suite(ROOT / "suites" / "table1.yaml").suite, profile_name="paper")
    roles: dict[str, set[str]] = {}
    for r in plan.rows:
        roles.setdefault(r.system, set()).add(r.role)
    assert roles["llada"] == {"dlm"}
    assert roles["diffusion-lm"] == {"diffusion_lm"} and roles["difflm"] == {"difflm"}
    assert roles["aod"] == {"dlm", "optimizer", "judge", "embedder"}
    assert all(roles[f"ar-{m}"] == {"generator"} for m in ("llama31-8b", "gemma2-9b", "gpt41"))


@pytest.mark.parametrize("path", sorted((ROOT / "suites").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_suite_loads_and_plans_on_its_own_profile(path: Path) -> None:
    """A suite in suites/ that no longer loads (a renamed param, a removed preset) fails here, not in
    a user's run."""
    from bench.dry_run import build_plan
    from bench.suite import load_suite

    plan = build_plan(load_suite(path).suite)
    assert plan.rows and {r.system for r in plan.rows if r.system != "(metrics)"}


def test_the_sequential_aod_suite_gives_every_system_the_long_trained_threshold_dlm() -> None:
    from bench.dry_run import build_plan
    from bench.suite import load_suite

    plan = build_plan(load_suite(ROOT / "suites" / "aod_sequential.yaml").suite)
    dlm = {r.system: r for r in plan.rows if r.role == "dlm"}
    assert set(dlm) == {
        "llada",
        "aod",
        "aod-norl",
        "aod-static",
        "aod-scalar",
        "promptbreeder",
        "evoprompt",
        "evoprompt-de",
    }
    for row in dlm.values():
        assert row.preset == "mdlm-1800-threshold" and row.backend == "mdlm"
        assert "train_steps=1800" in row.settings and "threshold=0.9" in row.settings
