"""Teacher-forced denoising accuracy of the embedded DLM, by how much of the response is visible.

Each reference record (with its EOS padding) goes into the canvas behind `llada`'s own prompt; some
response positions are masked, and the probe counts how often the model's argmax at a masked position is
the reference's token. Two kinds of canvas:

* `t=X`: every position masked with probability X (the training distribution at noise level X);
* `prefix=K`: the first K response tokens visible, all later ones masked, scored on the next 24 (the
  canvas semi-autoregressive decoding sees).

Why: a model that reconstructs lightly masked records perfectly can still write broken ones, because the
sampler's first commits are made on canvases with almost nothing visible (docs/systems-diffusion.md,
"A model that has memorised the references still does not parse").

    python -m benchmarks.diffusion.denoise_probe --task truthfulqa --params '{"rope": true, ...}'
"""

from __future__ import annotations

import argparse
import json
import statistics
from types import SimpleNamespace
from typing import Any

import torch

from bench.context import default_cache_dir
from bench.tasks import load_task
from benchmarks.diffusion.canvas import PromptCanvas
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.llada import LLaDASystem

SCORED_AFTER_PREFIX = 24
CANVASES = (
    "t=0.15",
    "t=0.5",
    "t=0.9",
    "t=0.95",
    "t=0.97",
    "t=0.99",
    "t=1",
    "prefix=8",
    "prefix=16",
    "prefix=32",
)


def masks(canvas: str, length: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(masked, scored) boolean vectors over the response for one canvas kind."""
    kind, value = canvas.split("=")
    if kind == "t":
        masked = torch.rand(length, generator=gen) < float(value)
        return masked, masked
    k = int(value)
    masked = torch.zeros(length, dtype=torch.bool)
    masked[k:] = True
    scored = torch.zeros(length, dtype=torch.bool)
    scored[k : k + SCORED_AFTER_PREFIX] = True
    return masked, scored


def accuracy(be: Any, spec: Any, prompt: str, canvas: str, seed: int = 0) -> float:
    """Mean over references of the share of scored positions the argmax gets right."""
    gen = torch.Generator().manual_seed(seed)
    behind = PromptCanvas(be, prompt)
    scores = []
    for record in spec.references:
        resp = be.tok.encode(json.dumps(record, ensure_ascii=False)) + [be.tok.eos_id]
        masked, scored = masks(canvas, behind.width, gen)
        if not bool(scored.any()):
            continue
        pred = behind.logits(resp, masked).argmax(-1)
        scores.append(float((pred == behind.target(resp))[scored].float().mean()))
    return statistics.fmean(scores)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="truthfulqa")
    ap.add_argument("--n-references", type=int, default=32, help="Table 1's size (the model's training set)")
    ap.add_argument("--n-holdout", type=int, default=32, help="as the competence benchmark")
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (default: the catalog defaults)")
    ap.add_argument("--canvases", default=",".join(CANVASES))
    a = ap.parse_args(argv)
    spec = load_task(a.task, n_references=a.n_references or None, n_holdout=a.n_holdout)
    be = EmbeddedMDLMBackend.from_spec(
        {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=default_cache_dir(), task=spec, seed=0)
    )
    prompt = LLaDASystem({}).prompts(spec, 1, 0)[0]
    print(f"## {a.task}: teacher-forced accuracy at masked positions ({len(spec.references)} references)")
    print("| canvas | accuracy |\n|---|---:|")
    for canvas in a.canvases.split(","):
        print(f"| {canvas} | {accuracy(be, spec, prompt, canvas):.3f} |", flush=True)


if __name__ == "__main__":
    main()
