"""The transformers backend runs SmolLM2 from the same GGUF file as llama.cpp (second runtime, same model).

Checked against llama.cpp itself: the same rendered chat template and prompt token count, sensible
greedy output, left-padded batches that do not change a row's result, per-row seeded sampling, beam
search, and NLL close to llama.cpp's on the same texts. Quantization without CUDA is refused clearly.
"""

from __future__ import annotations

import math

import pytest

from bench.errors import BackendUnavailable
from bench.types import GenerationRequest, SamplingParams
from systems.backends.hf import HFBackend, RowSeededSampler

SPEC = {"backend": "hf", "model": "smollm2-135m-instruct", "params": {"dtype": "float32", "batch_size": 4}}
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def test_bitsandbytes_quantization_without_cuda_is_refused_before_loading():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for quant in ("4bit", "8bit"):
        spec = {
            "backend": "hf",
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "params": {"quantization": quant},
        }
        with pytest.raises(
            BackendUnavailable, match=rf"{quant} quantization uses bitsandbytes, which needs a CUDA GPU"
        ):
            HFBackend.from_spec(spec)


def test_row_seeded_sampler_draws_from_the_filtered_distribution():
    """Gumbel-max with top-k 2: only the two best tokens are ever chosen, in proportion to their mass."""
    torch = pytest.importorskip("torch")
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0]])
    picks = []
    for s in range(4000):
        proc = RowSeededSampler([s], temperature=1.0, top_k=2, top_p=1.0)
        picks.append(int(proc(None, logits.clone()).argmax()))
    share0 = picks.count(0) / len(picks)
    assert set(picks) == {0, 1}
    assert share0 == pytest.approx(math.exp(2) / (math.exp(2) + math.exp(1)), abs=0.03)
    nucleus = RowSeededSampler([0], temperature=1.0, top_k=0, top_p=0.5)(None, logits.clone())
    assert torch.isinf(nucleus[0, 1:]).all()  # token 0 alone holds > 50 % of the mass


@pytest.fixture(scope="module")
def hf():
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    backend = HFBackend.from_spec(SPEC)
    backend.load()
    return backend


@pytest.fixture(scope="module")
def llama():
    llama_cpp = pytest.importorskip("llama_cpp")
    from systems.backends.llama_cpp import resolve_gguf

    return llama_cpp.Llama(model_path=str(resolve_gguf("smollm2-135m-instruct")), n_ctx=512, verbose=False)


def chat(
    text: str, params: SamplingParams = GREEDY, seed: int = 0, index: int = 0, system: str | None = None
):
    return GenerationRequest.chat(text, params, seed=seed, sample_index=index, system=system)


@pytest.mark.slow
def test_same_chat_template_and_prompt_tokens_as_llama_cpp(hf, llama):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    meta = llama.metadata
    formatter = Jinja2ChatFormatter(
        template=meta["tokenizer.chat_template"],
        eos_token=llama.detokenize([llama.token_eos()]).decode(),
        bos_token=llama.detokenize([llama.token_bos()]).decode(),
    )
    for messages in [(("user", "Name a city."),), (("system", "Answer in JSON."), ("user", "Name a city."))]:
        ours = hf.render_prompt(messages)
        theirs = formatter(messages=[{"role": r, "content": c} for r, c in messages]).prompt
        assert ours == theirs
        [c] = hf.generate([GenerationRequest(messages, GREEDY, seed=0)])
        assert c.tokens_in == len(llama.tokenize(ours.encode(), add_bos=False, special=True))


@pytest.mark.slow
def test_greedy_answer_is_sensible_and_usage_is_counted(hf, llama):
    [c] = hf.generate([chat("What is the capital of France? Answer in one word.")])
    assert "paris" in c.text.lower()
    assert c.finish_reason == "stop" and c.seconds > 0
    # generated tokens = the text's tokens plus the end-of-turn token
    assert abs(c.tokens_out - (len(llama.tokenize(c.text.encode(), add_bos=False)) + 1)) <= 1


@pytest.mark.slow
def test_left_padded_batch_gives_each_row_its_own_result(hf):
    short = chat("Name one fruit.")
    long = chat("Write a long list of ten different animals that live in the ocean, one per line, please.")
    [alone] = hf.generate([short])
    batched = hf.generate([long, short])
    assert batched[1].text == alone.text
    assert batched[1].tokens_in == alone.tokens_in < batched[0].tokens_in


@pytest.mark.slow
def test_seeded_sampling_is_per_row_and_reproducible(hf):
    p = SamplingParams(temperature=1.0, top_p=0.95, top_k=50, max_tokens=10)
    reqs = [chat("Invent a name for a cat.", p, seed=7, index=i) for i in range(3)]
    together = hf.generate(reqs)
    alone = hf.generate([reqs[2]])
    assert alone[0].text == together[2].text  # independent of what shares the batch
    assert len({c.text for c in together}) > 1  # sample indexes draw differently
    assert [c.text for c in hf.generate(reqs)] == [c.text for c in together]


@pytest.mark.slow
def test_beam_search_is_deterministic(hf):
    p = SamplingParams(temperature=0.0, num_beams=3, max_tokens=10)
    a = hf.generate([chat("Name a colour.", p)])
    b = hf.generate([chat("Name a colour.", p)])
    assert a[0].text == b[0].text and a[0].text.strip()


@pytest.mark.slow
def test_nll_matches_llama_cpp_on_the_same_texts(hf):
    """Each text token is scored given BOS; llama.cpp (Q4_1 arithmetic) computes the same within 15 %."""
    import numpy as np
    from llama_cpp import Llama

    from systems.backends.llama_cpp import resolve_gguf

    llm = Llama(
        model_path=str(resolve_gguf("smollm2-135m-instruct")), n_ctx=512, logits_all=True, verbose=False
    )
    texts = [
        '{"name": "city centre north b and b", "area": "north", "stars": "0"}',
        "The cat sat on the mat.",
    ]
    for (nll, count), text in zip(hf.nll(texts), texts, strict=True):
        ids = [llm.token_bos()] + llm.tokenize(text.encode(), add_bos=False)
        llm.reset()
        llm.eval(ids)
        logits = np.asarray(llm.scores[: len(ids) - 1], dtype=np.float64)
        logz = np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
        reference = float(-(logits[np.arange(len(ids) - 1), ids[1:]] - logz).sum())
        assert count == len(ids) - 1
        assert math.exp(nll / count) == pytest.approx(math.exp(reference / count), rel=0.15)


@pytest.mark.slow
def test_nll_windows_score_every_token_once(hf):
    model, _ = hf.load()
    text = "one two three four five six seven eight nine ten eleven twelve " * 3
    [(full, n_full)] = hf.nll([text])
    saved = model.config.max_position_embeddings
    try:
        model.config.max_position_embeddings = 16
        [(windowed, n_win)] = hf.nll([text])
    finally:
        model.config.max_position_embeddings = saved
    assert n_win == n_full > 16
    assert windowed >= full * 0.9  # less context can only help so little; usually it costs


@pytest.mark.slow
def test_stop_at_record_ends_rows_at_their_first_record(hf):
    """Sampled rows keep the tokens they would have drawn and stop once a record is complete; beams stop
    once every beam holds one."""
    from dataclasses import replace

    from metrics.extract import record_complete

    prompt = 'Write one JSON object with keys "day" and "price" for a train ticket, in a ```json block.'
    sampled = SamplingParams(temperature=0.7, max_tokens=96)
    reqs = [GenerationRequest.chat(prompt, sampled, 0, i) for i in range(3)]
    full = hf.generate(reqs)
    cut = hf.generate([replace(r, params=replace(sampled, stop_at_record=True)) for r in reqs])
    for f, c in zip(full, cut, strict=True):
        assert f.text.startswith(c.text) and c.tokens_out <= f.tokens_out
        if record_complete(f.text):
            assert record_complete(c.text)
    beams = SamplingParams(temperature=0.0, num_beams=2, max_tokens=96, stop_at_record=True)
    (b,) = hf.generate([GenerationRequest.chat(prompt, beams, 0, 0)])
    assert record_complete(b.text) or b.finish_reason == "length"
