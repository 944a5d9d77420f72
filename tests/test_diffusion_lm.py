"""Diffusion-LM (Li et al. 2022) re-implementation: checked against the paper's definitions (tiny configs)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from bench.context import BenchContext  # noqa: E402
from bench.profiles import apply_overrides, resolve_profile  # noqa: E402
from bench.registry import SYSTEMS  # noqa: E402
from bench.types import TaskSpec  # noqa: E402
from systems.backends.diffusion_lm.backend import DiffusionLMBackend, DiffusionLMParams  # noqa: E402
from systems.backends.diffusion_lm.model import DiffusionLM, DLMConfig  # noqa: E402
from systems.backends.diffusion_lm.schedule import Schedule, sqrt_alpha_bar  # noqa: E402
from systems.backends.diffusion_lm.tokenizer import STRUCTURAL, serialise, train_tokenizer  # noqa: E402
from systems.backends.diffusion_lm.train import e2e_loss  # noqa: E402

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
DATA = Path(os.environ["BENCH_DATA_DIR"])
needs_data = pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")
FAMILIES = ["multiwoz/train", "truthfulqa", "self_instruct", "superni/task1192_food_flavor_profile"]
TINY = {
    "vocab_size": 320,
    "width": 32,
    "n_layers": 1,
    "n_heads": 2,
    "d_ff": 64,
    "diffusion_steps": 100,
    "train_steps": 200,
    "batch_size": 8,
    "sample_steps": 20,
}


def load(name: str, n: int = 10) -> TaskSpec:
    from bench.tasks import load_task

    return load_task(name, n_references=n, n_holdout=n)


@needs_data
@pytest.mark.parametrize("task", FAMILIES)
def test_tokenizer_isolates_structural_characters_and_round_trips(task: str) -> None:
    spec = load(task, 10 if task.startswith("superni") else 32)
    texts = [serialise(r) for r in spec.references]
    tok = train_tokenizer(texts, 600)
    for t in texts:
        ids = tok.encode(t)
        assert tok.decode(ids) == t
        pieces = [tok.token_text(i) for i in ids]
        for p in pieces:  # a structural character never shares a token with anything else
            assert not (set(p) & set(STRUCTURAL)) or p in STRUCTURAL
        for c in STRUCTURAL:  # every occurrence, inside strings too, is one token of its own
            assert sum(p == c for p in pieces) == t.count(c)
    assert tok.token_text(tok.pad_id) == "" and tok.pad_id == 0


def test_sqrt_schedule_follows_the_paper() -> None:
    T = 2000
    s = Schedule.sqrt(T)
    # alpha_bar(t/T) = 1 - sqrt(t/T + 1e-4) (Li et al. 2022): the cumulative product telescopes
    for t in (0, 1, 10, 500, 1500):
        expect = sqrt_alpha_bar((t + 1) / T) / sqrt_alpha_bar(0)
        assert math.isclose(float(s.alphas_cumprod[t]), expect, rel_tol=1e-9)
    assert bool((s.alphas_cumprod[1:] < s.alphas_cumprod[:-1]).all())
    assert float(s.alphas_cumprod[-1]) < 1e-3  # q(x_T | x_0) is close to N(0, I)
    # sqrt adds noise fast at small t: a tenth of the way in, more than half the signal variance is gone
    assert float(s.alphas_cumprod[T // 10]) < 0.7


def test_posterior_is_the_gaussian_product() -> None:
    """q(x_{t-1}|x_t,x_0) from Bayes: precision-weighted combination of q(x_t|x_{t-1}) and q(x_{t-1}|x_0)."""
    s = Schedule.sqrt(200)
    x0, xt = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    for i in (1, 7, 150):
        a, b, abar_prev = 1 - s.betas[i], s.betas[i], s.alphas_cumprod[i - 1]
        var = 1 / (a / b + 1 / (1 - abar_prev))
        mean = var * (a.sqrt() / b * xt + abar_prev.sqrt() / (1 - abar_prev) * x0)
        got_mean, got_std = s.posterior(x0, xt, i)
        assert torch.allclose(got_mean, mean, atol=1e-10)
        assert math.isclose(float(got_std) ** 2, float(var), rel_tol=1e-9)


def test_respacing_keeps_alphas_cumprod_at_the_kept_steps() -> None:
    s = Schedule.sqrt(2000)
    r = s.respaced(50)
    assert r.T == 50 and int(r.timesteps[0]) == 0 and int(r.timesteps[-1]) == 1999
    assert torch.allclose(r.alphas_cumprod, s.alphas_cumprod[r.timesteps], rtol=1e-12)


def test_e2e_loss_is_mse_plus_prior_plus_rounding_nll() -> None:
    torch.manual_seed(0)
    m = DiffusionLM(DLMConfig(vocab_size=30, seq_len=6, emb_dim=4, width=16, n_layers=1, n_heads=2, d_ff=32))
    s = Schedule.sqrt(50)
    ids = torch.randint(0, 30, (5, 6))
    loss, terms = e2e_loss(m, s, ids, torch.Generator().manual_seed(3))
    # the same draws, recomputed from the definitions
    g = torch.Generator().manual_seed(3)
    emb = m.embedding(ids)
    x0 = emb + (1 - s.alphas_cumprod[0]).sqrt().float() * torch.randn(emb.shape, generator=g)
    t = torch.randint(0, s.T, (5,), generator=g)
    noise = torch.randn(x0.shape, generator=g)
    ab = s.alphas_cumprod[t].float().view(-1, 1, 1)
    xt = ab.sqrt() * x0 + (1 - ab).sqrt() * noise
    pred = m(xt, t)
    target = torch.stack([emb[b] if t[b] == 0 else x0[b] for b in range(5)])
    mse = ((pred - target) ** 2).mean()
    prior = float(s.alphas_cumprod[-1]) * (x0**2).mean()
    nll = -torch.log_softmax(x0 @ m.embedding.weight.T, -1).gather(-1, ids[..., None]).mean()
    assert math.isclose(float(loss.detach()), float((mse + prior + nll).detach()), rel_tol=1e-5)
    assert math.isclose(terms["nll"], float(nll), rel_tol=1e-5)


def test_clamping_snaps_to_the_nearest_embedding() -> None:
    torch.manual_seed(1)
    m = DiffusionLM(DLMConfig(vocab_size=40, seq_len=5, emb_dim=3, width=16, n_layers=1, n_heads=2, d_ff=32))
    x = torch.randn(2, 5, 3)
    brute = torch.cdist(x.reshape(-1, 3), m.embedding.weight).argmin(-1).view(2, 5)
    assert torch.equal(m.nearest(x), brute)


@needs_data
def test_training_logs_falling_loss_caches_and_samples_deterministically(tmp_path: Path) -> None:
    spec = load("superni/task1192_food_flavor_profile")
    params = DiffusionLMParams(**TINY)
    b = DiffusionLMBackend.train_or_load(spec, params, tmp_path, seed=0)
    log = b.train_log
    assert not b.loaded_from_cache and log[0]["step"] == 0 and log[-1]["step"] == TINY["train_steps"] - 1
    assert log[-1]["loss"] < 0.6 * log[0]["loss"]
    again = DiffusionLMBackend.train_or_load(spec, params, tmp_path, seed=0)
    assert again.loaded_from_cache and again.train_log == log
    a1, a2 = b.sample_texts(6, seed=5), again.sample_texts(6, seed=5)
    assert a1 == a2
    assert b.sample_texts(6, seed=6) != a1
    assert b.sample_texts(3, seed=5) == a1[:3]  # a row's text does not depend on the rest of its batch
    other = DiffusionLMBackend.key(spec, params, seed=1)
    assert other != DiffusionLMBackend.key(spec, params, seed=0)
    assert all(nfe == TINY["sample_steps"] for *_, nfe in a1)


@needs_data
def test_system_runs_through_the_profile_role(tmp_path: Path) -> None:
    spec = load("superni/task1192_food_flavor_profile")
    tiny = {"backend": "diffusion_lm", "model": "tiny", "per_task": True, "params": TINY}
    profile = apply_overrides(resolve_profile("embedded"), {"diffusion_lm": tiny}, None)
    assert resolve_profile("embedded").spec("diffusion_lm")["backend"] == "diffusion_lm"
    ctx = BenchContext(profile, tmp_path)
    system = SYSTEMS.get("diffusion-lm")({})
    res = system.generate(spec, 5, 0, ctx)
    assert [s.index for s in res.samples] == list(range(5))
    assert res.usage.generator_calls == 5 and res.usage.nfe == 5 * TINY["sample_steps"]
    assert res.trace[0]["event"] == "diffusion_lm_sample"
    assert [s.text for s in system.generate(spec, 5, 0, ctx).samples] == [s.text for s in res.samples]
