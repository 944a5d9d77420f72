"""One embedded DLM shared by several tasks: issue 10's "one model shared by tasks" for competence.

The per-task DLM (train.py) learns the JSON of TruthfulQA and Self-Instruct from 32 records each and,
within the 10-minute budget, either memorises them or keeps no structure (docs/systems-diffusion.md,
"Competence"). A model trained on several tasks at once sees every task's records: the structure they
share (objects of string fields, quotes, separators) and more English. This trains such a model.

* **One tokenizer** (byte-level BPE, `tokenizers`) trained on the texts every task's own tokenizer would
  be trained on, joined, so no task's words are cut into bytes.
* **Each task keeps its own material** (`prepare` with the shared tokenizer): its response window,
  skeleton plan, value pools, notes and few-shot examples. The model's positions cover the longest
  window; a task with a shorter one trains and decodes on a prefix of them.
* **Steps go to the tasks in turn** (step i draws a batch of task i mod k), with the per-task loop's
  objective, masks and schedule unchanged (train.run_steps); `cfg.steps` counts them all. The issue's
  budget is 10 minutes of training per task, so k tasks may share k times the per-task budget.
* **Served per task** through the same backend class as the per-task model: `backends()` wraps the one
  set of weights with each task's prepared material, so `llada` and its sampler run unchanged.

Not a default. Measured (`benchmarks.diffusion.shared_model`; docs/systems-diffusion.md, "One model
shared by the four tasks"): on Table 1's four tasks it parses less than per-task models of the same
recipe and steps on MultiWOZ and SuperNI, and no better on TruthfulQA and Self-Instruct.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch

from bench import kernels
from bench.types import JSON, TaskSpec
from systems.backends.mdlm.backend import (
    CODE_VERSION,
    EmbeddedMDLMBackend,
    MDLMParams,
    data_fingerprint,
    train_key,
)
from systems.backends.mdlm.model import MaskedDiffusionTransformer, ModelConfig
from systems.backends.mdlm.tokenizer import BPETokenizer, train_bpe
from systems.backends.mdlm.train import (
    Batch,
    Prepared,
    TrainConfig,
    line_embedder,
    make_batch,
    new_model,
    prepare,
    run_steps,
    task_notes,
    tokenizer_texts,
)
from systems.backends.trained_cache import cache_key, cached_folder


def shared_tokenizer(specs: Sequence[TaskSpec], cfg: TrainConfig) -> BPETokenizer:
    """One BPE trained on the texts each task's own tokenizer is trained on, joined."""
    texts = [t for s in specs for t in tokenizer_texts(s, task_notes(s, cfg)[1])]
    return train_bpe(texts, cfg.vocab_size, cfg.pre_tokenizer)


def train_shared(
    specs: Sequence[TaskSpec], cfg: TrainConfig, seed: int, log: list[JSON] | None = None
) -> tuple[MaskedDiffusionTransformer, list[Prepared], float]:
    """Train one model on `specs` in turn for `cfg.steps` steps in all; returns (model in eval mode, each
    task's prepared material with the shared tokenizer, seconds)."""
    t0 = time.perf_counter()
    with kernels.training(cfg.threads):
        torch.manual_seed(seed)
        rng = random.Random(seed)
        tok = shared_tokenizer(specs, cfg)
        preps = [prepare(s, cfg, tok) for s in specs]
        model = new_model(max(preps, key=lambda p: p.response_length), cfg)
        embedder = line_embedder(cfg, *preps)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01, betas=(0.9, 0.98))
        gen = torch.Generator().manual_seed(seed)
        model.train()
        from bench.progress import stage

        def draw(step: int) -> Batch:
            i = step % len(specs)
            return make_batch(preps[i], specs[i], cfg, rng, embedder)

        names = ", ".join(s.name for s in specs)
        with stage(f"training one embedded DLM on {names}", cfg.steps, "step") as bar:
            run_steps(model, opt, tok.mask_id, cfg, draw, gen, log, t0, bar)
        model.eval()
    return model, preps, time.perf_counter() - t0


def shared_key(specs: Sequence[TaskSpec], params: MDLMParams, seed: int) -> str:
    """Cache key of a shared model: the code version, every task's data, the training config and seed."""
    return cache_key(
        {
            "code": CODE_VERSION,
            "shared": [data_fingerprint(s) for s in specs],
            "train": train_key(params.train_config()),
            "seed": seed,
        }
    )


def shared_backends(
    specs: Sequence[TaskSpec], params: MDLMParams, cache_dir: Path, seed: int
) -> list[EmbeddedMDLMBackend]:
    """Each task's backend over one shared model, trained (once, under the training lock, renamed into
    place when complete: trained_cache.cached_folder) or loaded from `cache_dir/mdlm-shared/<key>`.
    `params.train_steps` counts the steps of all tasks together."""
    if params.train_steps is None:
        raise ValueError("a shared model needs train_steps: the per-task rule reads one task's records")
    cfg = params.train_config()
    trained: list[tuple[MaskedDiffusionTransformer, list[Prepared]]] = []

    def train(tmp: Path) -> JSON:
        log: list[JSON] = []
        model, preps, seconds = train_shared(specs, cfg, seed, log)
        torch.save(model.state_dict(), tmp / "model.pt")
        preps[0].tok.save(tmp / "tokenizer.json")
        trained.append((model, preps))
        return {
            "model_config": model.cfg.to_json(),
            "train_config": asdict(cfg),
            "seed": seed,
            "tasks": [s.name for s in specs],
            "train_seconds": seconds,
            "kernels": kernels.identity(),
            "log": log,
        }

    folder, cached = cached_folder(cache_dir, "mdlm-shared", shared_key(specs, params, seed), train)
    meta = json.loads((folder / "meta.json").read_text())
    if trained:  # trained here: serve the weights in memory rather than reading them back
        model, preps = trained[0]
    else:
        tok = BPETokenizer.load(folder / "tokenizer.json")
        preps = [prepare(s, cfg, tok) for s in specs]
        model = MaskedDiffusionTransformer(ModelConfig(**meta["model_config"]))
        model.load_state_dict(torch.load(folder / "model.pt", weights_only=True))
        model.eval()
    seconds, log = meta["train_seconds"], meta["log"]
    return [
        EmbeddedMDLMBackend(model, p, params, data_fingerprint(s), seed, seconds, cached, log)
        for s, p in zip(specs, preps, strict=True)
    ]
