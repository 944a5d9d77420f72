"""What a translate-head training step costs with the head on the response columns only, against the head
on every column (the code before 2026-12-06), on the same batches and weights.

`python -m benchmarks.diffusion.translate_step [--task multiwoz/train] [--steps 20] [--threads 2]
[--params P] [--json F]`

The translating copy (`translate_head`) needs whole (batch, columns, vocabulary) distributions for its
product, so its training path (`MaskedDiffusionTransformer.translate_log_probs`) cannot use the gathered
shortcut of `target_log_probs`. Training masks nothing in the prompt's columns (256 by default against a
MultiWOZ response of about 64), so the head ran mostly on columns whose output was thrown away. Both
paths are timed forward + backward + optimizer step, alternating step by step so load on the box hits
both alike; their log-probabilities on the first batch and their weights after the last step are
compared bit for bit. Measured: docs/systems-diffusion.md, "Both routes
together".
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from bench.tasks import load_task
from systems.backends.mdlm.backend import MDLMParams
from systems.backends.mdlm.model import MaskedDiffusionTransformer
from systems.backends.mdlm.train import (
    draw_masks,
    line_embedder,
    make_batch,
    new_model,
    prepare,
    translate_loss,
)

PAIR = {"value_mask": 0.5, "translate_head": True, "copy_sentinel": True}
"""The opt-in pair the translate head is measured with (docs/systems-diffusion.md, "Both routes together")."""


def every_column(
    model: MaskedDiffusionTransformer,
    x: torch.Tensor,
    attn: torch.Tensor,
    where: torch.Tensor,
    targets: Any,
    lines: Any,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The baseline: the head on all prompt + response columns, then the masked ones picked out."""
    h = model.hidden(x, attn, lines)
    out, t, g = model._head(h, model._prompt_of(x, h, attn), parts=True)
    rows, cols = where.nonzero(as_tuple=True)
    lp = out[rows, cols].gather(-1, targets[:, None]).squeeze(-1)
    lt = torch.log(t[rows, cols].gather(-1, targets[:, None]).squeeze(-1).clamp_min(1e-12))
    return lp, lt, g[rows, cols, 0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per path")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--params", default=json.dumps(PAIR), help="MDLMParams JSON (needs translate_head)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    spec = load_task(a.task, n_references=None, n_holdout=None)
    cfg = MDLMParams(**json.loads(a.params)).for_task(spec).train_config()
    if not (cfg.translate_head and cfg.copy_head):
        raise SystemExit("--params must turn on translate_head (and keep copy_head)")
    prep = prepare(spec, cfg)
    torch.manual_seed(0)
    model = new_model(prep, cfg)
    with torch.no_grad():  # away from the zero-initialised translation, so every term counts
        model.trans_tok.weight.normal_(std=0.02)
    embedder = line_embedder(cfg, prep)
    rng, gen = random.Random(0), torch.Generator().manual_seed(0)
    batches = []
    for _ in range(a.steps + 1):
        batch = make_batch(prep, spec, cfg, rng, embedder)
        masked, t = draw_masks(batch, cfg, gen)
        noisy = torch.where(masked, torch.full_like(batch.ids, prep.tok.mask_id), batch.ids)
        batches.append((batch, masked, t, noisy))
    paths = {
        "every column (baseline)": every_column,
        "response columns": MaskedDiffusionTransformer.translate_log_probs,
    }
    models = {name: copy.deepcopy(model).train() for name in paths}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=cfg.lr) for name, m in models.items()}
    seconds: dict[str, list[float]] = {name: [] for name in paths}
    batch, masked, t, noisy = batches[0]
    with torch.no_grad():
        got = {
            n: f(models[n], noisy, batch.attn, masked, batch.ids[masked], batch.lines)
            for n, f in paths.items()
        }
    a_lp, b_lp = (v[0] for v in got.values())
    max_diff = float((a_lp - b_lp).abs().max())
    for step, (batch, masked, t, noisy) in enumerate(batches):
        for name, fn in paths.items():
            m, opt = models[name], opts[name]
            t0 = time.perf_counter()
            weights = (batch.weight / t.expand_as(batch.ids))[masked]
            denom = batch.maskable.sum(dim=1, keepdim=True).clamp_min(1).expand_as(batch.ids)[masked].float()
            lp, lt, g = fn(m, noisy, batch.attn, masked, batch.ids[masked], batch.lines)
            loss = (-lp * weights / denom).sum() + translate_loss(lt, g, batch.named, masked, weights, denom)
            opt.zero_grad(set_to_none=True)
            (loss / batch.ids.shape[0]).backward()
            opt.step()
            if step > 0:  # the first step warms allocators and kernels
                seconds[name].append(time.perf_counter() - t0)
    base, new = (statistics.median(seconds[n]) for n in paths)
    a_sd, b_sd = (m.state_dict() for m in models.values())
    same_weights = all(torch.equal(a_sd[k], b_sd[k]) for k in a_sd)
    row = {
        "task": a.task,
        "params": json.loads(a.params),
        "threads": a.threads,
        "steps": a.steps,
        "columns": cfg.max_prompt_tokens + prep.response_length,
        "response_columns": prep.response_length,
        "median_step_s": {n: round(statistics.median(s), 4) for n, s in seconds.items()},
        "speedup": round(base / new, 2),
        "max_abs_log_prob_difference": max_diff,
        "weights_bit_identical_after_all_steps": same_weights,
    }
    print(
        f"{a.task}: {row['columns']} columns, {row['response_columns']} in the response; {a.steps} steps each"
    )
    print("| path | median step s |\n|---|---:|")
    for n, s in row["median_step_s"].items():
        print(f"| {n} | {s:.4f} |")
    print(f"speedup {row['speedup']:.2f}x; largest |log p| difference {max_diff:.2e}; ", end="")
    print(f"weights bit-identical after {a.steps + 1} steps: {same_weights}")
    if a.json:
        Path(a.json).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
