"""The embedded masked-diffusion LM as a TextBackend: trained per task (cached), decoded by the LLaDA sampler.

`EmbeddedMDLMBackend.from_spec(spec, env)` trains (or loads from `env.cache_dir/mdlm/<key>`) a small
masked-diffusion transformer on `env.task.references`; the key hashes the task's data fingerprint and
references, the training config and the seed. `generate` runs LLaDA sampling (systems/backends/
llada_sampler.py) with the request's diffusion knobs; `infill` fills schema skeletons for
`llada-skeleton`; `nll` gives LLaDA's Monte Carlo likelihood bound (labelled a bound in `identity`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench import kernels
from bench.errors import BenchError
from bench.types import JSON, Completion, GenerationRequest, TaskSpec
from systems.backends.llada_sampler import (
    SamplerConfig,
    checked,
    cut_at_eos,
    denoise,
    left_pad,
    mc_nll_bound,
    merge_knobs,
)
from systems.backends.mdlm.conditioning import EMBEDDER, LineEmbedder, line_batch, window_ids
from systems.backends.mdlm.length import EosSuffix, LengthFirst
from systems.backends.mdlm.model import Conditioned, MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tokenizer import SPECIALS, BPETokenizer
from systems.backends.mdlm.train import Prepared, TrainConfig, prepare, prompt_ids, record_text, train_model
from systems.backends.schema_dfa import SchemaConstrained
from systems.skeleton import SkeletonPlan, Slot
from systems.skeleton_infill import Canvas, InfillResult, InfillRow, SlotVocab, lay_out, read_slots

CODE_VERSION = "mdlm-10"  # bump when training or tokenization changes meaning


SHORT_RECORD_STEPS = 1800
LONG_RECORD_STEPS = 900
SHORT_RECORD_CHARS = 400
"""`train_steps: None` resolves by the references' 95th-percentile JSON length (auto_train_steps).

Why two budgets: a training step's cost grows with the response window, and the issue's budget is 10
minutes per task on 2 cores. Records of at most 400 characters (MultiWOZ 200, SuperNI task1192 47) get
1800 steps, which is where the model learns to copy a five-line hint block whole and that one station
excludes the other (docs/systems-diffusion.md, "The default training budget"); the long families
(TruthfulQA 802, Self-Instruct 1184) keep 900, as 1800 steps there cost 10-13 minutes and still do not
parse."""
MIN_REFERENCES_FOR_SHORT_STEPS = 64
"""Fewer references than this keep LONG_RECORD_STEPS even when records are short.

Why (plain `llada`, seeds 0-9 x 8 records, paired; docs/systems-diffusion.md, "The default training
budget"): 1800 steps against 900 copy more of the references the fewer there are. On SuperNI task1192's
10 every parsed record at 1800 steps is a reference (novelty 0.000); at 900 half the inputs are new, 27
of 38 of them new combinations of the references' words (450 steps write more new inputs, but 45 of 53
with invented words such as "Inir"). On MultiWOZ with 32 references 1800 steps cost 0.195 novelty and
0.201 diversity (t p < 1e-5); with 64 they cost no novelty (−0.009, p 0.57) and 0.055 diversity."""


def auto_train_steps(task: TaskSpec) -> int:
    """Training steps for `train_steps: None`: SHORT_RECORD_STEPS when the 95th-percentile reference
    JSON is at most SHORT_RECORD_CHARS characters and there are at least MIN_REFERENCES_FOR_SHORT_STEPS
    references, else LONG_RECORD_STEPS (deterministic from the data, so it can enter the cache key
    before the tokenizer is trained)."""
    lengths = sorted(len(record_text(r)) for r in task.references)
    if len(lengths) < MIN_REFERENCES_FOR_SHORT_STEPS:
        return LONG_RECORD_STEPS
    p95 = lengths[min(len(lengths) - 1, int(0.95 * len(lengths)))]
    return SHORT_RECORD_STEPS if p95 <= SHORT_RECORD_CHARS else LONG_RECORD_STEPS


class MDLMParams(BaseModel):
    """Catalog `params` of the embedded DLM: training config plus default sampler settings."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(
        1024, ge=300, le=8192, description="BPE vocabulary size (incl. 261 byte/special ids)"
    )
    d_model: int = Field(128, ge=16, description="Transformer width")
    n_layers: int = Field(3, ge=1, description="Transformer layers")
    n_heads: int = Field(4, ge=1, description="Attention heads")
    d_ff: int = Field(384, ge=16, description="Feed-forward width")
    rope: bool = Field(False, description="Rotary position embeddings in attention (as LLaDA)")
    pre_tokenizer: Literal["gpt2", "phrase", "digits", "digit-pairs", "numbers"] = Field(
        "gpt2",
        description="BPE pre-tokenization: gpt2 (merges within words), phrase (across spaces), "
        "digits (gpt2 with one token per digit), digit-pairs (digit runs cut into pairs) or numbers "
        "(runs of 1-3 digits one token each, longer runs cut into pairs)",
    )
    max_prompt_tokens: int = Field(
        64,
        ge=4,
        description="Token window: the prompt after its instruction line, without examples; the tail",
    )
    line_slots: int = Field(
        12, ge=0, le=64, description="Prompt lines read as MiniLM sentence vectors (0: token window only)"
    )
    max_response_tokens: int = Field(256, ge=8, description="Cap on the response window")
    max_slot_tokens: int = Field(24, ge=1, description="Cap on one skeleton slot's token budget")
    copy_head: bool = Field(True, description="pointer-generator copy head over prompt tokens (steerability)")
    copy_sentinel: bool = Field(
        False, description="the copy gate is a sentinel key in the copy attention (pointer sentinel mixture)"
    )
    translate_head: bool = Field(
        False, description="the copy head may also translate a prompt token into a learned distribution"
    )
    hint_swap: float = Field(
        0.5, ge=0, le=1, description="per-hint chance training swaps in another reference's value"
    )
    hint_weight: float = Field(
        3.0, ge=1, description="loss weight of response tokens spelling a hinted value"
    )
    max_train_hints: int = Field(
        3,
        ge=3,
        le=8,
        description="the most hint lines a training prompt carries (skeleton_prompt.hint_counts)",
    )
    high_noise: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of training rows with noise level t ~ U(0.9, 1) (train.noise_levels)",
    )
    value_mask: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of natural-form training rows with a note whose field values are all masked, "
        "the rest visible (train.TrainConfig.value_mask)",
    )
    skeleton_fraction: float = Field(0.4, ge=0, le=1, description="Share of training examples in slot form")
    note_kinds: list[Literal["value", "set", "relation", "length", "novelty"]] = Field(
        ["value", "set", "relation", "length", "novelty"], description="Note kinds training prompts carry"
    )
    note_prob: float = Field(0.6, ge=0, le=1, description="Share of training prompts with 1-2 notes")
    note_weight: float = Field(3.0, ge=1, description="Loss weight of response tokens a note constrains")
    example_prob: float = Field(
        0.5, ge=0, le=1, description="Share of training batches with few-shot examples"
    )
    note_pool: int = Field(
        3000, ge=1, description="Training notes, drawn once (seeded) and embedded up front"
    )
    example_pool: int = Field(
        256, ge=1, description="References few-shot examples are drawn from in training"
    )
    train_steps: int | None = Field(
        None,
        ge=1,
        description="Optimizer steps (fixed, so training is deterministic); None: by record length and count "
        "(auto_train_steps: 1800 for short records with at least 64 references, else 900)",
    )
    batch_size: int | None = Field(None, ge=1, description="Training batch size; None: fit batch_tokens")
    batch_tokens: int = Field(6400, ge=256, description="Tokens per training batch when batch_size is None")
    lr: float = Field(2e-3, gt=0, description="Peak learning rate (warmup then cosine)")
    seed: int | None = Field(None, description="Training seed; None = the env's seed")
    steps: int = Field(12, ge=1, description="Default denoising steps T (the paper's T = 12)")
    block_length: int | None = Field(None, ge=1, description="Default semi-AR block length; None = one block")
    remasking: Literal["low_confidence", "random"] = Field("low_confidence", description="Default remasking")
    temperature: float = Field(
        0.5, ge=0, description="Default Gumbel temperature (0.5: parse rate and diversity balanced at T = 12)"
    )
    cfg_scale: float = Field(0.0, ge=0, description="Default classifier-free guidance scale (0 = off)")
    threshold: float | None = Field(None, gt=0, lt=1, description="Default Fast-dLLM commit threshold")
    prefix_cache: bool = Field(False, description="Default: reuse prefix keys/values within a block")
    choice_temperature: float = Field(
        0.0, ge=0, description="Default MaskGIT choice noise on committed positions (llada_sampler; 0 = off)"
    )
    length_first: bool = Field(
        False,
        description="Draw each record's length from the model's EOS probabilities first (length.py); "
        "a departure from LLaDA's sampler, off by default",
    )
    eos_suffix: bool = Field(
        False,
        description="EOS only as the response's suffix, as in training: none left of committed content, "
        "only EOS right of a committed one (length.EosSuffix); a departure from LLaDA's sampler, off by default",
    )
    gen_batch_size: int = Field(16, ge=1, description="Rows per sampler batch (transport only)")
    threads: int | None = Field(None, ge=1, description="torch threads for this backend (and its training)")
    train_threads: int | None = Field(
        None,
        ge=1,
        description="torch threads while training, if not `threads`; part of the cache key when not 1 "
        "(the thread count orders float reductions, so it changes the weights)",
    )

    def for_task(self, task: TaskSpec) -> MDLMParams:
        """These params with `train_steps` resolved for `task` (auto_train_steps when None), so the cache
        key, the stored config and the identity all carry the steps the model was trained for."""
        if self.train_steps is not None:
            return self
        return self.model_copy(update={"train_steps": auto_train_steps(task)})

    def train_config(self) -> TrainConfig:
        return TrainConfig(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            rope=self.rope,
            pre_tokenizer=self.pre_tokenizer,
            max_prompt_tokens=self.max_prompt_tokens,
            max_response_tokens=self.max_response_tokens,
            max_slot_tokens=self.max_slot_tokens,
            skeleton_fraction=self.skeleton_fraction,
            high_noise=self.high_noise,
            value_mask=self.value_mask,
            copy_head=self.copy_head,
            copy_sentinel=self.copy_sentinel,
            translate_head=self.translate_head,
            hint_swap=self.hint_swap,
            hint_weight=self.hint_weight,
            max_train_hints=self.max_train_hints,
            steps=self.train_steps or LONG_RECORD_STEPS,  # unresolved (no task yet): the long budget
            batch_size=self.batch_size,
            batch_tokens=self.batch_tokens,
            line_slots=self.line_slots,
            note_kinds=tuple(self.note_kinds),
            note_prob=self.note_prob,
            note_weight=self.note_weight,
            example_prob=self.example_prob,
            note_pool=self.note_pool,
            example_pool=self.example_pool,
            lr=self.lr,
            threads=self.train_threads or self.threads or 1,
        )


def train_key(cfg: TrainConfig) -> JSON:
    """The training config as it enters cache keys.

    The OPT_IN_KNOBS enter only when not at their old value, so the keys of models trained before the
    knobs existed stay valid. The torch thread count is one of them: it changes the order of float
    reductions, so the weights (measured: 2e-5 apart after 20 steps) and in the end the records of a
    1 and a 2-thread build differ; the default, 1 thread, keeps the key it always had. The kernels
    (bench.kernels) enter the same way: only when portable ones run, or when more than one thread trains
    (the deterministic backward)."""
    knobs = {k: v for k, v in asdict(cfg).items() if not (k in OPT_IN_KNOBS and v == OPT_IN_KNOBS[k])}
    if cfg.translate_head:
        knobs["translate_revision"] = TRANSLATE_REVISION
    return {**knobs, **kernels.key_part(cfg.threads)}


TRANSLATE_REVISION = 2
"""Revision of the translate head's training path, in the key of `translate_head` builds only. 2
(2026-12-06): the head runs on the response columns alone (model.translate_log_probs). The
log-probabilities are the same bits, but the weight gradients sum over fewer rows, in another order, so
the weights differ from revision 1's after a few steps (benchmarks.diffusion.translate_step); a build of
revision 1 is not served for the new code."""


def trained_threads(meta: JSON) -> int:
    """Torch threads a cached model was trained with (models from before threads entered the key)."""
    return int(meta.get("train_config", {}).get("threads") or 1)


OPT_IN_KNOBS: dict[str, object] = {
    "rope": False,
    "high_noise": 0.0,
    "value_mask": 0.0,
    "pre_tokenizer": "gpt2",
    "copy_sentinel": False,
    "translate_head": False,
    "max_train_hints": 3,
    "threads": 1,
}
"""Training knobs added after models were cached, with the value every older model was trained at: a
knob enters the cache key only when set to something else."""


def data_fingerprint(spec: TaskSpec) -> str:
    """Hash of what the model is trained on: references, schema, instruction, task name and fingerprint."""
    h = hashlib.sha256()
    h.update(
        json.dumps([spec.name, spec.fingerprint, spec.instruction, spec.schema], sort_keys=True).encode()
    )
    for r in spec.references:
        h.update(json.dumps(r, sort_keys=True, ensure_ascii=False).encode())
    from systems.backends.mdlm.train import item_prompts

    prompts = item_prompts(spec)
    if any(p is not None for p in prompts):  # per-item tasks train on questions too (unchanged otherwise)
        h.update(json.dumps(prompts, ensure_ascii=False).encode())
    return h.hexdigest()


class EmbeddedMDLMBackend(SchemaConstrained):
    """A per-task masked-diffusion LM served through LLaDA's sampler."""

    kind = "mdlm"

    def __init__(
        self,
        model: MaskedDiffusionTransformer,
        prep: Prepared,
        params: MDLMParams,
        data_hash: str,
        train_seed: int,
        train_seconds: float = 0.0,
        loaded_from_cache: bool = False,
        train_log: list[JSON] | None = None,
    ) -> None:
        self.model = model
        self.tok = prep.tok
        self.plan = prep.plan
        self.response_length = prep.response_length
        self.params = params
        self.data_hash = data_hash
        self.train_seed = train_seed
        self.train_seconds = train_seconds
        self.loaded_from_cache = loaded_from_cache
        self.train_log = train_log or []
        self._embedder: LineEmbedder | None = None
        if params.threads:
            torch.set_num_threads(params.threads)
        texts = [None if i < len(SPECIALS) else self.tok.token_text(i) for i in range(self.tok.vocab_size)]
        self.slot_vocab = SlotVocab(texts, [self.tok.nul_id, self.tok.eos_id], self.tok.encode)
        # natural generation may use any byte token or EOS, never pad/mask/sep/nul
        self._natural_allowed = torch.ones(self.tok.vocab_size, dtype=torch.bool)
        self._natural_allowed[[self.tok.pad_id, self.tok.mask_id, self.tok.sep_id, self.tok.nul_id]] = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_spec(cls, spec: JSON, env: Any) -> EmbeddedMDLMBackend:
        """Train on `env.task` (or load the cached model); `spec["params"]` holds MDLMParams."""
        try:
            params = MDLMParams(**(spec.get("params") or {}))
        except ValidationError as exc:
            raise BenchError(f"embedded DLM params: {exc}") from exc
        task: TaskSpec | None = getattr(env, "task", None)
        if task is None:
            raise BenchError(
                "the embedded diffusion LM is trained per task: its catalog entry needs per_task: true"
            )
        seed = params.seed if params.seed is not None else int(getattr(env, "seed", 0))
        return cls.train_or_load(task, params, Path(env.cache_dir), seed)

    @classmethod
    def cache_key(cls, task: TaskSpec, params: MDLMParams, seed: int) -> str:
        params = params.for_task(task)
        d = {
            "code": CODE_VERSION,
            "data": data_fingerprint(task),
            "train": train_key(params.train_config()),
            "seed": seed,
        }
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:24]

    @classmethod
    def train_or_load(
        cls, task: TaskSpec, params: MDLMParams, cache_dir: Path, seed: int
    ) -> EmbeddedMDLMBackend:
        params = params.for_task(task)
        key = cls.cache_key(task, params, seed)
        folder = cache_dir / "mdlm" / key
        if not cls._cached(folder, params):
            from systems.backends.trained_cache import training_lock

            with training_lock(folder):  # concurrent workers train this model once
                if not cls._cached(folder, params):
                    if folder.exists():  # trained with another thread count: set aside in one rename
                        stale = folder.with_name(f".stale-{key}-{os.getpid()}")
                        os.replace(folder, stale)
                        shutil.rmtree(stale, ignore_errors=True)
                    return cls._train_and_store(task, params, folder, key, seed)
        return cls._load(task, params, folder, seed)

    @staticmethod
    def _cached(folder: Path, params: MDLMParams) -> bool:
        """A stored model trained as asked. Before the thread count entered the key, a model trained
        with 2 threads was stored under the 1-thread key; such a folder is trained again."""
        meta = folder / "meta.json"
        if not meta.exists():
            return False
        return trained_threads(json.loads(meta.read_text())) == params.train_config().threads

    @classmethod
    def _load(cls, task: TaskSpec, params: MDLMParams, folder: Path, seed: int) -> EmbeddedMDLMBackend:
        cfg = params.train_config()
        meta = json.loads((folder / "meta.json").read_text())
        prep = prepare(task, cfg, BPETokenizer.load(folder / "tokenizer.json"))
        model = MaskedDiffusionTransformer(ModelConfig(**meta["model_config"]))
        model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
        model.eval()
        return cls(
            model, prep, params, data_fingerprint(task), seed, meta["train_seconds"], True, meta["log"]
        )

    @classmethod
    def _train_and_store(
        cls, task: TaskSpec, params: MDLMParams, folder: Path, key: str, seed: int
    ) -> EmbeddedMDLMBackend:
        cfg = params.train_config()
        log: list[JSON] = []
        model, prep, seconds = train_model(task, cfg, seed, log)
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{key}-"))
        try:
            torch.save(model.state_dict(), tmp / "model.pt")
            prep.tok.save(tmp / "tokenizer.json")
            meta = {
                "model_config": model.cfg.to_json(),
                "train_config": asdict(cfg),
                "seed": seed,
                "task": task.name,
                "data_fingerprint": data_fingerprint(task),
                "train_seconds": seconds,
                "kernels": kernels.identity(),  # what trained it (bench/kernels.py); the key says portable or not
                "log": log,
            }
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            try:
                os.replace(tmp, folder)
            except OSError:  # another process finished first: keep theirs
                shutil.rmtree(tmp, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return cls(model, prep, params, data_fingerprint(task), seed, seconds, False, log)

    # ------------------------------------------------------------------ TextBackend
    def identity(self) -> JSON:
        # the decoding departures enter only when set, so older identities (and cell hashes) are unchanged
        extra = {k: True for k in ("length_first", "eos_suffix") if getattr(self.params, k)}
        return {
            **extra,
            "kind": self.kind,
            "code": CODE_VERSION,
            "data_fingerprint": self.data_hash,
            "train": train_key(self.params.train_config()),
            "train_seed": self.train_seed,
            "sampler_defaults": self.default_sampler().to_json(),
            "likelihood": "monte-carlo upper bound on NLL (LLaDA)",
        }

    def default_sampler(self, **overrides: Any) -> SamplerConfig:
        p = self.params
        d: dict[str, Any] = {
            "steps": p.steps,
            "gen_length": self.response_length,
            "block_length": p.block_length,
            "remasking": p.remasking,
            "temperature": p.temperature,
            "cfg_scale": p.cfg_scale,
            "threshold": p.threshold,
            "prefix_cache": p.prefix_cache,
            "choice_temperature": p.choice_temperature,
        }
        d = merge_knobs(d, overrides)
        d["gen_length"] = min(int(d["gen_length"]), self.response_length)
        return checked(SamplerConfig(**d), self.response_length)

    def _sampler_for(self, req: GenerationRequest) -> SamplerConfig:
        extra = dict(req.params.extra)
        if "temperature" not in extra:
            extra["temperature"] = req.params.temperature
        return self.default_sampler(**extra)

    @staticmethod
    def row_seed(seed: int, sample_index: int) -> int:
        return int(hashlib.sha256(f"{seed}:{sample_index}".encode()).hexdigest()[:8], 16)

    def _prompt_text(self, req: GenerationRequest) -> str:
        return "\n".join(content for _, content in req.messages)

    def _natural_hook(self, prompt_len: int):  # noqa: ANN202
        allowed = self._natural_allowed

        def hook(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            logits[:, prompt_len:, ~allowed] = -torch.inf
            return logits

        return hook

    def _schema_vocabulary(self) -> tuple[list[bytes | None], list[int], int]:
        """Token bytes for json_schema requests (special ids other than EOS never appear in a record)."""
        spelled = [None if i < len(SPECIALS) else self.tok.token_bytes(i) for i in range(self.tok.vocab_size)]
        return spelled, [self.tok.eos_id], self.tok.mask_id

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple[SamplerConfig, str | None], list[int]] = {}
        for i, r in enumerate(requests):
            schema = r.params.json_schema
            key = None if schema is None else json.dumps(schema)  # key order is the record's order
            groups.setdefault((self._sampler_for(r), key), []).append(i)
        bs = self.params.gen_batch_size
        for (cfg, schema_key), idx in groups.items():
            schema = None if schema_key is None else json.loads(schema_key)
            for c0 in range(0, len(idx), bs):
                chunk = idx[c0 : c0 + bs]
                texts = [self._prompt_text(requests[i]) for i in chunk]
                prompts = [self._window(t) for t in texts]
                seeds = [self.row_seed(requests[i].seed, requests[i].sample_index) for i in chunk]
                comps = self.generate_ids(prompts, cfg, seeds, texts, schema=schema)
                for i, comp in zip(chunk, comps, strict=True):
                    out[i] = comp
        return [c for c in out if c is not None]

    def _window(self, text: str) -> list[int]:
        """The prompt's token-window ids (conditioning.py)."""
        return prompt_ids(self.tok, text, self.params.max_prompt_tokens, lines=self.model.cfg.line_slots > 0)

    def _conditioned(self, texts: Sequence[str] | None) -> Conditioned:
        """The model with these prompts' line vectors bound (no lines without line slots or texts)."""
        k = self.model.cfg.line_slots
        if not k or texts is None:
            return Conditioned(self.model, None)
        if self._embedder is None:
            self._embedder = LineEmbedder(EMBEDDER)  # the one the line slots were trained with
        width = self.params.max_prompt_tokens
        of = [window_ids(self.tok, t, width)[1] for t in texts]
        return Conditioned(self.model, line_batch(texts, k, self._embedder, of, width))

    @torch.no_grad()
    def generate_ids(
        self,
        prompts: list[list[int]],
        cfg: SamplerConfig,
        seeds: list[int],
        texts: Sequence[str] | None = None,
        schema: JSON | None = None,
    ) -> list[Completion]:
        """One sampler batch; per-row outputs do not depend on the batch (see llada_sampler.denoise).

        `texts`: the prompts' texts, whose lines the line slots read (None: no lines). `schema`: decode
        under the schema's token automaton (systems/backends/schema_dfa.py; None: unconstrained)."""
        t0 = time.perf_counter()
        ids, pmask = left_pad(prompts, self.tok.pad_id, width=self.params.max_prompt_tokens)
        b, p = ids.shape
        canvas = torch.cat([ids, torch.full((b, cfg.gen_length), self.tok.mask_id, dtype=torch.long)], dim=1)
        attn = torch.cat([pmask, torch.ones((b, cfg.gen_length), dtype=torch.bool)], dim=1)
        model = self._conditioned(texts)
        chooser = None if schema is None else self.schema_chooser(schema, p)
        hook = self._natural_hook(p)
        if self.params.eos_suffix:
            hook = EosSuffix(p, self.tok.eos_id, self.tok.mask_id, hook)
        if self.params.length_first:
            shortest = 0 if chooser is None else chooser.auto.shortest
            hook = LengthFirst(p, self.tok.eos_id, self.tok.mask_id, hook, seeds, min_length=shortest)
        res = denoise(
            model,
            canvas,
            p,
            self.tok.mask_id,
            cfg,
            seeds,
            attention_mask=attn,
            logits_hook=hook,
            cached_model=model if cfg.prefix_cache else None,
            choose_x0=chooser,
        )
        secs = (time.perf_counter() - t0) / b
        comps = []
        for j in range(b):
            resp, stopped = cut_at_eos(res.x[j, p:].tolist(), [self.tok.eos_id])
            comps.append(
                Completion(
                    text=self.tok.decode(resp),
                    tokens_in=len(prompts[j]),
                    tokens_out=len(resp),
                    finish_reason="stop" if stopped else "length",
                    seconds=secs,
                    nfe=int(res.row_nfe[j]) if res.row_nfe is not None else res.nfe,
                )
            )
        return comps

    # ------------------------------------------------------------------ skeleton infilling
    def skeleton_plan(self, task: TaskSpec | None = None) -> SkeletonPlan:
        """The plan the model was trained with (its budgets are in this tokenizer's tokens)."""
        return self.plan

    def skeleton_fits(self, segs: Sequence[Any]) -> bool:
        return (
            len(lay_out(segs, self.tok.encode, self.tok.mask_id, self.tok.eos_id).tokens)
            <= self.response_length
        )

    @torch.no_grad()
    def infill(self, rows: Sequence[InfillRow], **overrides: Any) -> list[InfillResult]:
        """Fill the slots of each row's skeleton; structure tokens stay fixed. Batched by gen_batch_size."""
        cfg = self.default_sampler(**overrides)
        out: list[InfillResult] = []
        bs = self.params.gen_batch_size
        for c0 in range(0, len(rows), bs):
            chunk = rows[c0 : c0 + bs]
            t0 = time.perf_counter()
            prompts = [self._window(r.prompt) for r in chunk]
            canvases: list[Canvas] = [
                lay_out(r.segs, self.tok.encode, self.tok.mask_id, self.tok.eos_id, self.response_length)
                for r in chunk
            ]
            ids, pmask = left_pad(prompts, self.tok.pad_id, width=self.params.max_prompt_tokens)
            b, p = ids.shape
            resp = torch.tensor([c.tokens for c in canvases], dtype=torch.long)
            canvas = torch.cat([ids, resp], dim=1)
            attn = torch.cat([pmask, torch.ones_like(resp, dtype=torch.bool)], dim=1)
            hook = self.slot_vocab.hook(canvases, p)
            model = self._conditioned([r.prompt for r in chunk])
            res = denoise(
                model,
                canvas,
                p,
                self.tok.mask_id,
                cfg,
                [r.seed for r in chunk],
                attention_mask=attn,
                logits_hook=hook,
                cached_model=model if cfg.prefix_cache else None,
            )
            secs = (time.perf_counter() - t0) / b
            for j, c in enumerate(canvases):
                texts = read_slots(
                    res.x[j].tolist(), c, p, self.tok.decode, {self.tok.nul_id, self.tok.eos_id}
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
    @torch.no_grad()
    def nll(
        self, texts: list[str], n_mc: int = 32, seed: int = 0, prompt: str = ""
    ) -> list[tuple[float, int]]:
        """LLaDA's Monte Carlo upper bound on each text's NLL (nats) given `prompt`; (bound, tokens).

        A bound, not an exact likelihood: perplexities from it are upper bounds and are labelled so.
        """
        p = self._window(prompt)
        p = [self.tok.pad_id] * (self.params.max_prompt_tokens - len(p)) + p  # response at its trained column
        model = self._conditioned([prompt])
        out = []
        for i, t in enumerate(texts):
            r = self.tok.encode(t)[: self.response_length]
            r = r + [self.tok.eos_id] * (self.response_length - len(r))
            bound, n = mc_nll_bound(model, p, r, self.tok.mask_id, n_mc, seed + i, pad_id=self.tok.pad_id)
            out.append((bound, n))
        return out


__all__ = ["EmbeddedMDLMBackend", "InfillResult", "InfillRow", "MDLMParams", "record_text", "Slot"]
