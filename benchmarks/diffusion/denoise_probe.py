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

`--by-class` splits the scored positions by the reference token's class (structure or content) and adds
the content probability at structure positions; `--all-references --limit N` probes the steering
benchmark's model (every record but the holdout) on N of its references.
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
from systems.backends.mdlm.train import content_tokens
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


def accuracy(be: Any, spec: Any, prompt: str, canvas: str, seed: int = 0, limit: int | None = None) -> float:
    """Mean over references of the share of scored positions the argmax gets right."""
    return by_class(be, spec, prompt, canvas, seed, limit)["all"]


def by_class(
    be: Any, spec: Any, prompt: str, canvas: str, seed: int = 0, limit: int | None = None
) -> dict[str, float]:
    """Accuracy over all scored positions ("all", a mean over references), and pooled over the scored
    positions whose reference token is structure (no letter or digit: quotes, colons, commas, braces;
    EOS apart) or content, plus the mean probability of content tokens at the structure positions.

    Why the split: a build that writes a value word where a key's quote belongs (`", minutesleaveAt"`)
    puts content mass where structure is, and the "all" column averages that away."""
    gen = torch.Generator().manual_seed(seed)
    behind = PromptCanvas(be, prompt)
    content = content_tokens(be.tok)
    scores: list[float] = []
    total = torch.zeros(5, dtype=torch.float64)
    for record in spec.references[:limit]:
        resp = be.tok.encode(json.dumps(record, ensure_ascii=False)) + [be.tok.eos_id]
        masked, scored = masks(canvas, behind.width, gen)
        if not bool(scored.any()):
            continue
        logits, target = behind.logits(resp, masked), behind.target(resp)
        scores.append(float((logits.argmax(-1) == target)[scored].float().mean()))
        total += class_tally(logits, target, scored & (target != be.tok.eos_id), content)
    s_hits, s_n, c_hits, c_n, mass = total.tolist()
    nan = float("nan")
    return {
        "all": statistics.fmean(scores),
        "structure accuracy": s_hits / s_n if s_n else nan,
        "content accuracy": c_hits / c_n if c_n else nan,
        "content mass at structure": mass / s_n if s_n else nan,
    }


def class_tally(
    logits: torch.Tensor, target: torch.Tensor, scored: torch.Tensor, content: torch.Tensor
) -> torch.Tensor:
    """(structure hits, structure positions, content hits, content positions, summed content probability
    at the structure positions) over the `scored` positions of one canvas; `content` (V,) flags the
    vocabulary's content tokens."""
    right = logits.argmax(-1) == target
    structure = scored & ~content[target]
    words = scored & content[target]
    mass = torch.softmax(logits[structure].double(), -1)[:, content].sum()
    return torch.stack(
        [
            right[structure].sum().double(),
            structure.sum().double(),
            right[words].sum().double(),
            words.sum().double(),
            mass,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="truthfulqa")
    ap.add_argument("--n-references", type=int, default=32, help="Table 1's size (the model's training set)")
    ap.add_argument("--n-holdout", type=int, default=32, help="as the competence benchmark")
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (default: the catalog defaults)")
    ap.add_argument("--canvases", default=",".join(CANVASES))
    ap.add_argument(
        "--all-references",
        action="store_true",
        help="the steering benchmark's split (every record but its holdout)",
    )
    ap.add_argument("--limit", type=int, default=None, help="probe the first N references only")
    ap.add_argument("--by-class", action="store_true", help="split the accuracy into structure and content")
    a = ap.parse_args(argv)
    if a.all_references:
        spec = load_task(a.task, n_references=None, n_holdout=None)
    else:
        spec = load_task(a.task, n_references=a.n_references or None, n_holdout=a.n_holdout)
    be = EmbeddedMDLMBackend.from_spec(
        {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=default_cache_dir(), task=spec, seed=0)
    )
    prompt = LLaDASystem({}).prompts(spec, 1, 0)[0]
    print(f"## {a.task}: teacher-forced accuracy at masked positions ({len(spec.references)} references)")
    if not a.by_class:
        print("| canvas | accuracy |\n|---|---:|")
        for canvas in a.canvases.split(","):
            print(f"| {canvas} | {accuracy(be, spec, prompt, canvas, limit=a.limit):.3f} |", flush=True)
        return
    print(
        "| canvas | accuracy | structure | content | content mass at structure |\n|---|---:|---:|---:|---:|"
    )
    for canvas in a.canvases.split(","):
        row = by_class(be, spec, prompt, canvas, limit=a.limit)
        print(f"| {canvas} | " + " | ".join(f"{v:.3f}" for v in row.values()) + " |", flush=True)


if __name__ == "__main__":
    main()
