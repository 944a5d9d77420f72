"""LLaDA-8B(-Instruct) through Hugging Face transformers, decoded by the project's LLaDA sampler.

`LLaDAHFBackend.from_spec(spec, env)` loads `spec["model"]` (default GSAI-ML/LLaDA-8B-Instruct) with
`AutoModel.from_pretrained(trust_remote_code=True)`, the requested dtype and device map, from local files
only (the harness never downloads weights at run time); missing weights raise `BackendUnavailable` with
the command that fetches them. Prompts go through the tokenizer's chat template, are cut to the last
`max_input_tokens` (paper: 1024) and decoded with mask id 126336 and LLaDA's EOS / EoT tokens. The
paper's settings (T = 12, fp16, CFG off) are the defaults of the `paper` profile's catalog entry.

The constructor also accepts an already built model and tokenizer, which is how tests run the full
code path with a tiny randomly initialised model.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import BackendUnavailable, BenchError
from bench.types import JSON, Completion, GenerationRequest, TaskSpec
from systems.backends.llada_sampler import (
    SAMPLER_VERSION,
    SamplerConfig,
    checked,
    cut_at_eos,
    denoise,
    left_pad,
    mc_nll_bound,
    merge_knobs,
)
from systems.backends.schema_dfa import SchemaConstrained, hf_token_bytes
from systems.skeleton import SkeletonPlan
from systems.skeleton_infill import Canvas, InfillResult, InfillRow, SlotVocab, lay_out, read_slots

LLADA_MASK_ID = 126336
LLADA_EOS_IDS = (126081, 126348)  # <|endoftext|>, <|eot_id|>


class LLaDAHFParams(BaseModel):
    """Catalog `params` of a LLaDA checkpoint; sampler knobs are defaults a request may override."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="local directory of the weights (default: the HF cache)")
    revision: str | None = Field(None, description="model revision (commit) to load")
    dtype: Literal["float16", "bfloat16", "float32"] = Field(
        "float16", description="weights dtype (paper: fp16)"
    )
    device_map: str | None = Field("auto", description="accelerate device map; None = CPU")
    auto_class: Literal["AutoModel", "AutoModelForMaskedLM"] = Field(
        "AutoModel", description="transformers auto class (LLaDA's auto_map serves its LM under AutoModel)"
    )
    mask_id: int = Field(LLADA_MASK_ID, description="id of the [MASK] token (LLaDA: 126336)")
    eos_ids: list[int] = Field(list(LLADA_EOS_IDS), description="ids that end a response (EOS / EoT)")
    max_input_tokens: int = Field(1024, ge=8, description="prompt tokens kept (the tail); paper: 1024")
    steps: int = Field(12, ge=1, description="denoising steps T (paper: 12)")
    gen_length: int | None = Field(
        None,
        ge=1,
        description="response positions (None: from the task, systems/gen_limits.dlm_response_shape; "
        "256 where no task is known)",
    )
    block_length: int | None = Field(32, ge=1, description="semi-AR block length (LLaDA-Instruct: 32)")
    remasking: Literal["low_confidence", "random"] = Field("low_confidence", description="remasking")
    temperature: float = Field(0.0, ge=0, description="Gumbel temperature")
    cfg_scale: float = Field(0.0, ge=0, description="classifier-free guidance (paper: off)")
    threshold: float | None = Field(None, gt=0, lt=1, description="Fast-dLLM threshold commit")
    choice_temperature: float = Field(0.0, ge=0, description="MaskGIT choice noise on committed positions")
    gen_batch_size: int = Field(4, ge=1, description="rows per sampler batch (transport only)")
    max_slot_tokens: int = Field(24, ge=1, description="cap on a skeleton slot's token budget")


def load_pretrained(model_id: str, params: LLaDAHFParams) -> tuple[Any, Any]:
    """AutoModel + AutoTokenizer from local files; a clear BackendUnavailable when they are absent."""
    try:
        import transformers
        from transformers import AutoTokenizer
    except ImportError as exc:
        raise BackendUnavailable("LLaDA needs the [hf] extra: pip install 'aod-bench[hf]'") from exc
    source = params.path or model_id
    dtype = getattr(torch, params.dtype)
    try:
        tok = AutoTokenizer.from_pretrained(
            source, trust_remote_code=True, local_files_only=True, revision=params.revision
        )
        model = getattr(transformers, params.auto_class).from_pretrained(
            source,
            trust_remote_code=True,
            local_files_only=True,
            revision=params.revision,
            dtype=dtype,
            device_map=params.device_map,
        )
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(
            f"LLaDA weights {source!r} are not available locally ({type(exc).__name__}). Fetch them once with "
            f"`huggingface-cli download {model_id}` (about 16 GB) or set params.path to a local copy; "
            "a GPU with >= 16 GB is needed at fp16."
        ) from exc
    model.eval()
    return model, tok


DEFAULT_GEN_LENGTH = 256  # the canvas when neither the suite nor a task sets one


class LLaDAHFBackend(SchemaConstrained):
    """A transformers masked-diffusion model (LLaDA) as a TextBackend with skeleton infilling."""

    kind = "llada_hf"

    @property
    def gen_length_from_task(self) -> bool:
        """True when the `llada` system should size the canvas from its task (no gen_length was set)."""
        return self.params.gen_length is None

    def __init__(self, model: Any, tokenizer: Any, params: LLaDAHFParams, model_id: str = "custom") -> None:
        self.model = model
        self.tok = tokenizer
        self.params = params
        self.model_id = model_id
        self._slot_vocab: SlotVocab | None = None
        self._plans: dict[str, SkeletonPlan] = {}

    @classmethod
    def from_spec(cls, spec: JSON, env: Any) -> LLaDAHFBackend:
        try:
            params = LLaDAHFParams(**(spec.get("params") or {}))
        except ValidationError as exc:
            raise BenchError(f"LLaDA params: {exc}") from exc
        model_id = str(spec.get("model") or "GSAI-ML/LLaDA-8B-Instruct")
        model, tok = load_pretrained(model_id, params)
        return cls(model, tok, params, model_id)

    # ------------------------------------------------------------------ TextBackend
    def identity(self) -> JSON:
        p = self.params
        return {
            "kind": self.kind,
            "model": self.model_id,
            "revision": p.revision or getattr(getattr(self.model, "config", None), "_commit_hash", None),
            "dtype": p.dtype,
            "device": str(self.device),
            "mask_id": p.mask_id,
            "eos_ids": list(p.eos_ids),
            "max_input_tokens": p.max_input_tokens,
            "sampler_defaults": self.default_sampler().to_json(),
            "sampler_version": SAMPLER_VERSION,
            "likelihood": "monte-carlo upper bound on NLL (LLaDA)",
        }

    @property
    def device(self) -> torch.device:
        try:
            return next(self.model.parameters()).device
        except (StopIteration, AttributeError):
            return torch.device("cpu")

    def logits(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """One bidirectional pass: `model(input_ids, attention_mask).logits`."""
        x = x.to(self.device)
        kwargs: dict[str, Any] = {"input_ids": x}
        if attention_mask is not None:
            am = attention_mask.to(self.device).long()
            kwargs["attention_mask"] = am
            if self._takes_position_ids:
                # positions count real tokens, so left padding does not shift absolute positions
                kwargs["position_ids"] = (am.cumsum(dim=1) - 1).clamp_min(0)
        with torch.no_grad():
            return self.model(**kwargs).logits

    @property
    def _takes_position_ids(self) -> bool:
        import inspect

        try:
            return "position_ids" in inspect.signature(self.model.forward).parameters
        except (TypeError, ValueError):
            return False

    def default_sampler(self, **overrides: Any) -> SamplerConfig:
        p = self.params
        d: dict[str, Any] = {
            "steps": p.steps,
            "gen_length": p.gen_length or DEFAULT_GEN_LENGTH,
            "block_length": p.block_length,
            "remasking": p.remasking,
            "temperature": p.temperature,
            "cfg_scale": p.cfg_scale,
            "threshold": p.threshold,
            "choice_temperature": p.choice_temperature,
        }
        # LLaDA's remote code exposes no split prefix pass, so prefix_cache is accepted and ignored
        d = merge_knobs(d, overrides, ignored=("prefix_cache",))
        return checked(SamplerConfig(**d), int(d["gen_length"]))

    def prompt_ids(self, messages: Sequence[tuple[str, str]]) -> list[int]:
        """Chat template with the generation prompt, then the last `max_input_tokens` tokens."""
        chat = [{"role": r, "content": c} for r, c in messages]
        text = self.tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        return list(ids)[-self.params.max_input_tokens :]

    @staticmethod
    def row_seed(seed: int, sample_index: int) -> int:
        return int(hashlib.sha256(f"{seed}:{sample_index}".encode()).hexdigest()[:8], 16)

    def _pad_id(self) -> int:
        pad = getattr(self.tok, "pad_token_id", None)
        return int(pad if pad is not None else self.params.eos_ids[0])

    def _schema_vocabulary(self) -> tuple[list[bytes | None], list[int], int]:
        """Token bytes for json_schema requests, from the `transformers` tokenizer."""
        return hf_token_bytes(self.tok), list(self.params.eos_ids), self.params.mask_id

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple[SamplerConfig, str | None], list[int]] = {}
        for i, r in enumerate(requests):
            extra = dict(r.params.extra)
            extra.setdefault("temperature", r.params.temperature)
            schema = r.params.json_schema
            key = None if schema is None else json.dumps(schema)  # key order is the record's order
            groups.setdefault((self.default_sampler(**extra), key), []).append(i)
        bs = self.params.gen_batch_size
        for (cfg, schema_key), idx in groups.items():
            for c0 in range(0, len(idx), bs):
                chunk = idx[c0 : c0 + bs]
                t0 = time.perf_counter()
                prompts = [self.prompt_ids(requests[i].messages) for i in chunk]
                ids, pmask = left_pad(prompts, self._pad_id())
                b, p = ids.shape
                canvas = torch.cat(
                    [ids, torch.full((b, cfg.gen_length), self.params.mask_id, dtype=torch.long)], 1
                )
                attn = torch.cat([pmask, torch.ones((b, cfg.gen_length), dtype=torch.bool)], 1)
                seeds = [self.row_seed(requests[i].seed, requests[i].sample_index) for i in chunk]
                res = denoise(
                    self.logits,
                    canvas.to(self.device),
                    p,
                    self.params.mask_id,
                    cfg,
                    seeds,
                    attention_mask=attn.to(self.device),
                    choose_x0=None if schema_key is None else self.schema_chooser(json.loads(schema_key), p),
                )
                secs = (time.perf_counter() - t0) / b
                for j, i in enumerate(chunk):
                    resp, stopped = cut_at_eos(res.x[j, p:].tolist(), self.params.eos_ids)
                    out[i] = Completion(
                        text=self.tok.decode(resp, skip_special_tokens=True),
                        tokens_in=len(prompts[j]),
                        tokens_out=len(resp),
                        finish_reason="stop" if stopped else "length",
                        seconds=secs,
                        nfe=int(res.row_nfe[j]) if res.row_nfe is not None else res.nfe,
                    )
        return [c for c in out if c is not None]

    # ------------------------------------------------------------------ skeleton infilling
    def _encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def skeleton_plan(self, task: TaskSpec) -> SkeletonPlan:
        """Budgets counted in LLaDA's tokens (computed once per task)."""
        key = task.fingerprint + task.name
        if key not in self._plans:
            self._plans[key] = SkeletonPlan(
                task.schema, task.references, lambda s: len(self._encode(s)), self.params.max_slot_tokens
            )
        return self._plans[key]

    def skeleton_fits(self, segs: Sequence[Any]) -> bool:
        return len(lay_out(segs, self._encode, self.params.mask_id, self.params.eos_ids[0]).tokens) <= (
            self.params.gen_length or DEFAULT_GEN_LENGTH
        )

    def slot_vocab(self) -> SlotVocab:
        if self._slot_vocab is None:
            special = set(getattr(self.tok, "all_special_ids", [])) | {self.params.mask_id}
            size = int(getattr(getattr(self.model, "config", None), "vocab_size", 0) or len(self.tok))
            texts: list[str | None] = []
            for i in range(size):
                texts.append(None if i in special or i >= len(self.tok) else self.tok.decode([i]))
            self._slot_vocab = SlotVocab(texts, list(self.params.eos_ids), self._encode)
        return self._slot_vocab

    def infill(self, rows: Sequence[InfillRow], **overrides: Any) -> list[InfillResult]:
        """Fill skeleton slots; EOS tokens act as the slot pad (stripped)."""
        cfg = self.default_sampler(**overrides)
        vocab = self.slot_vocab()
        out: list[InfillResult] = []
        bs = self.params.gen_batch_size
        for c0 in range(0, len(rows), bs):
            chunk = rows[c0 : c0 + bs]
            t0 = time.perf_counter()
            prompts = [self.prompt_ids((("user", r.prompt),)) for r in chunk]
            canvases: list[Canvas] = [
                lay_out(r.segs, self._encode, self.params.mask_id, self.params.eos_ids[0]) for r in chunk
            ]
            width = max(len(c.tokens) for c in canvases)
            for c in canvases:
                c.tokens.extend([self.params.eos_ids[0]] * (width - len(c.tokens)))
            ids, pmask = left_pad(prompts, self._pad_id())
            b, p = ids.shape
            resp = torch.tensor([c.tokens for c in canvases], dtype=torch.long)
            canvas = torch.cat([ids, resp], 1)
            attn = torch.cat([pmask, torch.ones_like(resp, dtype=torch.bool)], 1)
            res = denoise(
                self.logits,
                canvas.to(self.device),
                p,
                self.params.mask_id,
                cfg,
                [r.seed for r in chunk],
                attention_mask=attn.to(self.device),
                logits_hook=vocab.hook(canvases, p),
            )
            secs = (time.perf_counter() - t0) / b
            drop = set(self.params.eos_ids)
            for j, c in enumerate(canvases):
                texts = read_slots(
                    res.x[j].tolist(), c, p, lambda ids: self.tok.decode(ids, skip_special_tokens=True), drop
                )
                n_slot = sum(len(pos) for _, pos in c.slots)
                out.append(
                    InfillResult(
                        texts,
                        int(res.row_nfe[j]) if res.row_nfe is not None else res.nfe,
                        len(prompts[j]),
                        n_slot,
                        secs,
                    )
                )
        return out

    # ------------------------------------------------------------------ likelihood bound
    def nll(
        self, texts: list[str], n_mc: int = 32, seed: int = 0, prompt: str = ""
    ) -> list[tuple[float, int]]:
        """LLaDA's Monte Carlo upper bound on NLL (nats) of each text as a response to `prompt`."""
        p = self.prompt_ids((("user", prompt),))
        return [
            mc_nll_bound(self.logits, p, self._encode(t), self.params.mask_id, n_mc, seed + i, batch_size=4)
            for i, t in enumerate(texts)
        ]
