"""A suite's per-system `models:` resolve through the profile: under `embedded` the paper's presets are
served by declared local stand-ins that keep the paper's decoding settings, under `paper` by the paper's
models; the served model is named in the manifest's words; per-profile scale comes from the suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.profiles import apply_overrides, load_catalog, resolve_profile, served_text
from bench.served import served_by
from bench.suite import load_suite

ROOT = Path(__file__).resolve().parents[1]
TABLE1 = ROOT / "suites" / "table1.yaml"
AR_ROWS = {
    "ar-llama31-8b": "llama-3.1-8b-4bit",
    "ar-qwen3-8b": "qwen-3-8b",
    "ar-deepseek-r1-8b": "deepseek-r1-8b",
    "ar-gemma2-9b": "gemma-2-9b",
    "ar-mistral-7b": "mistral-7b-8bit",
    "ar-gpt41-nano": "gpt-4.1-nano",
    "ar-gpt41-mini": "gpt-4.1-mini",
    "ar-gpt41": "gpt-4.1",
}


@pytest.mark.parametrize("preset", sorted(set(AR_ROWS.values())))
def test_embedded_stand_in_keeps_the_paper_decoding_and_says_what_it_stands_for(preset):
    paper = load_catalog().model(preset)
    spec = apply_overrides(resolve_profile("embedded"), {"generator": preset}, None).spec("generator")
    assert spec["backend"] in ("llama_cpp", "hf") and spec["model"] == "smollm2-135m-instruct"
    assert spec["stands_in_for"] == preset and spec["paper_model"] == paper["model"]
    assert spec["sampling"] == paper["sampling"]  # temperature, top-p, top-k, beams carried over
    assert served_text(spec).startswith("embedded: SmolLM2-135M")


def test_beam_search_stand_in_runs_on_a_runtime_with_beams():
    spec = apply_overrides(resolve_profile("embedded"), {"generator": "gemma-2-9b"}, None).spec("generator")
    # llama.cpp runs the beams itself (systems/backends/llama_beam.py, tests/test_llama_beam.py)
    assert spec["backend"] == "llama_cpp" and spec["sampling"]["num_beams"] == 3
    assert served_text(spec) == "embedded: SmolLM2-135M Q4_1, beams 3"


def test_paper_profile_serves_the_paper_model_itself():
    spec = apply_overrides(resolve_profile("paper"), {"generator": "qwen-3-8b"}, None).spec("generator")
    assert spec["model"] == "Qwen/Qwen3-8B" and "stands_in_for" not in spec
    assert served_text(spec) == "Qwen3-8B, T 0.7, top-p 0.9"


def test_an_unknown_stand_in_target_is_an_error(monkeypatch):
    catalog = load_catalog()
    profiles = dict(catalog.profiles)
    profiles["broken"] = {"roles": {}, "stand_ins": {"qwen-3-8b": "no-such-preset"}}
    monkeypatch.setattr(catalog, "profiles", profiles)
    with pytest.raises(BenchError, match="unknown model preset 'no-such-preset'"):
        apply_overrides(resolve_profile("broken"), {"generator": "qwen-3-8b"}, None)


def test_table1_runs_embedded_by_default_and_the_paper_scale_is_one_flag_away():
    bare = load_suite(TABLE1).suite
    paper = load_suite(TABLE1, {"profile": "paper"}).suite
    assert bare.profile == "embedded" and len(bare.seed_list()) < 15
    assert paper.seed_list() == list(range(15)) and paper.samples == 32
    assert all(t.n_references == 64 for t in paper.tasks[:3])
    assert load_suite(TABLE1, {"seeds": 15}).suite.seed_list() == list(range(15))  # embedded at 15 seeds
    assert load_suite(TABLE1, {"profile": "paper", "seeds": 2}).suite.seed_list() == [0, 1]  # flag wins


def test_served_by_names_every_ar_row_and_its_settings():
    suite = load_suite(TABLE1).suite
    base = resolve_profile(suite.profile, suite.models)
    roles = {n: apply_overrides(base, c.models, suite.models).roles for n, c in suite.systems.items()}
    served = served_by(suite, roles)
    assert served["ar-llama31-8b"]["text"] == "embedded: SmolLM2-135M Q4_1, T 0.7"
    assert served["ar-qwen3-8b"]["text"] == "embedded: SmolLM2-135M Q4_1, T 0.7, top-p 0.9"
    assert served["ar-deepseek-r1-8b"]["text"] == "embedded: SmolLM2-135M Q4_1, T 0.7, top-k 40"
    assert served["ar-mistral-7b"]["notes"] == [
        "8-bit not reproduced: the only local weights are 4-bit (Q4_1)"
    ]
    for system, preset in AR_ROWS.items():
        assert served[system]["stands_in_for"] == {"generator": preset}
    assert served["llada"]["text"] == "masked-diffusion LM trained on the task, 12 steps"


def test_paper_dry_run_lists_all_eight_ar_models_and_llada(capsys, monkeypatch):
    from bench.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("BENCH_DATA_DIR", os.environ.get("BENCH_DATA_DIR", ""))
    assert main(["run", str(TABLE1), "--profile", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    for model in (
        "meta-llama/Llama-3.1-8B-Instruct",
        "Qwen/Qwen3-8B",
        "deepseek-ai/DeepSeek-R1-Distill-Llama-8B",
        "google/gemma-2-9b-it",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "gpt-4.1-nano-2025-04-14",
        "gpt-4.1-mini-2025-04-14",
        "gpt-4.1-2025-04-14",
        "GSAI-ML/LLaDA-8B-Instruct",
    ):
        assert model in out
    assert "15 seed(s)" in out and "preflight:" in out
