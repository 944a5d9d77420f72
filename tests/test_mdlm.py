"""The embedded masked-diffusion LM: tokenizer, model, skeleton forms, training cache (fast, small configs)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny_dlm import TINY_DLM, perturbed_head_model

torch = pytest.importorskip("torch")

from bench.errors import BenchError  # noqa: E402
from bench.types import GenerationRequest, SamplingParams, TaskSpec  # noqa: E402
from systems.backends.mdlm import EmbeddedMDLMBackend  # noqa: E402
from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig  # noqa: E402
from systems.backends.mdlm.tokenizer import SPECIALS, BPETokenizer, train_bpe  # noqa: E402
from systems.skeleton import SkeletonPlan, build_record, leaves, segments  # noqa: E402

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
DATA = Path(os.environ["BENCH_DATA_DIR"])
needs_data = pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")

# small enough to train in a few seconds; the quality bars use the default size (test_diffusion_quality.py)
TINY = TINY_DLM | {"vocab_size": 400}


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
    again = BPETokenizer.from_json(json.loads(json.dumps(a.to_json())))
    assert again.encode(BPE_TEXTS[0]) == a.encode(BPE_TEXTS[0])
    assert [a.token_text(i) for i in range(5)] == ["<pad>", "<mask>", "<eos>", "<nul>", "<sep>"]
    assert a.encode("<mask>") != [a.mask_id]  # special ids are never produced from text


def test_bpe_training_is_the_same_in_another_process() -> None:
    """`tokenizers` hashes with per-process random state; the merges must not depend on it."""
    import subprocess
    import sys

    code = (  # the tokenizer module alone, so the child does not import torch
        "import json, runpy, sys; ns = runpy.run_path(sys.argv[1]);"
        "print(json.dumps(ns['train_bpe'](json.loads(sys.argv[2]), 380).to_json(), sort_keys=True))"
    )
    path = str(Path(__file__).resolve().parents[1] / "systems/backends/mdlm/tokenizer.py")
    args = [sys.executable, "-c", code, path, json.dumps(BPE_TEXTS * 3)]
    runs = [subprocess.run(args, capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] == json.dumps(train_bpe(BPE_TEXTS * 3, 380).to_json(), sort_keys=True) + "\n"


def test_the_token_window_drops_examples_and_the_line_slots_keep_first_and_last_lines() -> None:
    from systems.backends.mdlm.conditioning import prompt_lines, window_text
    from systems.backends.mdlm.train import copy_alternates, prompt_ids

    text = "\n".join(["Write a train.", "The day is monday.", "Example: " + BPE_TEXTS[0], 'day: "monday"'])
    assert window_text(text) == 'The day is monday.\nday: "monday"'  # no instruction, no example
    assert prompt_lines(text, 12) == text.split("\n")
    assert prompt_lines(text, 3) == ["Write a train.", "Example: " + BPE_TEXTS[0], 'day: "monday"']
    tok = train_bpe(BPE_TEXTS, 400)
    ids = prompt_ids(tok, text, 8)
    assert len(ids) == 8 and ids[-1] == tok.sep_id and tok.decode(ids).endswith('"monday"')  # the tail
    assert "pounds" in tok.decode(prompt_ids(tok, text, 200, lines=False))  # mdlm-6's window: everything
    alt = copy_alternates(tok)  # " monday" in a note copies as `monday`, the value's token in JSON
    [spaced] = [i for i in tok.encode("is monday") if tok.token_bytes(i) == b" monday"]
    assert tok.token_bytes(int(alt[spaced])) == b"monday"


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


def test_rope_is_a_complex_rotation_and_scores_depend_on_offsets_only() -> None:
    """`rotate` against an independent complex-number computation (Su et al. 2021, eq. 12-13): pair
    (x_2i, x_2i+1) is the complex number x_2i + i x_2i+1 times exp(i p theta_i), theta_i = 10000^(-2i/d);
    so a query at p and a key at r score the same as at p + s and r + s."""
    from systems.backends.mdlm.model import rotate, rotation

    torch.manual_seed(3)
    d = 8
    t = torch.randn(1, 2, 5, d)
    pos = torch.tensor([0, 1, 4, 9, 30])
    theta = torch.tensor([10000 ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    z = torch.complex(t[..., 0::2].double(), t[..., 1::2].double())
    ref = z * torch.exp(1j * pos.double()[:, None] * theta[None, :])
    ours = rotate(t, rotation(pos, d))
    assert torch.allclose(ours[..., 0::2].double(), ref.real, atol=1e-5)
    assert torch.allclose(ours[..., 1::2].double(), ref.imag, atol=1e-5)
    q, k = torch.randn(1, 1, 1, d), torch.randn(1, 1, 1, d)

    def score(p: int, r: int) -> float:
        return float(
            (rotate(q, rotation(torch.tensor([p]), d)) * rotate(k, rotation(torch.tensor([r]), d))).sum()
        )

    assert score(3, 7) == pytest.approx(score(20, 24), abs=1e-4)
    assert score(3, 7) != pytest.approx(score(3, 8), abs=1e-3)


def test_opt_in_knobs_enter_the_cache_key_only_when_on() -> None:
    """Models trained before the `rope`, `high_noise` and `pre_tokenizer` knobs keep their cache keys;
    others get their own."""
    from systems.backends.mdlm.backend import OPT_IN_KNOBS, TRANSLATE_REVISION, train_key
    from systems.backends.mdlm.train import TrainConfig

    assert not set(OPT_IN_KNOBS) & set(train_key(TrainConfig()))
    assert train_key(TrainConfig(rope=True))["rope"] is True
    assert train_key(TrainConfig(high_noise=0.5))["high_noise"] == 0.5
    assert train_key(TrainConfig(value_mask=0.3))["value_mask"] == 0.3
    assert train_key(TrainConfig(pre_tokenizer="phrase"))["pre_tokenizer"] == "phrase"
    assert train_key(TrainConfig(pre_tokenizer="digits"))["pre_tokenizer"] == "digits"
    assert train_key(TrainConfig(pre_tokenizer="digit-pairs"))["pre_tokenizer"] == "digit-pairs"
    assert train_key(TrainConfig(pre_tokenizer="numbers"))["pre_tokenizer"] == "numbers"
    assert train_key(TrainConfig(max_train_hints=5))["max_train_hints"] == 5
    # the translate head's training path changed its weights' bits: its builds carry the revision
    assert "translate_revision" not in train_key(TrainConfig(copy_sentinel=True))
    assert train_key(TrainConfig(translate_head=True))["translate_revision"] == TRANSLATE_REVISION >= 2


def test_phrase_pre_tokenization_merges_across_spaces_but_not_across_json_punctuation() -> None:
    """`phrase` BPE: a repeated phrase becomes one token; keys and separators never share one with words;
    any text round-trips."""
    texts = [
        '{"best_answer": "the victim cannot drop the charges", "x": ["the victim cannot drop the charges"]}'
    ]
    tok = train_bpe(texts * 5, 400, "phrase")
    pieces = [tok.token_text(i) for i in tok.encode(texts[0])]
    assert "the victim cannot drop the charges" in pieces
    punctuation = set('{}[]":,')
    for p in pieces:  # each token is punctuation and whitespace only, or has no JSON punctuation
        assert set(p) <= punctuation | {" "} or not set(p) & punctuation, p
    for t in [*texts, "never seen: 東京 {}", 'a "b", c\n', ""]:
        assert tok.decode(tok.encode(t)) == t
    assert len(pieces) < len(train_bpe(texts * 5, 400).encode(texts[0]))  # fewer than GPT-2 pre-tokenization
    with pytest.raises(ValueError, match="pre-tokenization"):
        train_bpe(texts, 400, "words")


def test_digit_pre_tokenization_gives_every_digit_a_token_so_every_train_id_has_one_length() -> None:
    """`digits` BPE: no token holds two digits, so every "TR" + four digits ID is seven tokens with its
    quotes ("\"", "TR", four digits, "\"") whichever IDs the training texts held; words still merge; any
    text round-trips."""
    ids = ["TR9547", "TR6101", "TR8880", "TR2727", "TR1806"]
    texts = [f'{{"trainID": "{i}", "leaveAt": "07:05", "price": "12.80 pounds"}}' for i in ids]
    gpt2, digits = train_bpe(texts * 20, 400), train_bpe(texts * 20, 400, "digits")
    # the independent reading of "one token per digit": count the digits in each token's text
    for i in range(digits.vocab_size):
        assert sum(c.isdigit() for c in digits.token_text(i)) <= 1, digits.token_text(i)
    lengths = {len(digits.encode(f'"{i}"')) for i in [*ids, "TR0000", "TR3141"]}  # seen and unseen IDs
    assert lengths == {7}
    gpt2_lengths = {len(gpt2.encode(f'"{i}"')) for i in [*ids, "TR0000", "TR3141"]}
    assert len(gpt2_lengths) > 1  # under the default the merges decide an ID's length
    assert " pounds" in [digits.token_text(i) for i in digits.encode(texts[0])]
    for t in [*texts, "never seen: 東京 {} 0.5e-3", "a 12345 b\n", ""]:
        assert digits.decode(digits.encode(t)) == t


def test_digit_pair_pre_tokenization_spells_every_train_id_in_two_tokens_and_keeps_clock_pairs() -> None:
    """`digit-pairs` BPE: digit runs are cut into pairs from the left and every pair 00-99 is a token
    even when the training texts never hold it, so all 10,000 IDs are "TR" and two pairs; a clock time
    keeps its two-digit tokens; an odd run ends in a single digit; any text round-trips."""
    texts = [f'{{"trainID": "TR{n}", "leaveAt": "07:05", "duration": "105 minutes"}}' for n in (9547, 1856)]
    tok = train_bpe(texts * 20, 400, "digit-pairs")
    for n in range(10_000):  # an independent spelling: "TR", then the ID's digits two by two
        ids = tok.encode(f"TR{n:04d}")
        assert [tok.token_text(i) for i in ids] == ["TR", f"{n:04d}"[:2], f"{n:04d}"[2:]]
    assert [tok.token_text(i) for i in tok.encode("07:05")] == ["07", ":", "05"]
    assert [tok.token_text(i) for i in tok.encode(" 105 minutes")][:3] == [" ", "10", "5"]
    for t in [*texts, "never seen: 東京 {} 0.5e-3", "a 12345 b\n", ""]:
        assert tok.decode(tok.encode(t)) == t


def test_number_pre_tokenization_writes_each_number_below_1000_in_one_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`numbers` BPE: a run of one to three digits is one token whichever numbers the training texts
    held (all 0..999, checked against each number's own text), so a field's durations all take one
    position; longer runs are pairs from the left (IDs "TR" and two tokens, as `digit-pairs`); the
    forced number ids come on top of `vocab_size` (without that grant the cap cuts most numbers), and
    the words keep their merges; any text round-trips."""
    texts = [f'{{"trainID": "TR{n}", "leaveAt": "07:05", "duration": "105 minutes"}}' for n in (9547, 1856)]
    tok = train_bpe(texts * 20, 400, "numbers")
    for n in range(1000):
        assert [tok.token_text(i) for i in tok.encode(f" {n} minutes")] == [" ", str(n), " minutes"]
    for n in range(0, 10_000, 7):
        assert [tok.token_text(i) for i in tok.encode(f"TR{n:04d}")] == ["TR", f"{n:04d}"[:2], f"{n:04d}"[2:]]
    assert [tok.token_text(i) for i in tok.encode("07:05")] == ["07", ":", "05"]
    assert [tok.token_text(i) for i in tok.encode("12345")] == ["12", "34", "5"]
    pairs = train_bpe(texts * 20, 400, "digit-pairs")  # the same cap: every word merge is kept
    words = {pairs.token_text(i) for i in range(len(SPECIALS), pairs.vocab_size)}
    own = {tok.token_text(i) for i in range(len(SPECIALS), tok.vocab_size)}
    assert {w for w in words if not any(c.isdigit() for c in w)} <= own
    for t in [*texts, "never seen: 東京 {} 0.5e-3", "a 12345 b\n", ""]:
        assert tok.decode(tok.encode(t)) == t
    from systems.backends.mdlm import tokenizer

    monkeypatch.setattr(tokenizer, "FORCED_IDS", {})
    capped = train_bpe(texts * 20, 400, "numbers")
    assert capped.vocab_size == 400
    assert sum(len(capped.encode(f" {n} minutes")) != 3 for n in range(1000)) > 500


def test_high_noise_rows_draw_from_the_top_of_the_schedule_and_zero_is_llada_s_draw() -> None:
    """`high_noise` 0 leaves the random stream exactly LLaDA's U(eps, 1); with a share h, about h of the
    rows lie in [0.9, 1] beyond the uniform draw's own 10%, and each row's t is from its own draw."""
    from systems.backends.mdlm.train import HIGH_NOISE_FROM, TrainConfig, noise_levels

    cfg = TrainConfig()
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    uniform = (1 - cfg.eps) * torch.rand((4000, 1), generator=g2) + cfg.eps
    assert torch.equal(noise_levels(4000, cfg, g1), uniform)
    g3, g4 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    t = noise_levels(4000, TrainConfig(high_noise=0.5), g3)
    base = (1 - cfg.eps) * torch.rand((4000, 1), generator=g4) + cfg.eps
    high = torch.rand((4000, 1), generator=g4) < 0.5
    assert torch.allclose(t[high], HIGH_NOISE_FROM + (1 - HIGH_NOISE_FROM) * base[high])
    assert torch.equal(t[~high], base[~high])
    share = float((t >= HIGH_NOISE_FROM).float().mean())
    assert share == pytest.approx(0.5 + 0.5 * 0.1, abs=0.03)
    assert float(t.min()) >= cfg.eps and float(t.max()) <= 1


@pytest.mark.parametrize("rope", [False, True])
def test_prefix_cache_and_line_inputs_agree_with_the_full_pass(rope: bool) -> None:
    """With line slots (and window vectors), the cached suffix pass still equals the full pass; with
    RoPE the cache holds rotated keys and the suffix is rotated at its own positions."""
    from systems.backends.mdlm.model import Conditioned

    torch.manual_seed(1)
    cfg = ModelConfig(
        vocab_size=50, max_len=16, d_model=16, n_layers=2, n_heads=2, d_ff=32, prompt_width=6, rope=rope
    )
    m = MaskedDiffusionTransformer(ModelConfig(**{**cfg.to_json(), "line_slots": 3, "line_dim": 8})).eval()
    x = torch.randint(5, 50, (2, 12))
    am = torch.ones_like(x, dtype=torch.bool)
    lines = (
        torch.randn(2, 3, 8),
        torch.tensor([[True, True, False], [True, False, False]]),
        torch.randn(2, 6, 8),
    )
    c = Conditioned(m, lines)
    full, cache = c.forward_with_cache(x, am, 7)
    assert torch.allclose(full, c(x, am), atol=1e-5)
    assert torch.allclose(full[:, 7:], c.forward_suffix(cache, x[:, 7:], am), atol=1e-5)
    assert not torch.allclose(full, m(x, am), atol=1e-3)  # the lines matter
    where = torch.rand(x.shape) < 0.5  # the training path (picked rows) is the same distribution
    targets = x[where]
    fast = m.target_log_probs(x, am, where, targets, lines)
    assert torch.allclose(
        fast, full.log_softmax(-1)[where].gather(-1, targets[:, None]).squeeze(-1), atol=1e-5
    )
    one = Conditioned(m, tuple(t[:1] for t in lines))  # one bound row serves many (the MC bound)
    assert torch.allclose(one(x[:1].expand(3, -1), am[:1].expand(3, -1))[2], full[0], atol=1e-5)
    doubled = c(torch.cat([x, x]), torch.cat([am, am]))  # CFG: the second half is unconditional
    assert torch.allclose(doubled[:2], full, atol=1e-5)
    assert torch.allclose(doubled[2:], m(x, am), atol=1e-5)


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
def test_the_thread_count_is_part_of_a_trained_models_identity(tmp_path: Path) -> None:
    """Torch orders float reductions by thread count, so a 2-thread build is another model: it gets its
    own key, the 1-thread key stays what it always was, and a folder a 2-thread training left under the
    1-thread key (before threads entered the key) is trained again instead of served."""
    from systems.backends.mdlm.backend import MDLMParams, train_key

    spec = load("multiwoz/train")
    one, two = MDLMParams(**TINY), MDLMParams(**(TINY | {"threads": 2}))
    assert "threads" not in train_key(one.train_config())
    assert train_key(two.train_config())["threads"] == 2
    assert EmbeddedMDLMBackend.cache_key(spec, one, 0) != EmbeddedMDLMBackend.cache_key(spec, two, 0)
    trained_at_two = MDLMParams(**(TINY | {"train_threads": 2}))  # decoding keeps its own threads
    assert EmbeddedMDLMBackend.cache_key(spec, trained_at_two, 0) == EmbeddedMDLMBackend.cache_key(
        spec, two, 0
    )
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    a = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    b = EmbeddedMDLMBackend.from_spec({"params": TINY | {"threads": 2}}, env)
    assert not b.loaded_from_cache
    apart = max(
        (pa - pb).abs().max().item()
        for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )
    assert apart > 0  # the reason for the key: the same config and seed, other weights
    # a stale folder: the 2-thread model stored under the 1-thread key, as older versions did
    folder_one = tmp_path / "mdlm" / EmbeddedMDLMBackend.cache_key(spec, one, 0)
    folder_two = tmp_path / "mdlm" / EmbeddedMDLMBackend.cache_key(spec, two, 0)
    for name in ("model.pt", "meta.json", "tokenizer.json"):
        (folder_one / name).write_bytes((folder_two / name).read_bytes())
    c = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
    assert not c.loaded_from_cache
    assert json.loads((folder_one / "meta.json").read_text())["train_config"]["threads"] == 1
    for pa, pc in zip(a.model.parameters(), c.model.parameters(), strict=True):
        assert torch.equal(pa, pc)  # retrained at 1 thread: the first model again, bit for bit
    assert EmbeddedMDLMBackend.from_spec({"params": TINY}, env).loaded_from_cache
    assert not [p for p in (tmp_path / "mdlm").iterdir() if p.name.startswith(".")]


def test_the_baselines_key_their_training_by_thread_count_too() -> None:
    from systems.backends.difflm.train import DiffLMTrainConfig
    from systems.backends.diffusion_lm.train import DLMTrainConfig

    for cfg in (DiffLMTrainConfig, DLMTrainConfig):
        assert "threads" not in cfg(threads=1).key()
        assert cfg(threads=2).key()["threads"] == 2
        two = {k: v for k, v in cfg(threads=2).key().items() if k not in ("threads", "backward")}
        assert two == cfg(threads=1).key()  # the thread count and its deterministic backward (bench.kernels)


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
    with torch.no_grad():  # the no-leading-space copy channel: prompt id 7 also copies as id 9
        m.alternate[7] = 9
        m.copy_alt.bias.fill_(0.3)
    x[:, 2] = 7
    targets[3:6] = 9
    fast = m.target_log_probs(x, attn, where, targets)
    full = m(x, attn).log_softmax(-1)[where].gather(-1, targets[:, None]).squeeze(-1)
    assert torch.allclose(fast, full, atol=1e-5)


@pytest.mark.parametrize(("sentinel", "translate"), [(True, False), (False, True), (True, True)])
def test_sentinel_and_translate_heads_train_on_the_distribution_they_sample(
    sentinel: bool, translate: bool
) -> None:
    """The training paths (`target_log_probs`, `translate_log_probs`) read the distribution `forward`
    normalises; with the sentinel a prompt with nothing to copy leaves all mass to the vocabulary."""
    m = perturbed_head_model(3, sentinel, translate)
    m.copyable[10:15] = False
    x = torch.randint(5, 40, (3, 20))
    x[0, :3] = 0
    attn = x != 0
    where = torch.zeros_like(x, dtype=torch.bool)
    where[:, 8:] = torch.rand(3, 12) < 0.6
    targets = torch.randint(5, 40, (int(where.sum()),))
    full = m(x, attn).log_softmax(-1)
    assert torch.allclose(full.exp().sum(-1), torch.ones(3, 20), atol=1e-5)
    picked = full[where].gather(-1, targets[:, None]).squeeze(-1)
    if translate:
        lp, lt, g = m.translate_log_probs(x, attn, where, targets)
        assert bool(((g > 0) & (g < 1)).all()) and bool((lt <= 0).all())
        structure = (targets >= 10) & (targets < 15)
        assert bool(structure.any()) and bool((lt[structure] < -27).all())  # translations: content only
        assert torch.allclose(m.target_log_probs(x, attn, where, targets), lp)  # one entry for callers
        prompt_column = where.clone()
        prompt_column[1, 7] = True  # training never masks the prompt; the response-only head refuses it
        with pytest.raises(ValueError, match="prompt columns"):
            m.translate_log_probs(x, attn, prompt_column, torch.cat([targets, targets[:1]]))
    else:
        lp = m.target_log_probs(x, attn, where, targets)
    assert torch.allclose(lp, picked, atol=1e-5)
    hn = torch.randn(3, 5, 16)
    attn, gate, keep = m._pointer(torch.full((3, 5, 8), -torch.inf), hn)  # no prompt token to copy
    assert torch.equal(attn * gate, torch.zeros(3, 5, 8))
    assert torch.allclose(keep, torch.ones(3, 5, 1)) if sentinel else bool((keep < 1).all())


def test_a_translation_reweights_the_head_s_candidates_and_cannot_veto_them() -> None:
    """With the router fully open, every token keeps at least TRANSLATE_FLOOR / V of the probability the
    head without translation gives it (model._head), so a sure copy survives any translation, and
    structure tokens keep exactly theirs."""
    from systems.backends.mdlm.model import TRANSLATE_FLOOR

    torch.manual_seed(4)
    base_cfg = ModelConfig(
        vocab_size=40, max_len=20, d_model=16, n_layers=2, n_heads=2, d_ff=32, prompt_width=8, sentinel=True
    )
    m = MaskedDiffusionTransformer(ModelConfig(**{**base_cfg.to_json(), "translate": True})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.5 * torch.randn_like(p))
        m.route.bias.fill_(50.0)  # g = 1 everywhere
        m.copyable[10:15] = False  # structure tokens
    base = MaskedDiffusionTransformer(base_cfg).eval()
    missing = base.load_state_dict(m.state_dict(), strict=False)
    assert not missing.missing_keys  # the same head, without the translate route
    x = torch.randint(5, 40, (4, 20))
    attn = torch.ones_like(x, dtype=torch.bool)
    p_base = base(x, attn).softmax(-1)
    p = m(x, attn).softmax(-1)
    assert bool((p >= p_base * TRANSLATE_FLOOR / 40 - 1e-7).all())
    structure = ~m.copyable
    assert torch.allclose(p[..., structure], p_base[..., structure], atol=1e-6)  # values only
    assert not torch.allclose(p, p_base, atol=1e-3)  # and it does re-weight them


@needs_data
def test_named_positions_are_the_first_token_of_a_value_a_set_note_names() -> None:
    """The translate route is supervised at the first token of each value a set note constrains: the
    record text before it ends with that field's key, and the prompt window names the field."""
    import re

    from systems.backends.mdlm.train import TrainConfig, make_batch, prepare

    spec = load("multiwoz/train")
    cfg = TrainConfig(
        vocab_size=400,
        note_kinds=("set",),
        note_prob=1.0,
        note_pool=200,
        max_prompt_tokens=160,
        translate_head=True,
    )
    prep = prepare(spec, cfg)
    rng = random.Random(0)
    rows = named = 0
    for _ in range(3):
        batch = make_batch(prep, spec, cfg, rng)
        assert batch.named is not None
        P = cfg.max_prompt_tokens
        for b in range(batch.ids.shape[0]):
            prompt = prep.tok.decode(t for t in batch.ids[b, :P].tolist() if t >= 5)
            for i in batch.named[b].nonzero().flatten().tolist():
                before = prep.tok.decode(t for t in batch.ids[b, P:i].tolist() if t >= 5)
                key = re.search(r'"(\w+)": "?$', before)
                assert key is not None, before
                assert key.group(1) in prompt
                assert bool(batch.maskable[b, i])
                named += 1
            rows += 1
    assert named >= rows // 4  # set notes are in every prompt; skeleton rows and failed edits have none


@needs_data
def test_value_mask_rows_mask_exactly_every_field_value_at_t_one() -> None:
    """A `value_mask` row (a row with a note) masks the tokens of every field value and nothing else
    (keys, punctuation and padding stay visible) and counts as t = 1; rows without notes keep LLaDA's
    draw, and with the knob at 0 the batch has no such rows and the masks are the plain draw's."""
    import json
    import re

    from systems.backends.mdlm.train import TrainConfig, draw_masks, make_batch, prepare

    spec = load("multiwoz/train")
    cfg = TrainConfig(vocab_size=400, value_mask=1.0, skeleton_fraction=0.0, note_pool=200)
    prep = prepare(spec, cfg)
    batch = make_batch(prep, spec, cfg, random.Random(0))
    assert batch.values is not None
    masked, t = draw_masks(batch, cfg, torch.Generator().manual_seed(0))
    P, rows = cfg.max_prompt_tokens, batch.values.any(dim=1)
    assert 0 < int(rows.sum()) < batch.ids.shape[0]
    for b in rows.nonzero().flatten().tolist():
        assert torch.equal(masked[b], batch.values[b]) and float(t[b]) == 1.0
        ids = batch.ids[b, P:].tolist()
        record = json.loads(prep.tok.decode(i for i in ids if i >= 5))
        shown = "".join(
            "#" if batch.values[b, P + k] else prep.tok.decode([i]) for k, i in enumerate(ids) if i >= 5
        )
        assert re.sub("#+", "#", shown) == json.dumps({k: "#" for k in record})  # values, one run each
    unnoted = TrainConfig(vocab_size=400, value_mask=1.0, skeleton_fraction=0.0, note_pool=200, note_prob=0)
    assert make_batch(prep, spec, unnoted, random.Random(0)).values is None  # only rows with a note
    plain = TrainConfig(vocab_size=400, skeleton_fraction=0.0, note_pool=200)
    batch0 = make_batch(prep, spec, plain, random.Random(0))
    assert batch0.values is None
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    masked0, t0 = draw_masks(batch0, plain, g1)
    t_ref = (1 - plain.eps) * torch.rand((batch0.ids.shape[0], 1), generator=g2) + plain.eps
    assert torch.equal(t0, t_ref)
    assert torch.equal(masked0, batch0.maskable & (torch.rand(batch0.ids.shape, generator=g2) < t_ref))


@needs_data
def test_value_mask_rows_hide_every_value_the_translate_route_is_taught_on() -> None:
    """With `value_mask` and `translate_head` together (the pair that makes set notes steer,
    docs/systems-diffusion.md, "Both routes together"), the first token of a value a set note names is
    a field-value token, so in a value-masked row it is always masked: the route is taught exactly where
    the note is the only source of the value. Rows not drawn keep some named values visible."""
    from systems.backends.mdlm.train import TrainConfig, draw_masks, make_batch, prepare

    spec = load("multiwoz/train")
    cfg = TrainConfig(
        vocab_size=400,
        value_mask=0.5,
        translate_head=True,
        skeleton_fraction=0.0,
        note_pool=200,
        note_prob=1.0,
    )
    prep = prepare(spec, cfg)
    gen, rng = torch.Generator().manual_seed(0), random.Random(0)
    drawn = undrawn = 0
    for _ in range(4):
        batch = make_batch(prep, spec, cfg, rng)
        assert batch.named is not None and batch.values is not None
        assert bool((batch.named & ~batch.maskable).sum() == 0)
        masked, t = draw_masks(batch, cfg, gen)
        rows = batch.values.any(dim=1)
        for b in batch.named.any(dim=1).nonzero().flatten().tolist():
            named = batch.named[b]
            if rows[b]:
                drawn += 1
                assert bool((named <= batch.values[b]).all()) and bool((named <= masked[b]).all())
                assert float(t[b]) == 1.0
            else:
                undrawn += int((named & ~masked[b]).any())
    assert drawn > 0 and undrawn > 0


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
def test_training_prompts_carry_up_to_max_hints_lines_and_the_default_draw_is_unchanged() -> None:
    """`max_train_hints` 5 adds prompts with four and five hint lines, each drawn as often as three; at 3
    the tuple drawn from is the one written before the knob, so the draws, and every model trained before
    it, are unchanged (their cache keys: test_opt_in_knobs_enter_the_cache_key_only_when_on)."""
    from systems.skeleton_prompt import hint_counts, training_parts

    spec = load("multiwoz/train")
    assert hint_counts(3) == (0, 0, 0, 1, 1, 2, 3)  # the draw as it was written before the knob
    assert hint_counts(5) == (0, 0, 0, 1, 1, 2, 3, 4, 5)

    def counts(seed: int, max_hints: int | None) -> list[int]:
        rng = random.Random(seed)
        kw = {} if max_hints is None else {"max_hints": max_hints}
        return [len(training_parts(spec, t, rng, **kw).hints) for t in spec.references[:300]]

    assert counts(4, None) == counts(4, 3)
    five = [c for seed in range(6) for c in counts(seed, 5)]
    share = {k: five.count(k) / len(five) for k in range(6)}
    assert max(five) == 5 and share[0] > 0.25
    for k in (3, 4, 5):  # each 1/9 of the draws (MultiWOZ records have eight short fields)
        assert abs(share[k] - 1 / 9) < 0.04, share


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


def _train_in_a_worker(cache_dir: str, barrier: object, out: object) -> None:
    spec = load("multiwoz/train")
    barrier.wait()  # type: ignore[attr-defined]
    backend = EmbeddedMDLMBackend.from_spec(
        {"params": TINY}, SimpleNamespace(cache_dir=Path(cache_dir), task=spec, seed=5)
    )
    out.put(backend.loaded_from_cache)  # type: ignore[attr-defined]


@needs_data
def test_two_workers_that_need_one_model_train_it_once(tmp_path: Path) -> None:
    """The Table 1 run trained Self-Instruct's model twice at once (llada and promptbreeder cells)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_train_in_a_worker, args=(str(tmp_path), barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    assert sorted([out.get(timeout=5), out.get(timeout=5)]) == [False, True]  # one trained, one loaded
    assert len(list((tmp_path / "mdlm").iterdir())) == 1


@pytest.mark.parametrize("n_lines", [1, 2, 4, 6, 8, 12, 20])
def test_the_token_window_keeps_the_prompts_tail_whatever_its_length(n_lines: int) -> None:
    """window_ids keeps the last `max_tokens - 1` tokens of the window text, or all of it when shorter.
    mdlm-9 kept only the last `max_tokens - 1 - n` of a window of n tokens when n was between half the
    width and the width: with 5 hint lines the DLM saw the last one and a half."""
    from systems.backends.mdlm.conditioning import window_ids, window_lines

    lines = [f'field{i}: "value {i} here"' for i in range(n_lines)]
    prompt = "\n".join(["An instruction the window leaves out.", 'Example: {"a": 1}', *lines])
    tok = train_bpe(["\n".join(lines), "An instruction"] * 3, 300)
    full: list[int] = []
    for i, line in enumerate(window_lines(prompt)):  # the window text, encoded line by line
        full += (list(tok.encode("\n")) if i else []) + list(tok.encode_line(line))
    for width in (8, 16, 24, 32, 48, 64):
        ids, of = window_ids(tok, prompt, width)
        assert ids[-1] == tok.sep_id and len(ids) == len(of)
        assert ids[:-1] == full[-(width - 1) :] if len(full) >= width - 1 else ids[:-1] == full
        assert of[-2] == lines[-1]


@needs_data
def test_default_training_steps_follow_record_length_and_reference_count() -> None:
    """`train_steps: None` gives 1800 steps to tasks with short records and at least 64 references, and
    900 to the rest, decided from the references' 95th-percentile JSON length (computed here
    independently with numpy) and their count, and resolved before the cache key: the default on
    MultiWOZ is the same model as an explicit `train_steps: 1800`."""
    import numpy as np

    from bench.tasks import load_task
    from systems.backends.mdlm.backend import (
        LONG_RECORD_STEPS,
        MIN_REFERENCES_FOR_SHORT_STEPS,
        SHORT_RECORD_CHARS,
        SHORT_RECORD_STEPS,
        MDLMParams,
        auto_train_steps,
    )

    cases = [  # (task, references, expected steps)
        ("multiwoz/train", 64, SHORT_RECORD_STEPS),  # suites/aod.yaml, suites/table1.yaml
        ("multiwoz/train", 63, LONG_RECORD_STEPS),  # short records, too few references
        ("multiwoz/train", 32, LONG_RECORD_STEPS),  # suites/dlm_few_references.yaml
        ("superni/task1192_food_flavor_profile", 10, LONG_RECORD_STEPS),  # the 10 it memorised at 1800
        ("truthfulqa", 32, LONG_RECORD_STEPS),
        ("self_instruct", 32, LONG_RECORD_STEPS),
    ]
    for name, n_references, steps in cases:
        spec = load_task(name, n_references=n_references, n_holdout=8)
        p95 = np.percentile([len(json.dumps(r, ensure_ascii=False)) for r in spec.references], 95)
        short = p95 <= SHORT_RECORD_CHARS and len(spec.references) >= MIN_REFERENCES_FOR_SHORT_STEPS
        assert short == (steps == SHORT_RECORD_STEPS), (name, n_references)
        assert auto_train_steps(spec) == steps, (name, n_references)
        resolved = MDLMParams().for_task(spec)
        assert resolved.train_steps == steps and resolved.train_config().steps == steps
        assert EmbeddedMDLMBackend.cache_key(spec, MDLMParams(), 0) == EmbeddedMDLMBackend.cache_key(
            spec, MDLMParams(train_steps=steps), 0
        )
    superni = load_task("superni/task1192_food_flavor_profile", n_references=10, n_holdout=10)
    # its records are short: the count alone keeps it at 900
    assert np.percentile([len(json.dumps(r, ensure_ascii=False)) for r in superni.references], 95) <= 400
    spec = load_task("multiwoz/train", n_references=32, n_holdout=8)
    assert MDLMParams(train_steps=900).for_task(spec).train_steps == 900  # an explicit value stays
