"""Schema-constrained diffusion decoding (systems/backends/schema_dfa.py).

The automaton comes from outlines-core; the checks here are independent of it: the Viterbi path against
brute force over every token sequence, with a hand-written regular expression as the language; and the
sampler's outputs against `json.loads` and jsonschema, for random toy models, the embedded DLM and the
LLaDA-8B adapter's code path.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import pytest
from tiny_dlm import TINY_DLM

torch = pytest.importorskip("torch")
pytest.importorskip("outlines_core")

from bench.errors import BenchError  # noqa: E402
from bench.types import GenerationRequest, SamplingParams  # noqa: E402
from systems.backends.llada_sampler import SamplerConfig, cut_at_eos, denoise  # noqa: E402
from systems.backends.schema_dfa import (  # noqa: E402
    SchemaChooser,
    automaton_for,
    build_automaton,
    schema_regex,
    viterbi,
)

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
DATA = Path(os.environ["BENCH_DATA_DIR"])
needs_data = pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")

MASK, EOS = 0, 1
INT_SCHEMA = {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}
# the language of INT_SCHEMA with at most one space between JSON tokens, written by hand
INT_LANGUAGE = re.compile(r'\{ ?"k" ?: ?-?(0|[1-9][0-9]*) ?\}')


def brute_force(vocab: list[bytes | None], scores: torch.Tensor) -> float:
    """The best total score over every token sequence whose text is in INT_LANGUAGE, then only EOS."""
    n, v = scores.shape
    best = -float("inf")
    for seq in itertools.product(range(v), repeat=n):
        if MASK in seq:
            continue
        ends = [i for i, t in enumerate(seq) if t == EOS]
        cut = ends[0] if ends else n
        if any(t != EOS for t in seq[cut:]):
            continue
        text = b"".join(vocab[t] for t in seq[:cut]).decode()  # type: ignore[misc]
        if INT_LANGUAGE.fullmatch(text):
            best = max(best, float(sum(scores[i, t] for i, t in enumerate(seq))))
    return best


def test_viterbi_finds_the_best_accepted_sequence_as_brute_force_does() -> None:
    vocab: list[bytes | None] = [None, None, b'{"k":', b"1", b"0", b"}", b" ", b'{"k": 7}']
    auto = build_automaton(schema_regex(INT_SCHEMA), vocab, [EOS])
    gen = torch.Generator().manual_seed(0)
    checked = 0
    for n in (3, 4, 5):
        for _ in range(12):
            scores = torch.randn((n, len(vocab)), generator=gen, dtype=torch.float64)
            scores[:, MASK] = -torch.inf
            found = viterbi(auto, auto.initial, scores)
            want = brute_force(vocab, scores)
            assert found is not None and want > -float("inf")
            path, total = found
            assert total == pytest.approx(want)
            assert total == pytest.approx(float(scores.gather(1, path.unsqueeze(1)).sum()))
            resp, _ = cut_at_eos(path.tolist(), [EOS])
            assert INT_LANGUAGE.fullmatch(b"".join(vocab[t] for t in resp).decode())  # type: ignore[misc]
            checked += 1
    assert checked == 36
    assert auto.shortest == 1  # the one-token record
    assert build_automaton(schema_regex(INT_SCHEMA), vocab[:-1], [EOS]).shortest == 3  # {"k": 1 }
    # a window too short for any record: nothing is accepted (the one-token record ruled out)
    one = torch.zeros((1, len(vocab)), dtype=torch.float64)
    assert viterbi(auto, auto.initial, one) is not None
    one[0, 7] = -torch.inf
    assert viterbi(auto, auto.initial, one) is None


def test_key_order_follows_the_schema_and_bad_schemas_are_clear_errors() -> None:
    two = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}}
    rx = schema_regex({**two, "required": ["b", "a"]})
    assert rx.index('"b"') < rx.index('"a"')
    with pytest.raises(BenchError, match="cannot compile the schema"):
        schema_regex({"type": "object", "properties": {"x": {"type": "no-such-type"}}})


@needs_data
def test_an_automaton_that_does_not_build_in_time_is_refused_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Some JSONSchemaBench schemas never finish building (this one ran past 120 s over a 256-byte
    vocabulary); the build runs in a child stopped at the budget, and the refusal is remembered."""
    import time

    from systems.backends import schema_dfa

    schema = json.loads((DATA / "jsonschemabench/Github_easy/o10318.json").read_text())
    vocab: list[bytes | None] = [None, None] + [bytes([b]) for b in range(256)]
    monkeypatch.setattr(schema_dfa, "BUILD_SECONDS", 1.0)
    with pytest.raises(BenchError, match="did not build within 1 s"):
        automaton_for(schema, vocab, [EOS])
    t0 = time.perf_counter()
    with pytest.raises(BenchError, match="did not build within 1 s"):
        automaton_for(schema, vocab, [EOS])
    assert time.perf_counter() - t0 < 0.5  # remembered, not built again


# ---- the sampler under the constraint, with random toy models ----------------------------------------

TOY_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "day": {"type": "string", "enum": ["mon", "fri"]},
        "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
    },
    "required": ["name", "day", "n", "tags"],
    "additionalProperties": False,
}


def toy_vocab() -> list[bytes | None]:
    """Two specials, printable ASCII bytes, and a few JSON-shaped merges."""
    merges = [b'{"', b'":', b'", "', b'"]', b'["', b' "', b"name", b"day", b"mon", b"fri", b"tags", b'"}']
    return [None, None] + [bytes([c]) for c in range(32, 127)] + merges


class ToyModel:
    """Random but deterministic logits that depend on the canvas (a fixed embedding, mixed by a fixed
    random matrix over positions), so committed tokens change later predictions."""

    def __init__(self, vocab: int, length: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.emb = torch.randn((vocab, 16), generator=g)
        self.out = torch.randn((16, vocab), generator=g) * 2
        self.mix = torch.randn((length, length), generator=g) / length**0.5

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        h = torch.einsum("ij,bjd->bid", self.mix, self.emb[x])
        return h @ self.out


@pytest.mark.parametrize(
    "config",
    [
        SamplerConfig(steps=8, temperature=0.0),
        SamplerConfig(steps=8, temperature=0.8),
        SamplerConfig(steps=12, block_length=16, temperature=0.5),
        SamplerConfig(steps=6, threshold=0.5, temperature=0.5),
        SamplerConfig(steps=10, remasking="random", temperature=1.0),
    ],
    ids=["greedy", "t0.8", "blocks", "threshold", "random-remasking"],
)
def test_every_constrained_record_is_schema_valid(config: SamplerConfig) -> None:
    vocab = toy_vocab()
    auto = automaton_for(TOY_SCHEMA, vocab, [EOS])
    prompt, gen = 3, 48
    validator = jsonschema.Draft202012Validator(TOY_SCHEMA)
    for model_seed in range(4):
        model = ToyModel(len(vocab), prompt + gen, model_seed)
        canvas = torch.full((6, prompt + gen), MASK, dtype=torch.long)
        canvas[:, :prompt] = torch.tensor([40, 41, 42])
        chooser = SchemaChooser(auto, prompt, MASK)
        out = denoise(model, canvas, prompt, MASK, config, seed=100 * model_seed, choose_x0=chooser)
        assert chooser.unsatisfiable == 0 and chooser.calls > 0
        for row in out.x[:, prompt:].tolist():
            resp, _ = cut_at_eos(row, [EOS])
            assert all(t == EOS for t in row[len(resp) :])
            record = json.loads(b"".join(vocab[t] for t in resp).decode())  # type: ignore[misc]
            assert validator.is_valid(record), record
        # the constraint changes what an unconstrained run writes (a random model rarely writes JSON)
        plain = denoise(model, canvas, prompt, MASK, config, seed=100 * model_seed)
        assert not torch.equal(plain.x, out.x)


def test_a_window_too_short_for_any_record_falls_back_to_the_plain_sampler() -> None:
    vocab = toy_vocab()
    auto = automaton_for(TOY_SCHEMA, vocab, [EOS])
    model = ToyModel(len(vocab), 3 + 5, 0)
    canvas = torch.full((2, 8), MASK, dtype=torch.long)
    canvas[:, :3] = 40
    chooser = SchemaChooser(auto, 3, MASK)
    cfg = SamplerConfig(steps=5, temperature=0.5)
    out = denoise(model, canvas, 3, MASK, cfg, seed=1, choose_x0=chooser)
    assert chooser.unsatisfiable == chooser.calls > 0
    assert torch.equal(out.x, denoise(model, canvas, 3, MASK, cfg, seed=1).x)


# ---- the backends -------------------------------------------------------------------------------------


@needs_data
def test_the_embedded_dlm_writes_valid_truthfulqa_records_under_the_grammar(tmp_path: Path) -> None:
    """A barely trained DLM (30 steps) writes no JSON on its own; with `grammar` every record validates."""
    from bench.tasks import load_task
    from benchmarks.diffusion.steering import _OneBackend
    from metrics.extract import extract_record
    from systems.backends.mdlm import EmbeddedMDLMBackend
    from systems.llada import LLaDASystem

    spec = load_task("truthfulqa", n_references=32, n_holdout=8)
    be = EmbeddedMDLMBackend.from_spec(
        {"params": TINY_DLM | {"vocab_size": 400}}, SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    )
    ctx = _OneBackend(be, tmp_path)
    validator = jsonschema.Draft202012Validator(spec.schema)
    res = LLaDASystem({"grammar": True}).generate(spec, 6, 0, ctx)
    assert res.trace[0]["grammar"] is True
    records = [extract_record(s.text).record for s in res.samples]
    assert all(isinstance(r, dict) and validator.is_valid(r) for r in records), [s.text for s in res.samples]
    assert list(records[0]) == list(spec.schema["properties"])  # the schema's key order
    plain = LLaDASystem({}).generate(spec, 6, 0, ctx)
    assert [s.text for s in plain.samples] != [s.text for s in res.samples]
    # with the length drawn first (conditioned on the shortest record the automaton allows), too
    lf = EmbeddedMDLMBackend.from_spec(
        {"params": TINY_DLM | {"vocab_size": 400, "length_first": True}},
        SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0),
    )
    assert lf.loaded_from_cache
    drawn = LLaDASystem({"grammar": True}).generate(spec, 6, 1, _OneBackend(lf, tmp_path))
    assert all(validator.is_valid(json.loads(x.text)) for x in drawn.samples)
    # the request carries the schema, so cached calls of the two never mix
    req = GenerationRequest.chat("x", SamplingParams(temperature=0.5, json_schema=spec.schema), 0, 0)
    assert json.loads(be.generate([req])[0].text)["category"] in spec.schema["properties"]["category"]["enum"]


def test_hf_token_bytes_spell_what_the_tokenizer_decodes() -> None:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from systems.backends.schema_dfa import hf_token_bytes

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = ['{"city": "ély", "n": 12}', "naïve café ☃ über"] * 10
    tk.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=320,
            special_tokens=["<pad>", "<eot>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eot>")
    spelled = hf_token_bytes(fast)
    assert spelled[0] is None and spelled[1] is None
    for text in corpus + ["unseen: 東京"]:
        ids = fast(text, add_special_tokens=False)["input_ids"]
        assert b"".join(spelled[i] for i in ids).decode() == fast.decode(ids) == text  # type: ignore[misc]


def test_llada_grammar_is_llada_with_the_grammar_on_and_the_skeleton_refuses_it() -> None:
    from bench.registry import SYSTEMS, load_builtins
    from systems.llada import LLaDASkeletonSystem

    load_builtins()
    system = SYSTEMS.get("llada-grammar")({"steps": 6})
    assert system.params.grammar is True and system.params.steps == 6
    assert SYSTEMS.get("llada")({}).params.grammar is False
    with pytest.raises(BenchError, match="use llada-grammar"):
        LLaDASkeletonSystem({"grammar": True})


def test_hf_token_bytes_follow_sentencepiece_conventions() -> None:
    """A Llama-style tokenizer (Metaspace `▁`, `<0xNN>` byte fallback): the bytes are the text with the
    leading space SentencePiece prepends (the decoder strips it)."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    from systems.backends.schema_dfa import hf_token_bytes

    tk = Tokenizer(models.BPE(byte_fallback=True))
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    tk.decoder = decoders.Sequence(
        [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    byte_pieces = [f"<0x{b:02X}>" for b in range(256)]
    corpus = ['{"city": "ely", "n": 12}', "a cafe over there"] * 10
    tk.train_from_iterator(
        corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<eot>", *byte_pieces])
    )
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", eos_token="<eot>")
    spelled = hf_token_bytes(fast)
    for text in ['{"city": "ély", "n": 12}', "naïve café ☃", "東京"]:
        ids = fast(text, add_special_tokens=False)["input_ids"]
        assert any(p.startswith("<0x") for p in fast.convert_ids_to_tokens(ids))  # byte fallback in use
        spelled_text = b"".join(spelled[i] for i in ids).decode()  # type: ignore[misc]
        assert spelled_text == " " + fast.decode(ids) and fast.decode(ids) == text
