"""Which route of the embedded DLM's head wrote each token of plain `llada` records: the vocabulary, the
copy head or the translation?

`python -m benchmarks.diffusion.route_probe --params P [--task multiwoz/train] [--n 16] [--seed 0]
[--system '{"notes": ["..."]}'] [--json F]`

Every model call of the LLaDA sampler is recorded with the copy share (1 − the weight the vocabulary head
keeps, `model._pointer`) and, for a `translate_head` model, the router's g at each position. A token
committed between two calls is charged to the shares of the call before its commit. Rows: content
tokens (those the copy head may copy) and structure tokens, with the mean shares and the share of commits
where a route held more than half, and the tokens each route led. `--system` passes `llada` params (a note,
a hint) to see which route serves them. Measured: docs/systems-diffusion.md, "Both routes together".
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from bench.context import default_cache_dir
from bench.tasks import load_task
from benchmarks.diffusion.steering import _OneBackend, records
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.backends.mdlm.model import MaskedDiffusionTransformer


class RouteRecorder:
    """Wraps one model's forward so each call keeps (ids, copy share, router g); `restore` unwraps it."""

    def __init__(self, model: MaskedDiffusionTransformer) -> None:
        self.model, self.calls = model, []
        self._keep: list[torch.Tensor] = []
        pointer = model._pointer

        def kept(scores: torch.Tensor, hn: torch.Tensor) -> Any:
            attn, gate, keep = pointer(scores, hn)
            self._keep.append(keep[..., 0])
            return attn, gate, keep

        def forward(x: torch.Tensor, attention_mask: Any = None, lines: Any = None) -> torch.Tensor:
            h = model.hidden(x, attention_mask, lines)
            self._keep.clear()
            head = model._head(h, model._prompt_of(x, h, attention_mask), parts=model.cfg.translate)
            out, g = (head[0], head[2][..., 0]) if model.cfg.translate else (head, torch.zeros(x.shape))
            copy = 1 - self._keep[-1] if self._keep else torch.zeros(x.shape)
            self.calls.append((x.clone(), copy.detach(), g.detach()))
            return out

        model._pointer, model.forward = kept, forward  # instance attributes shadow the class's

    def restore(self) -> None:
        del self.model._pointer, self.model.forward


def commits(calls: list, mask_id: int, content: torch.Tensor) -> dict[str, list[tuple[float, float, int]]]:
    """(copy share, router g, token id) at each committed token, from the call before it was committed."""
    out: dict[str, list[tuple[float, float, int]]] = {"content": [], "structure": []}
    for (x0, copy, g), (x1, _, _) in zip(calls, calls[1:], strict=False):
        if x0.shape != x1.shape:  # a new batch of rows
            continue
        for b, c in ((x0 == mask_id) & (x1 != mask_id)).nonzero().tolist():
            token = int(x1[b, c])
            kind = "content" if bool(content[token]) else "structure"
            out[kind].append((float(copy[b, c]), float(g[b, c]), token))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (the build to probe)")
    ap.add_argument("--n", type=int, default=16, help="plain records")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--system", default="{}", help="llada params JSON for the prompt (notes, hints)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    spec = load_task(a.task, n_references=None, n_holdout=None)
    cache = default_cache_dir()
    backend = EmbeddedMDLMBackend.from_spec(
        {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
    )
    model = backend.model
    if not model.cfg.prompt_width:
        raise SystemExit("this build has no copy head: every token is the vocabulary head's")
    recorder = RouteRecorder(model)
    try:
        with torch.no_grad():
            recs, _, texts = records(spec, _OneBackend(backend, cache), json.loads(a.system), a.n, a.seed)
    finally:
        recorder.restore()
    by_kind = commits(recorder.calls, backend.tok.mask_id, model.copyable)
    row: dict[str, Any] = {
        "task": a.task,
        "params": json.loads(a.params),
        "system": json.loads(a.system),
        "seed": a.seed,
        "parse_rate": sum(isinstance(r, dict) for r in recs) / a.n,
        "first_text": texts[0],
    }
    print(f"{a.task}, {a.params}, {a.system}: parse {row['parse_rate']:.3f}; {texts[0][:160]}")
    print(
        "| committed | tokens | mean copy share | copy > 0.5 | mean router g | g > 0.5 |\n|---|---:|---:|---:|---:|---:|"
    )
    for kind, v in by_kind.items():
        if not v:
            continue
        copy, g, tokens = zip(*v, strict=True)
        led = {
            route: Counter(backend.tok.token_text(t) for s, t in zip(shares, tokens, strict=True) if s > 0.5)
            for route, shares in (("copy", copy), ("router", g))
        }
        row[kind] = {
            "tokens": len(v),
            "mean_copy_share": statistics.mean(copy),
            "copy_led": sum(c > 0.5 for c in copy) / len(v),
            "mean_router_g": statistics.mean(g),
            "router_led": sum(x > 0.5 for x in g) / len(v),
            "led_tokens": {route: dict(c.most_common(8)) for route, c in led.items()},
        }
        r = row[kind]
        print(
            f"| {kind} | {r['tokens']} | {r['mean_copy_share']:.4f} | {r['copy_led']:.3f} "
            f"| {r['mean_router_g']:.4f} | {r['router_led']:.3f} |"
        )
    for kind in by_kind:
        for route, top in row.get(kind, {}).get("led_tokens", {}).items():
            if top:
                print(f"{kind} tokens the {route} led: {top}")
    if a.json:
        Path(a.json).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
