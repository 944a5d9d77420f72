"""systems/catalog.yaml holds the paper's eight AR models with the decoding settings the paper states,
prices for the API models, and `paper` / `embedded` profiles that map every role to a known preset."""

from __future__ import annotations

import pytest

from bench.errors import BackendUnavailable
from bench.profiles import ROLES, load_catalog, resolve_profile
from systems.backends.openai_api import OpenAIBackend

PAPER_AR = {
    "llama-3.1-8b-4bit": (
        "hf",
        "meta-llama/Llama-3.1-8B-Instruct",
        {"quantization": "4bit"},
        {"temperature": 0.7},
    ),
    "qwen-3-8b": ("hf", "Qwen/Qwen3-8B", {}, {"top_p": 0.9}),
    "deepseek-r1-8b": ("hf", "deepseek-ai/DeepSeek-R1-Distill-Llama-8B", {}, {"top_k": 40}),
    "gemma-2-9b": ("hf", "google/gemma-2-9b-it", {}, {"num_beams": 3}),
    "mistral-7b-8bit": ("hf", "mistralai/Mistral-7B-Instruct-v0.3", {"quantization": "8bit"}, {}),
    "gpt-4.1-nano": ("openai", "gpt-4.1-nano-2025-04-14", {}, {}),
    "gpt-4.1-mini": ("openai", "gpt-4.1-mini-2025-04-14", {}, {}),
    "gpt-4.1": ("openai", "gpt-4.1-2025-04-14", {}, {}),
}


@pytest.mark.parametrize("name", sorted(PAPER_AR))
def test_paper_ar_preset_has_the_papers_settings(name):
    backend, model, params, sampling = PAPER_AR[name]
    spec = load_catalog().model(name)
    assert (spec["backend"], spec["model"]) == (backend, model)
    assert params.items() <= (spec.get("params") or {}).items()
    assert sampling.items() <= (spec.get("sampling") or {}).items()
    assert spec.get("paper"), "every paper preset says where its settings come from"


def test_llama_judge_runs_at_temperature_0_2():
    judge = load_catalog().model("llama-3.1-8b-4bit-judge")
    assert judge["model"] == load_catalog().model("llama-3.1-8b-4bit")["model"]
    assert judge["sampling"]["temperature"] == 0.2


def test_every_api_preset_is_priced_and_builds_without_network():
    catalog = load_catalog()
    api = [n for n, m in catalog.models.items() if m["backend"] == "openai"]
    assert len(api) == 3
    for name in api:
        b = OpenAIBackend.from_spec(catalog.model(name))
        assert b.price is not None and b.price.output_per_mtok > b.price.input_per_mtok > 0
        assert b.identity() == {"backend": "openai", "model": catalog.model(name)["model"]}
    # cost of 1M in + 1M out for GPT-4.1: $2 + $8 (OpenAI list price)
    assert OpenAIBackend.from_spec(catalog.model("gpt-4.1")).price.cost(
        1_000_000, 1_000_000
    ) == pytest.approx(10.0)


def test_profiles_map_their_roles_to_known_presets():
    paper = resolve_profile("paper")
    assert set(paper.roles) == set(ROLES)
    assert paper.spec("judge")["name"] == "llama-3.1-8b-4bit-judge"
    assert paper.spec("scorer")["model"] == "openai-community/gpt2-large"
    embedded = resolve_profile("embedded")
    for role in ("generator", "optimizer", "judge", "scorer"):
        assert embedded.spec(role)["name"] == "smollm2-135m-instruct"
    assert embedded.spec("embedder")["name"] == "minilm-l6-v2"


def test_every_preset_backend_is_registered():
    from bench.registry import BACKENDS

    for name, model in load_catalog().models.items():
        assert model["backend"] in BACKENDS, name


def test_quantized_paper_presets_refuse_clearly_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    from systems.backends.hf import HFBackend

    for name in ("llama-3.1-8b-4bit", "mistral-7b-8bit"):
        with pytest.raises(BackendUnavailable, match="needs a CUDA GPU"):
            HFBackend.from_spec(load_catalog().model(name))
