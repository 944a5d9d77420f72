"""Hugging Face transformers causal-LM backend: generation (sampling, top-p/k, beams, batches) and scoring.

Models load from a local directory, a hub id, or a GGUF file (transformers' GGUF loader dequantizes it;
the embedded SmolLM2 GGUF resolves through `systems.backends.llama_cpp.resolve_gguf`, so both runtimes
read the same file). bitsandbytes 4-bit NF4 / 8-bit quantization needs CUDA; without it the backend
refuses with `BackendUnavailable` at construction, before anything is loaded.

Why sampling is done by our own logits processor: `generate` draws from one global RNG, so a row's
sample would depend on what else shares its batch. We run `generate` greedily and add Gumbel noise drawn
from a private generator per row, seeded by (run seed, sample index): argmax(logits / T + Gumbel) is an
exact draw from the tempered, top-k / top-p filtered distribution, and each row's draw is its own.
"""

from __future__ import annotations

import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.deadline import DEADLINE_ERROR
from bench.deadline import passed as deadline_passed
from bench.deadline import remaining as deadline_left
from bench.errors import BackendUnavailable, BenchError
from bench.hashing import stable_hash
from bench.types import JSON, Completion, GenerationRequest, SamplingParams

QUANTIZATIONS = (None, "4bit", "8bit")
DTYPES = ("auto", "float32", "float16", "bfloat16")

_LOADED: dict[str, tuple[Any, Any]] = {}  # one (model, tokenizer) per load key per process
_LOCK = threading.Lock()


def row_seed(seed: int, sample_index: int) -> int:
    """A 63-bit torch seed per (run seed, sample index), stable across platforms and processes."""
    return int(stable_hash({"seed": seed, "i": sample_index, "rt": "hf"}, 15), 16)


def resolve_source(model: str, gguf_file: str | None) -> tuple[str, str | None]:
    """(directory or hub id, GGUF file name or None). Packaged GGUF names resolve without a download."""
    if gguf_file is None:
        from systems.backends.llama_cpp import PACKAGED_GGUF, resolve_gguf

        if model in PACKAGED_GGUF:
            path = resolve_gguf(model)
            return str(path.parent), path.name
        if model.endswith(".gguf"):
            path = Path(os.path.expanduser(model))
            if not path.is_file():
                raise BackendUnavailable(f"GGUF file not found: {path}")
            return str(path.parent), path.name
    return model, gguf_file


def check_quantization(quantization: str | None) -> None:
    """bitsandbytes kernels run on CUDA only: say so plainly instead of failing inside a load."""
    if quantization not in QUANTIZATIONS:
        raise BenchError(f"hf quantization must be one of 4bit, 8bit or none, got {quantization!r}")
    if quantization is None:
        return
    import torch

    if not torch.cuda.is_available():
        raise BackendUnavailable(
            f"{quantization} quantization uses bitsandbytes, which needs a CUDA GPU; none is available here "
            "(torch.cuda.is_available() is False). Run this preset on a CUDA machine, or choose an "
            "unquantized preset."
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(
            f"{quantization} quantization needs the bitsandbytes package: pip install 'aod-bench[hf]'"
        ) from exc


@dataclass
class HFBackend:
    """TextBackend + LogProbScorer over `AutoModelForCausalLM`."""

    model: str
    gguf_file: str | None = None
    revision: str | None = None
    quantization: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    batch_size: int = 8
    chat_template_kwargs: JSON = field(default_factory=dict)
    local_files_only: bool = False
    threads: int | None = None
    stops_at_record = True  # honours SamplingParams.stop_at_record (a stopping criterion)

    @classmethod
    def from_spec(cls, spec: JSON, env: Any = None) -> HFBackend:
        params = dict(spec.get("params") or {})
        model = spec.get("model")
        if not model:
            raise BackendUnavailable(
                "hf model spec needs 'model' (local dir, hub id, GGUF file or packaged name)"
            )
        quant = params.get("quantization")
        quant = None if quant in (None, "none", "") else str(quant)
        check_quantization(quant)
        source, gguf = resolve_source(str(model), params.get("gguf_file"))
        if gguf and quant:
            raise BenchError("a GGUF file is already quantized; drop 'quantization' or load a non-GGUF model")
        dtype = str(params.get("dtype", "auto"))
        if dtype not in DTYPES:
            raise BenchError(f"hf dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        threads = params.get("threads") or (
            int(os.environ["BENCH_THREADS"]) if "BENCH_THREADS" in os.environ else None
        )
        return cls(
            model=source,
            gguf_file=gguf,
            revision=params.get("revision"),
            quantization=quant,
            dtype=dtype,
            device=str(params.get("device", "auto")),
            batch_size=int(params.get("batch_size", 8)),
            chat_template_kwargs=dict(params.get("chat_template_kwargs") or {}),
            local_files_only=bool(params.get("local_files_only", False)),
            threads=threads,
        )

    def identity(self) -> JSON:
        """Model id, file, revision, quantization, dtype and template options: what shapes outputs."""
        ident: JSON = {
            "backend": "hf",
            "model": Path(self.model).name if self.gguf_file else self.model,
            "revision": self.revision,
            "quantization": self.quantization,
            "dtype": self._dtype_name(),
        }
        if self.gguf_file:
            size = (Path(self.model) / self.gguf_file).stat().st_size
            ident["gguf_file"] = f"{self.gguf_file}:{size}"
        if self.chat_template_kwargs:
            ident["chat_template_kwargs"] = self.chat_template_kwargs
        return ident

    # ------------------------------------------------------------------------------- loading
    def _device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def _dtype_name(self) -> str:
        if self.dtype != "auto":
            return self.dtype
        # GGUF tensors are dequantized to float32; on CPU half precision is slow and lossy
        return "float16" if self.quantization else "float32"

    def load(self) -> tuple[Any, Any]:
        """(model, tokenizer), loaded once per process; nothing is loaded before the first call."""
        key = stable_hash({**self.identity(), "source": self.model, "device": self._device()})
        with _LOCK:
            if key in _LOADED:
                return _LOADED[key]
            from bench.progress import stage

            with stage(f"loading {self.gguf_file or self.model} (transformers)", unit="model"):
                return self._load_locked(key)

    def _load_locked(self, key: str) -> tuple[Any, Any]:
        """Load (model, tokenizer) once; the caller holds _LOCK and shows the loading stage."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.threads:
            torch.set_num_threads(int(self.threads))
        kwargs: JSON = {"revision": self.revision, "local_files_only": self.local_files_only}
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        tok = AutoTokenizer.from_pretrained(self.model, **kwargs)
        mkw: JSON = dict(kwargs)
        mkw["dtype"] = getattr(torch, self._dtype_name())
        if self.quantization:
            from transformers import BitsAndBytesConfig

            mkw["quantization_config"] = (
                BitsAndBytesConfig(
                    load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float16
                )
                if self.quantization == "4bit"
                else BitsAndBytesConfig(load_in_8bit=True)
            )
            mkw["device_map"] = "auto"
        model = AutoModelForCausalLM.from_pretrained(self.model, **mkw)
        if not self.quantization:
            model.to(self._device())
        model.eval()
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        _LOADED[key] = (model, tok)
        return model, tok

    # ------------------------------------------------------------------------------- prompts
    def render_prompt(self, messages: tuple[tuple[str, str], ...], tok: Any | None = None) -> str:
        """The chat template applied with the generation prompt; plain text for models without one."""
        tok = tok if tok is not None else self.load()[1]
        msgs = [{"role": r, "content": c} for r, c in messages]
        if not getattr(tok, "chat_template", None):
            return "\n\n".join(c for _, c in messages)
        try:
            return tok.apply_chat_template(
                msgs, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
            )
        except Exception as exc:  # jinja2 TemplateError, e.g. Gemma: "System role not supported"
            if "system" not in str(exc).lower() or msgs[0]["role"] != "system":
                raise
            merged = [
                {"role": "user", "content": msgs[0]["content"] + "\n\n" + msgs[1]["content"]},
                *msgs[2:],
            ]
            return tok.apply_chat_template(
                merged, tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs
            )

    # ------------------------------------------------------------------------------- generation
    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        """Batches of requests with equal sampling params, left-padded; results in request order."""
        model, tok = self.load()
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[SamplingParams, list[int]] = {}
        for i, r in enumerate(requests):
            if r.params.json_schema is not None:
                raise BenchError(
                    "the hf backend has no grammar-constrained decoding; run json_schema requests on the "
                    "llama_cpp or openai backend"
                )
            groups.setdefault(r.params, []).append(i)
        for params, idx in groups.items():
            for start in range(0, len(idx), self.batch_size):
                chunk = idx[start : start + self.batch_size]
                for i, comp in zip(
                    chunk, self._generate_batch(model, tok, [requests[i] for i in chunk], params), strict=True
                ):
                    out[i] = comp
        return [c for c in out if c is not None]

    def _generate_batch(
        self, model: Any, tok: Any, batch: list[GenerationRequest], p: SamplingParams
    ) -> list[Completion]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        prompts = [self.render_prompt(r.messages, tok) for r in batch]
        tok.padding_side = "left"
        enc = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        eos = _eos_ids(model, tok)
        sampling = p.temperature > 0 and p.num_beams == 1
        cfg = GenerationConfig(
            max_new_tokens=p.max_tokens,
            do_sample=False,
            num_beams=p.num_beams,
            repetition_penalty=p.repeat_penalty,
            pad_token_id=tok.pad_token_id,
            eos_token_id=eos,
            stop_strings=list(p.stop) or None,
        )
        processors = LogitsProcessorList()
        if sampling:
            processors.append(
                RowSeededSampler(
                    [row_seed(r.seed, r.sample_index) for r in batch], p.temperature, p.top_k, p.top_p
                )
            )
        elif p.temperature > 0 and p.num_beams > 1:
            pass  # beam search is deterministic: temperature does not apply (documented in docs/systems-ar.md)
        stopping = _record_stop(tok, enc["input_ids"].shape[1]) if p.stop_at_record else None
        left = deadline_left()
        if left is not None:  # the agent loop's per-item deadline (bench.deadline)
            from transformers import MaxTimeCriteria, StoppingCriteriaList

            stopping = StoppingCriteriaList([*(stopping or []), MaxTimeCriteria(max_time=max(left, 1e-3))])
        t0 = time.perf_counter()
        with torch.inference_mode():
            gen = model.generate(
                **enc,
                generation_config=cfg,
                logits_processor=processors,
                stopping_criteria=stopping,
                tokenizer=tok if p.stop else None,
            )
        seconds = (time.perf_counter() - t0) / len(batch)
        if deadline_passed():  # cut by the time limit: an error, so the call cache never keeps it
            return [
                Completion(text="", finish_reason="error", error=DEADLINE_ERROR, seconds=seconds)
                for _ in batch
            ]
        new = gen[:, enc["input_ids"].shape[1] :].tolist()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        out = []
        for ids, n_in in zip(new, prompt_lens, strict=True):
            n_out, finish = _trim(ids, set(eos), tok.pad_token_id)
            text = tok.decode(ids[:n_out], skip_special_tokens=True)
            for s in p.stop:
                cut = text.find(s)
                if cut >= 0:
                    text, finish = text[:cut], "stop"
            out.append(
                Completion(
                    text=text, tokens_in=int(n_in), tokens_out=n_out, finish_reason=finish, seconds=seconds
                )
            )
        return out

    # ------------------------------------------------------------------------------- scoring
    def nll(self, texts: list[str]) -> list[tuple[float, int]]:
        """Total NLL (nats) of each text's tokens given a leading BOS, and the number of scored tokens.

        Texts longer than the context are scored in windows that overlap by half a context, each token
        scored once with as much left context as fits (the usual strided perplexity).
        """
        import torch

        model, tok = self.load()
        window = int(
            getattr(model.config, "max_position_embeddings", 0) or getattr(model.config, "n_positions", 1024)
        )
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        results = []
        for text in texts:
            ids = tok(text, add_special_tokens=False)["input_ids"]
            ids = ([bos] if bos is not None else []) + ids
            if len(ids) < 2:
                results.append((0.0, 0))
                continue
            total, scored, prev_end = 0.0, 0, 1  # position 0 (BOS) is context only
            stride = max(1, window // 2)
            begin = 0
            while prev_end < len(ids):
                end = min(begin + window, len(ids))
                chunk = torch.tensor([ids[begin:end]], device=model.device)
                with torch.inference_mode():
                    logits = model(chunk).logits[0].double()
                logp = torch.log_softmax(logits[:-1], dim=-1)
                targets = chunk[0, 1:]
                token_lp = logp.gather(1, targets.unsqueeze(1)).squeeze(1)
                first = prev_end - begin - 1  # index into targets of the first token not yet scored
                total -= float(token_lp[first:].sum())
                scored += len(targets) - first
                prev_end = end
                begin += stride  # the next window still starts before prev_end (stride <= window / 2)
            results.append((total, scored))
        return results


class RowSeededSampler:
    """Logits processor: temperature, top-k, top-p, then Gumbel noise from one generator per batch row.

    Used with greedy `generate`, the argmax is a sample from the filtered distribution (Gumbel-max), and
    each row's randomness comes only from its own (seed, sample index).
    """

    def __init__(self, seeds: list[int], temperature: float, top_k: int, top_p: float):
        import torch

        self.generators = [torch.Generator().manual_seed(s) for s in seeds]
        self.temperature = temperature
        self.top_k = top_k
        self.top_p = top_p

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        scores = scores.float() / self.temperature
        if self.top_k > 0:
            kth = torch.topk(scores, min(self.top_k, scores.shape[-1]), dim=-1).values[..., -1:]
            scores = scores.masked_fill(scores < kth, -math.inf)
        if self.top_p < 1.0:
            sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
            cum = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
            drop = (
                cum - torch.softmax(sorted_scores, dim=-1) >= self.top_p
            )  # keep the smallest head reaching p
            sorted_scores = sorted_scores.masked_fill(drop, -math.inf)
            scores = torch.full_like(scores, -math.inf).scatter(-1, order, sorted_scores)
        noise = torch.stack(
            [
                -torch.log(-torch.log(torch.rand(scores.shape[-1], generator=g).clamp_(1e-20, 1.0 - 1e-7)))
                for g in self.generators
            ]
        ).to(scores.device)
        return scores + noise


def _eos_ids(model: Any, tok: Any) -> list[int]:
    """EOS ids from the generation config and the tokenizer (chat models often end turns differently)."""
    ids: list[int] = []
    cfg_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (cfg_eos, tok.eos_token_id):
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, list):
            ids.extend(int(v) for v in value)
    for name in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
        tid = tok.convert_tokens_to_ids(name) if name in tok.get_vocab() else None
        if isinstance(tid, int) and tid != tok.unk_token_id:
            ids.append(tid)
    return list(dict.fromkeys(ids))


def _trim(ids: list[int], eos: set[int], pad: int | None) -> tuple[int, str]:
    """(tokens produced, finish reason): count up to and including the first EOS; 'length' without one."""
    for k, t in enumerate(ids):
        if t in eos:
            return k + 1, "stop"
        if pad is not None and t == pad and pad not in eos:
            return k, "stop"  # padding after a stop string ended this row
    return len(ids), "length"


def _record_stop(tok: Any, prompt_length: int) -> Any:
    """Stopping criteria that end a row once its new text holds a complete record
    (`metrics.extract.record_complete`; the same rule as the llama_cpp backend). With beam search,
    generation ends when every beam holds one."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    from metrics.extract import record_complete

    class RecordComplete(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            texts = tok.batch_decode(input_ids[:, prompt_length:], skip_special_tokens=True)
            return torch.tensor(
                [record_complete(t) for t in texts], dtype=torch.bool, device=input_ids.device
            )

    return StoppingCriteriaList([RecordComplete()])
