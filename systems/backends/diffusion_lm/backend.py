"""Diffusion-LM as a per-task backend: trained on the task's references on the CPU (cached), then sampled.

`DiffusionLMBackend.from_spec(spec, env)` trains (or loads from `env.cache_dir/diffusion_lm/<key>`) a
small Diffusion-LM on `env.task.references`; the key hashes the code version, the task's data
fingerprint, the training config and the seed. `sample_texts(n, seed, steps, clamp)` draws n
unconditional records (Diffusion-LM has no prompt: it models the references' distribution).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import BenchError
from bench.types import JSON, TaskSpec
from systems.backends.diffusion_lm.model import DiffusionLM, DLMConfig
from systems.backends.diffusion_lm.sampler import sample
from systems.backends.diffusion_lm.schedule import Schedule
from systems.backends.diffusion_lm.tokenizer import JSONTokenizer
from systems.backends.diffusion_lm.train import DLMTrainConfig, train_model
from systems.backends.trained_cache import cache_key, cached_folder, data_fingerprint

CODE_VERSION = "diffusion-lm-1"  # bump when training or tokenization changes meaning


class DiffusionLMParams(BaseModel):
    """Catalog `params`: training config and the default sampler settings."""

    model_config = ConfigDict(extra="forbid")

    vocab_size: int = Field(2048, ge=300, le=32000, description="BPE vocabulary (structural chars isolated)")
    max_len: int = Field(256, ge=8, description="cap on the sequence length (95th pct of the references)")
    emb_dim: int = Field(16, ge=2, description="word-embedding dimension d (paper: E2E 16, ROCStories 128)")
    width: int = Field(128, ge=16, description="transformer width (paper: BERT-base, 768)")
    n_layers: int = Field(3, ge=1, description="transformer layers (paper: 12)")
    n_heads: int = Field(4, ge=1, description="attention heads (paper: 12)")
    d_ff: int = Field(512, ge=16, description="feed-forward width (paper: 3072)")
    diffusion_steps: int = Field(2000, ge=2, description="T of the sqrt schedule (paper: 2000)")
    train_steps: int = Field(1500, ge=1, description="most optimizer steps (paper: E2E 200k, ROC 400k)")
    token_budget: int | None = Field(
        1_500_000, ge=1, description="cap on steps x batch x L (CPU budget); None = always train_steps"
    )
    batch_size: int = Field(16, ge=1, description="training batch (paper: 64)")
    lr: float = Field(2e-3, gt=0, description="peak learning rate, warmup then cosine (paper: 1e-4)")
    seed: int | None = Field(None, description="training seed; None = the env's seed")
    sample_steps: int = Field(100, ge=1, description="default sampling steps (respaced from T)")
    clamp: bool = Field(True, description="default: clamp each x_0 prediction to its nearest embedding")
    gen_batch_size: int = Field(32, ge=1, description="rows per sampler batch (transport only)")
    threads: int | None = Field(
        None, ge=1, description="torch threads; for training also in the cache key when not 1"
    )

    def train_config(self) -> DLMTrainConfig:
        return DLMTrainConfig(
            vocab_size=self.vocab_size,
            max_len=self.max_len,
            emb_dim=self.emb_dim,
            width=self.width,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            d_ff=self.d_ff,
            diffusion_steps=self.diffusion_steps,
            train_steps=self.train_steps,
            token_budget=self.token_budget,
            batch_size=self.batch_size,
            lr=self.lr,
            threads=self.threads or 1,
        )


class DiffusionLMBackend:
    """A per-task Diffusion-LM: tokenizer, trained weights, schedule, sampler defaults."""

    kind = "diffusion_lm"

    def __init__(
        self,
        model: DiffusionLM,
        tok: JSONTokenizer,
        params: DiffusionLMParams,
        data_hash: str,
        train_seed: int,
        meta: JSON,
        loaded_from_cache: bool,
    ) -> None:
        self.model = model
        self.tok = tok
        self.params = params
        self.data_hash = data_hash
        self.train_seed = train_seed
        self.meta = meta
        self.loaded_from_cache = loaded_from_cache
        self.schedule = Schedule.sqrt(params.diffusion_steps)

    @property
    def train_log(self) -> list[JSON]:
        return list(self.meta.get("log", []))

    @property
    def seq_len(self) -> int:
        return self.model.cfg.seq_len

    @classmethod
    def from_spec(cls, spec: JSON, env: Any) -> DiffusionLMBackend:
        try:
            params = DiffusionLMParams(**(spec.get("params") or {}))
        except ValidationError as exc:
            raise BenchError(f"diffusion_lm params: {exc}") from exc
        task: TaskSpec | None = getattr(env, "task", None)
        if task is None:
            raise BenchError("Diffusion-LM is trained per task: its catalog entry needs per_task: true")
        seed = params.seed if params.seed is not None else int(getattr(env, "seed", 0))
        return cls.train_or_load(task, params, Path(env.cache_dir), seed)

    @classmethod
    def key(cls, task: TaskSpec, params: DiffusionLMParams, seed: int) -> str:
        return cache_key(
            {
                "code": CODE_VERSION,
                "data": data_fingerprint(task),
                "train": params.train_config().key(),
                "seed": seed,
            }
        )

    @classmethod
    def train_or_load(
        cls, task: TaskSpec, params: DiffusionLMParams, cache_dir: Path, seed: int
    ) -> DiffusionLMBackend:
        cfg = params.train_config()

        def train(tmp: Path) -> JSON:
            log: list[JSON] = []
            model, prep, seconds = train_model(task, cfg, seed, log)
            torch.save(model.state_dict(), tmp / "model.pt")
            (tmp / "tokenizer.json").write_text(prep.tok.to_str())
            return {
                "model_config": model.cfg.to_json(),
                "train_config": cfg.key(),
                "seed": seed,
                "task": task.name,
                "data_fingerprint": data_fingerprint(task),
                "n_train": prep.n_train,
                "n_dropped": prep.n_dropped,
                "train_seconds": seconds,
                "log": log,
            }

        folder, cached = cached_folder(cache_dir, "diffusion_lm", cls.key(task, params, seed), train)
        meta = json.loads((folder / "meta.json").read_text())
        tok = JSONTokenizer.from_str((folder / "tokenizer.json").read_text())
        model = DiffusionLM(DLMConfig(**meta["model_config"]))
        model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
        model.eval()
        return cls(model, tok, params, data_fingerprint(task), seed, meta, cached)

    def identity(self) -> JSON:
        return {
            "kind": self.kind,
            "code": CODE_VERSION,
            "data_fingerprint": self.data_hash,
            "train": self.params.train_config().key(),
            "train_seed": self.train_seed,
        }

    def sample_texts(
        self, n: int, seed: int, steps: int | None = None, clamp: bool | None = None
    ) -> list[tuple[str, str, int, int]]:
        """n records as (text, finish_reason, tokens_out, nfe); finish_reason `length` if no <pad> ends it."""
        p = self.params
        steps = steps or p.sample_steps
        clamp = p.clamp if clamp is None else clamp
        out: list[tuple[str, str, int, int]] = []
        old = torch.get_num_threads()
        if p.threads:
            torch.set_num_threads(p.threads)
        try:
            for start in range(0, n, p.gen_batch_size):
                idx = list(range(start, min(n, start + p.gen_batch_size)))
                res = sample(self.model, self.schedule, self.seq_len, seed, idx, steps, clamp)
                for row in res.ids.tolist():
                    cut = row.index(self.tok.pad_id) if self.tok.pad_id in row else len(row)
                    reason = "stop" if cut < len(row) else "length"
                    out.append((self.tok.decode(row[:cut]), reason, cut, res.nfe))
        finally:
            torch.set_num_threads(old)
        return out

    def generate(self, requests: list) -> list:  # pragma: no cover - guard for misuse
        raise BenchError("Diffusion-LM is unconditional: use the diffusion-lm system (sample_texts)")
