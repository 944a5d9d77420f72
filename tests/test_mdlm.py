"""The embedded masked-diffusion LM: tokenizer, model, skeleton forms, training cache (fast, small configs)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from bench.errors import BenchError  # noqa: E402
from bench.types import GenerationRequest, SamplingParams, TaskSpec  # noqa: E402
from systems.backends.mdlm import EmbeddedMDLMBackend  # noqa: E402
from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig  # noqa: E402
from systems.backends.mdlm.tokenizer import BPETokenizer, train_bpe  # noqa: E402
from systems.skeleton import SkeletonPlan, build_record, leaves, segments  # noqa: E402

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
DATA = Path(os.environ["BENCH_DATA_DIR"])
needs_data = pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")

# small enough to train in a few seconds; the quality bars use the default size (test_diffusion_quality.py)
TINY = {
    "d_model": 48,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 96,
    "train_steps": 30,
    "batch_size": 8,
    "vocab_size": 400,
}


def load(name: str) -> TaskSpec:
    from bench.tasks import load_task

    return load_task(name, n_references=None, n_holdout=None)


def test_bpe_round_trips_any_text_and_is_deterministic() -> None:
    texts = ['{"day": "monday", "price": "23.60 pounds"}', "Ünïcode ☃ and tabs\t"] * 20
    a, b = train_bpe(texts, 400), train_bpe(texts, 400)
    assert a.merges == b.merges
    for t in texts + ["never seen: 東京 {}"]:
        assert a.decode(a.encode(t)) == t
    assert len(a.encode(texts[0])) < len(texts[0].encode()) / 2  # merges shorten sequences
    assert BPETokenizer.from_json(json.loads(json.dumps(a.to_json()))).encode(texts[0]) == a.encode(texts[0])


def test_prefix_cache_reproduces_the_full_pass_for_the_suffix() -> None:
    torch.manual_seed(0)
    m = MaskedDiffusionTransformer(
        ModelConfig(vocab_size=50, max_len=16, d_model=16, n_layers=3, n_heads=2, d_ff=32)
    ).eval()
    x = torch.randint(3, 50, (2, 12))
    am = torch.ones_like(x, dtype=torch.bool)
    am[1, :3] = False
    full, cache = m.forward_with_cache(x, am, 5)
    suffix = m.forward_suffix(cache, x[:, 5:], am)
    assert torch.allclose(full[:, 5:], suffix, atol=1e-5)


@needs_data
@pytest.mark.parametrize(
    "task", ["multiwoz/hotel", "truthfulqa", "self_instruct", "superni/task1192_food_flavor_profile"]
)
def test_skeleton_of_a_record_rebuilds_the_record(task: str) -> None:
    spec = load(task)
    tok = train_bpe([json.dumps(r) for r in spec.references], 500)
    plan = SkeletonPlan(spec.schema, spec.references, lambda s: len(tok.encode(s)))
    for r in spec.references[:50]:
        tree = plan.of_record(r)
        text = "".join(s if isinstance(s, str) else "\0" for s in segments(tree))
        assert text.count("\0") == len(leaves(tree))
        rebuilt, repairs = build_record(
            tree, [lf.value_text or "" for lf in leaves(tree)], plan, random.Random(0)
        )
        assert rebuilt == r and not repairs


@needs_data
@pytest.mark.slow  # ~17 s idle, up to a minute on a loaded 2-core box
def test_training_is_cached_by_data_config_and_seed(tmp_path: Path) -> None:
    spec = load("multiwoz/train")
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    a = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    assert not a.loaded_from_cache and a.train_log
    b = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    assert b.loaded_from_cache and b.identity() == a.identity()
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    req = [
        GenerationRequest.chat("Write a JSON record.", SamplingParams(temperature=1.0), 4, i)
        for i in range(3)
    ]
    assert [c.text for c in a.generate(req)] == [c.text for c in b.generate(req)]
    # a row's output does not depend on the other prompts of its batch (prompts right-aligned to a
    # fixed column, per-row noise), which the call cache relies on
    longer = GenerationRequest.chat(
        "Generate one train record with many fields as JSON.", req[0].params, 4, 7
    )
    assert a.generate([longer, req[1]])[1].text == a.generate([req[1]])[0].text
    other = EmbeddedMDLMBackend.cache_key(spec, a.params, seed=1)
    assert other != EmbeddedMDLMBackend.cache_key(spec, a.params, seed=0)
    assert len(list((tmp_path / "mdlm").iterdir())) == 1


@needs_data
def test_generation_accounting_and_knobs(tmp_path: Path) -> None:
    spec = load("multiwoz/train")
    be = EmbeddedMDLMBackend.from_spec(
        {"params": TINY}, SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    )
    fixed = SamplingParams(temperature=0.5, extra=(("steps", 6),))
    comps = be.generate([GenerationRequest.chat("Fields: day", fixed, 0, i) for i in range(4)])
    assert all(c.nfe == 6 and c.tokens_in > 0 for c in comps)
    half = (be.response_length + 1) // 2
    blocks = SamplingParams(temperature=0.5, extra=(("steps", 6), ("block_length", half)))
    comps_b = be.generate([GenerationRequest.chat("Fields: day", blocks, 0, 0)])
    assert comps_b[0].nfe == 6
    too_few = SamplingParams(extra=(("steps", 2), ("block_length", 4)))
    with pytest.raises(BenchError, match="number of blocks"):
        be.generate([GenerationRequest.chat("x", too_few, 0, 0)])
    with pytest.raises(BenchError, match="unknown diffusion knob"):
        be.generate([GenerationRequest.chat("x", SamplingParams(extra=(("stepz", 3),)), 0, 0)])
    ((bound, n),) = be.nll([json.dumps(spec.references[0])], n_mc=4)
    assert n == be.response_length and bound > 0


def test_per_task_model_needs_a_task(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match="per_task"):
        EmbeddedMDLMBackend.from_spec(
            {"params": TINY}, SimpleNamespace(cache_dir=tmp_path, task=None, seed=0)
        )
    with pytest.raises(BenchError, match="params"):
        EmbeddedMDLMBackend.from_spec(
            {"params": {"d_model": -1}}, SimpleNamespace(cache_dir=tmp_path, task=None, seed=0)
        )


def test_copy_head_loss_path_equals_the_full_distribution() -> None:
    """`target_log_probs` (training) is the same mixture `forward` (sampling) normalises."""
    torch.manual_seed(0)
    m = MaskedDiffusionTransformer(
        ModelConfig(vocab_size=40, max_len=20, d_model=16, n_layers=2, n_heads=2, d_ff=32, prompt_width=8)
    ).eval()
    with torch.no_grad():
        m.copy_gate.bias.fill_(0.5)  # a real mix of vocabulary and copy terms
    x = torch.randint(5, 40, (3, 20))
    x[0, :3] = 0  # left padding in the prompt window
    attn = x != 0
    where = torch.zeros_like(x, dtype=torch.bool)
    where[:, 8:] = torch.rand(3, 12) < 0.6
    targets = torch.randint(5, 40, (int(where.sum()),))
    targets[:3] = x[where.nonzero()[:3, 0], 4]  # some targets that appear in the prompt (copyable)
    fast = m.target_log_probs(x, attn, where, targets)
    full = m(x, attn).log_softmax(-1)[where].gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(fast, full, atol=1e-5)


@needs_data
def test_swapped_hints_agree_with_the_record_they_train_on() -> None:
    from systems.skeleton_prompt import hint_text, leaf_items, training_example, value_pools

    spec = load("multiwoz/train")
    pools = value_pools(spec.references)
    assert set(spec.references[0]) <= set(pools)  # every top-level field has alternatives
    rng = random.Random(0)
    swapped = 0
    for _ in range(200):
        target = rng.choice(spec.references)
        parts, record = training_example(spec, target, rng, pools, swap=1.0)
        values = dict(leaf_items(record))
        for path, text in parts.hints:
            assert hint_text(values[path]) == text  # the hint is true of the trained record
        swapped += record != target
        assert {k for k in record if record[k] != target[k]} <= {p for p, _ in parts.hints}
    assert swapped > 50  # swaps happen (a drawn value may equal the original)


@needs_data
def test_hinted_positions_cover_exactly_the_value_tokens() -> None:
    from systems.backends.mdlm.train import hinted_positions, record_text

    spec = load("multiwoz/train")
    rec = spec.references[0]
    tok = train_bpe([json.dumps(r) for r in spec.references[:300]], 500)
    resp = tok.encode(record_text(rec))
    for field_name in ("day", "leaveAt", "trainID"):
        pos = sorted(hinted_positions(tok, resp, rec, [(field_name, rec[field_name])]))
        assert pos == list(range(pos[0], pos[-1] + 1))  # one contiguous run
        assert tok.decode(resp[i] for i in pos) == rec[field_name]
    assert hinted_positions(tok, resp, rec, [("day", "not-a-day")]) == set()


@needs_data
def test_skeleton_fills_go_through_the_call_cache(tmp_path: Path) -> None:
    """A re-run answers skeleton fills from the cache; a longer run sends only the new rows to the model."""
    from bench.cache import CachedBackend, CallCache
    from systems.llada import LLaDASkeletonSystem

    spec = load("multiwoz/train")
    raw = EmbeddedMDLMBackend.from_spec(
        {"params": TINY}, SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    )

    class Ctx:
        profile_name = "embedded"
        cache_dir = str(tmp_path)

        def __init__(self, backend: object) -> None:
            self._backend = backend

        def backend(self, role: str, task: TaskSpec | None = None) -> object:
            return self._backend

    system = LLaDASkeletonSystem({"steps": 6})
    uncached = system.generate(spec, 6, 3, Ctx(raw))
    cached = Ctx(CachedBackend(raw, CallCache(tmp_path / "calls.sqlite")))
    first = system.generate(spec, 4, 3, cached)
    assert (first.usage.cache_hits, first.usage.cache_misses) == (0, 4)
    again = system.generate(spec, 6, 3, cached)
    assert (again.usage.cache_hits, again.usage.cache_misses) == (4, 2)
    assert again.usage.nfe == uncached.usage.nfe  # NFE of cached fills is what they cost when made
    assert [s.text for s in again.samples] == [s.text for s in uncached.samples]
    other_knobs = LLaDASkeletonSystem({"steps": 5}).generate(spec, 4, 3, cached)
    assert other_knobs.usage.cache_hits == 0  # sampler knobs are part of the key
