"""The LLaDA-8B adapter's code path, run end to end with a tiny randomly initialised transformers model.

LLaDA-8B itself needs 16 GB of weights and a GPU; the adapter's loading (AutoModel / AutoTokenizer from
a local folder), chat template, batching, sampling, infilling and likelihood bound are exercised here
with a 2-layer BERT masked LM saved to disk, and the missing-weights error is checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from bench.errors import BackendUnavailable, BenchError  # noqa: E402
from bench.types import GenerationRequest, SamplingParams, TaskSpec  # noqa: E402
from systems.backends.llada_hf import LLaDAHFBackend, LLaDAHFParams  # noqa: E402
from systems.llada import LLaDASkeletonSystem  # noqa: E402

CHAT = "{% for m in messages %}<|start|>{{ m['role'] }}\n{{ m['content'] }}<|eot|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer BERT masked LM and a byte-level BPE tokenizer with a chat template, saved like a hub repo."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder = tmp_path_factory.mktemp("tiny-llada")
    specials = ["<|pad|>", "<|eot|>", "<|start|>", "<|mdm_mask|>"]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    corpus = [
        json.dumps({"day": d, "price": p, "city": c})
        for d in ("monday", "friday")
        for p in (3, 12)
        for c in ("ely", "cambridge")
    ]
    tk.train_from_iterator(
        corpus * 5,
        trainers.BpeTrainer(
            vocab_size=300, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<|pad|>", eos_token="<|eot|>", mask_token="<|mdm_mask|>"
    )
    fast.chat_template = CHAT
    fast.save_pretrained(folder)
    cfg = transformers.BertConfig(
        vocab_size=len(fast),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    transformers.BertForMaskedLM(cfg).save_pretrained(folder)
    return folder


def spec() -> TaskSpec:
    refs = tuple(
        {"day": d, "price": p, "city": c}
        for d in ("monday", "friday")
        for p in (3, 12)
        for c in ("ely", "cambridge")
    )
    schema = {
        "type": "object",
        "properties": {
            "day": {"type": "string", "enum": ["monday", "friday"]},
            "price": {"type": "integer"},
            "city": {"type": "string", "minLength": 1},
        },
        "required": ["day", "price", "city"],
        "additionalProperties": False,
    }
    return TaskSpec("toy/trains", "Generate a train.", schema, refs, refs[:2], fingerprint="toy")


def backend(folder: Path, **params: object) -> LLaDAHFBackend:
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    base = {
        "path": str(folder),
        "device_map": None,
        "dtype": "float32",
        "mask_id": tok.mask_token_id,
        "eos_ids": [tok.eos_token_id],
        "gen_length": 24,
        "block_length": 8,
        "steps": 6,
        "max_input_tokens": 64,
        "auto_class": "AutoModelForMaskedLM",
    }
    base.update(params)
    return LLaDAHFBackend.from_spec(
        {"model": "tiny", "params": base}, SimpleNamespace(cache_dir=folder, task=None, seed=0)
    )


class OneBackend:
    """A run context whose every role is served by one backend."""

    profile_name = "test"

    def __init__(self, be: LLaDAHFBackend, cache_dir: Path) -> None:
        self.be, self.cache_dir = be, str(cache_dir)

    def backend(self, role: str, task: TaskSpec | None = None) -> LLaDAHFBackend:
        return self.be


def test_missing_weights_raise_backend_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BackendUnavailable, match="huggingface-cli download GSAI-ML/LLaDA-8B-Instruct"):
        LLaDAHFBackend.from_spec(
            {
                "model": "GSAI-ML/LLaDA-8B-Instruct",
                "params": {"path": str(tmp_path / "absent"), "device_map": None},
            },
            SimpleNamespace(cache_dir=tmp_path, task=None, seed=0),
        )


def test_paper_defaults() -> None:
    p = LLaDAHFParams()
    assert (p.steps, p.max_input_tokens, p.dtype, p.cfg_scale, p.mask_id) == (
        12,
        1024,
        "float16",
        0.0,
        126336,
    )


def test_generate_through_chat_template_is_batched_and_seeded(tiny_dir: Path) -> None:
    be = backend(tiny_dir)
    ids = be.prompt_ids((("user", "Generate a train."),))
    assert be.tok.decode(ids).startswith("<|start|>user\nGenerate a train.<|eot|><|start|>assistant")
    sp = SamplingParams(temperature=1.0)
    reqs = [GenerationRequest.chat("Generate a train.", sp, seed=3, sample_index=i) for i in range(3)]
    reqs.append(
        GenerationRequest.chat("A much longer prompt that needs left padding in the batch.", sp, 3, 3)
    )
    a = be.generate(reqs)
    b = be.generate(reqs)
    alone = be.generate([reqs[1]])
    assert [c.text for c in a] == [c.text for c in b]
    assert a[1].text == alone[0].text  # a row does not depend on its batch
    assert len({c.text for c in a[:3]}) > 1  # sample index changes the noise
    assert all(c.nfe == 6 for c in a)  # 3 blocks x 2 steps, one pass each
    assert all(c.tokens_in > 0 for c in a)
    ident = be.identity()
    assert ident["kind"] == "llada_hf" and ident["sampler_defaults"]["steps"] == 6


def test_choice_temperature_reaches_the_sampler_through_the_llada_system(tiny_dir: Path) -> None:
    """`llada` params `choice_temperature` travel as a sampler knob to LLaDA-8B's code path: with the
    same seeds the commit-order noise changes the records, and a bad combination is the sampler's clear
    error (so the knob was not dropped on the way)."""
    from bench.errors import BenchError
    from systems.llada import LLaDASystem

    be = backend(tiny_dir, gen_length=16)
    s = spec()

    def texts(params: dict) -> list[str]:
        res = LLaDASystem({"temperature": 1.0, "k_shots": 0, **params}).generate(
            s, 4, 0, OneBackend(be, tiny_dir)
        )
        return [x.text for x in res.samples]

    assert texts({}) == texts({})
    assert texts({"choice_temperature": 4.5}) != texts({})
    with pytest.raises(BenchError, match="choice_temperature"):
        texts({"choice_temperature": 1.0, "threshold": 0.9})
    assert "choice_temperature" not in be.identity()["sampler_defaults"]  # older identities unchanged


def test_skeleton_constraints_make_even_a_random_model_schema_valid(tiny_dir: Path) -> None:
    """Structure, enum snapping and number constraints come from the skeleton, not from the model."""
    import jsonschema

    be = backend(tiny_dir, gen_length=48)

    s = spec()
    res = LLaDASkeletonSystem({"temperature": 1.0}).generate(s, 6, 0, OneBackend(be, tiny_dir))
    assert [x.index for x in res.samples] == list(range(6))
    for x in res.samples:
        rec = json.loads(x.text)
        jsonschema.validate(rec, s.schema)
    assert res.usage.nfe > 0 and res.usage.generator_calls == 6


def test_grammar_makes_even_a_random_model_write_whole_valid_records(tiny_dir: Path) -> None:
    """`llada` with `grammar`: the schema's token automaton picks x0 (systems/backends/schema_dfa.py), so
    the record's structure, key order and enum come from the schema, in blocks of 8 over 48 positions."""
    import jsonschema

    from systems.llada import LLaDASystem

    be = backend(tiny_dir, gen_length=48)
    s = spec()
    res = LLaDASystem({"grammar": True, "temperature": 1.0}).generate(s, 6, 0, OneBackend(be, tiny_dir))
    for x in res.samples:
        rec = json.loads(x.text)
        jsonschema.validate(rec, s.schema)
        assert list(rec) == ["day", "price", "city"]
    plain = LLaDASystem({"temperature": 1.0}).generate(s, 6, 0, OneBackend(be, tiny_dir))
    assert [x.text for x in plain.samples] != [x.text for x in res.samples]


def test_grammar_on_per_item_tasks_scores_a_refused_schema_and_goes_on(tiny_dir: Path) -> None:
    """JSONSchemaBench-style items: each sample decodes under its own item's schema; an item whose schema
    the automaton cannot be built for is a scored sample with no text that says why."""
    from dataclasses import replace

    from bench.types import TaskItem
    from systems.llada import LLaDASystem

    be = backend(tiny_dir, gen_length=48)
    base = spec()
    odd = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}
    items = (TaskItem("good", base.schema, "Generate a train."), TaskItem("odd", odd, "Generate a thing."))
    s = replace(base, items=items)
    res = LLaDASystem({"grammar": True}).generate(s, 4, 0, OneBackend(be, tiny_dir))
    assert [x.index for x in res.samples] == [0, 1, 2, 3]
    for x in res.samples[0::2]:
        assert x.meta["item_id"] == "good" and list(json.loads(x.text)) == ["day", "price", "city"]
    for x in res.samples[1::2]:
        assert x.text == "" and x.finish_reason == "refused" and x.meta["item_id"] == "odd"
        assert "cannot compile the schema" in x.meta["grammar_refused"]
    assert res.trace[0]["grammar_refused"] == 2
    with pytest.raises(BenchError, match="cannot compile the schema"):  # a task's own schema: fails early
        LLaDASystem({"grammar": True}).generate(replace(base, schema=odd), 2, 0, OneBackend(be, tiny_dir))


def test_grammar_on_a_backend_without_an_automaton_is_a_clear_error(tiny_dir: Path) -> None:
    """A `dlm` role bound to a runtime that cannot decode under a schema's automaton (here the real
    llama.cpp backend of SmolLM2; an OpenAI server alike) fails before any generation and names it,
    instead of silently sampling unconstrained records under the `llada-grammar` name."""
    from systems.backends.llama_cpp import LlamaCppBackend
    from systems.llada import LLaDASystem

    llama = LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct"})
    calls: list[object] = []
    llama.generate = lambda reqs: calls.append(reqs)  # type: ignore[method-assign]
    with pytest.raises(BenchError, match="`grammar` needs a diffusion backend .* LlamaCppBackend does not"):
        LLaDASystem({"grammar": True}).generate(spec(), 2, 0, OneBackend(llama, tiny_dir))  # type: ignore[arg-type]
    assert calls == []


def test_likelihood_bound_is_finite_and_positive(tiny_dir: Path) -> None:
    be = backend(tiny_dir)
    ((bound, n),) = be.nll(['{"day": "monday"}'], n_mc=8, prompt="Generate a train.")
    assert n > 0 and 0 < bound < float("inf")


def test_canvas_comes_from_the_task_when_no_gen_length_is_set(tiny_dir: Path) -> None:
    """A fixed canvas cut long records and charged the cut to the model; unset, it is the task's need."""
    from systems.gen_limits import dlm_response_shape, task_max_tokens
    from systems.llada import LLaDASystem

    be = backend(tiny_dir, gen_length=None, block_length=32, steps=12)
    seen: list[dict] = []
    real = be.generate

    def spy(requests):  # noqa: ANN001, ANN202 - records what the system asked for, then runs the model
        seen.extend(dict(r.params.extra) for r in requests)
        return real(requests)

    be.generate = spy  # type: ignore[method-assign]

    s = spec()
    res = LLaDASystem({"k_shots": 0}).generate(s, 2, 0, OneBackend(be, tiny_dir))
    assert len(res.samples) == 2
    assert {x["gen_length"] for x in seen} == {task_max_tokens(s)}
    # blocks never outnumber the steps, and the block is the smallest multiple of 32 that does it
    assert dlm_response_shape(s, 12) == (task_max_tokens(s), 32)
    long_refs = tuple({"day": "monday " * 150, "price": 1, "city": "x"} for _ in range(3))
    gen, block = dlm_response_shape(TaskSpec("t", "", s.schema, long_refs, (), fingerprint="t"), 12)
    assert gen > 384 and block % 32 == 0 and -(-gen // block) <= 12 < -(-gen // (block - 32))
