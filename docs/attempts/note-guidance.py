"""Attempt (2026-12-06, not landed): classifier-free guidance against the prompt without its note.

    MODE=prompt|meaning python docs/attempts/note-guidance.py PARAMS_JSON SCALES KINDS OUT_JSON
    e.g. MODE=prompt python docs/attempts/note-guidance.py '{}' 0,1,3 set,value /tmp/rows.json

The sampler's CFG (logits = un + (s + 1)(cond - un)) with `un` computed on a negative prompt instead of a
masked one: MODE=prompt, the same prompt without the note line (negative prompting, as in Sanchez et al.
2023, "Stay on topic with classifier-free guidance"); MODE=meaning, the same tokens with the note's
sentence vectors removed (so the copy head sees the same words in both passes). The steering
benchmark's protocol (multiwoz/train, all references, held-out phrasings, seeds 0-4 x 16 records).
Results and why it fails: docs/systems-diffusion.md, "Guidance against the prompt without its note".
Built on commit 4514b8f's internals (Conditioned, denoise, left_pad).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from types import SimpleNamespace

import torch

from bench.context import default_cache_dir
from bench.tasks import load_task
from metrics.extract import extract_record
from systems.backends.llada_sampler import denoise, left_pad
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.backends.mdlm.conditioning import window_ids
from systems.backends.mdlm.model import Conditioned
from systems.diffusion_notes import NoteSpace
from systems.llada import LLaDASystem

N, SEEDS = 16, 5
MODE = os.environ.get("MODE", "prompt")


class Guided(Conditioned):
    """CFG's unconditional rows (the second half of the batch) read `neg`'s prompt instead of a masked one."""

    def __init__(
        self, cond: Conditioned, neg: Conditioned, neg_ids: torch.Tensor, neg_mask: torch.Tensor, p: int
    ):
        super().__init__(cond.model, cond.lines)
        self.neg, self.neg_ids, self.neg_mask, self.p = neg, neg_ids, neg_mask, p

    def __call__(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        n = self.lines[0].shape[0]
        if x.shape[0] != 2 * n or attention_mask is None:
            return super().__call__(x, attention_mask)
        x, am = x.clone(), attention_mask.clone()
        x[n:, : self.p], am[n:, : self.p] = self.neg_ids, self.neg_mask
        lines = tuple(torch.cat([a, b]) for a, b in zip(self.lines, self.neg.lines, strict=True))
        return self.model(x, am, lines)


def without_note_vectors(be, texts, neg_texts, model: Conditioned) -> Conditioned:  # noqa: ANN001
    """The negative for MODE=meaning: slots of the note-free prompt, the window's note tokens kept but
    without their line's sentence vector."""
    neg = be._conditioned(neg_texts)
    keep = {line.strip() for t in neg_texts for line in t.split("\n")}
    w = model.lines[2].clone()
    for j, t in enumerate(texts):
        of = window_ids(be.tok, t, be.params.max_prompt_tokens)[1]
        for c, line in enumerate(of):
            if line is not None and line not in keep:
                w[j, w.shape[1] - len(of) + c] = 0
    neg.lines = (neg.lines[0], neg.lines[1], w)
    return neg


def generate(be, texts: list[str], neg_texts: list[str], seed: int, scale: float) -> list[str]:  # noqa: ANN001
    cfg = be.default_sampler(cfg_scale=scale)
    width = be.params.max_prompt_tokens
    ids, pm = left_pad([be._window(t) for t in texts], be.tok.pad_id, width=width)
    b, p = ids.shape
    canvas = torch.cat([ids, torch.full((b, cfg.gen_length), be.tok.mask_id, dtype=torch.long)], 1)
    attn = torch.cat([pm, torch.ones((b, cfg.gen_length), dtype=torch.bool)], 1)
    model = be._conditioned(texts)
    if scale > 0 and MODE == "meaning":
        model = Guided(model, without_note_vectors(be, texts, neg_texts, model), ids, pm, p)
    elif scale > 0:
        nids, npm = left_pad([be._window(t) for t in neg_texts], be.tok.pad_id, width=width)
        model = Guided(model, be._conditioned(neg_texts), nids, npm, p)
    seeds = [be.row_seed(seed, i) for i in range(b)]
    res = denoise(
        model, canvas, p, be.tok.mask_id, cfg, seeds, attention_mask=attn, logits_hook=be._natural_hook(p)
    )
    out = []
    for j in range(b):
        resp = res.x[j, p:].tolist()
        out.append(be.tok.decode(resp[: resp.index(be.tok.eos_id)] if be.tok.eos_id in resp else resp))
    return out


def main() -> None:
    params, scales = json.loads(sys.argv[1]), [float(s) for s in sys.argv[2].split(",")]
    torch.set_num_threads(2)
    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    t0 = time.time()
    env = SimpleNamespace(cache_dir=default_cache_dir(), task=spec, seed=0)
    be = EmbeddedMDLMBackend.from_spec({"params": params}, env)
    print("model ready", round(time.time() - t0), "s; trained in", round(be.train_seconds), "s", flush=True)
    space, rows = NoteSpace(spec), []
    for kind in sys.argv[3].split(","):
        for seed in range(SEEDS):
            note = space.draw(kind, random.Random(f"{spec.name}:{kind}:{seed}"), held_out=True)
            if note is None:
                continue
            with_note, plain = LLaDASystem({"notes": [note.text]}), LLaDASystem({})
            tw, tp = with_note.prompts(spec, N, seed), plain.prompts(spec, N, seed)
            ex = [with_note.prompt_parts(spec, seed, i).examples for i in range(N)]
            base = [extract_record(t).record for t in generate(be, tp, tp, seed, 0.0)]
            row = {
                "kind": kind,
                "seed": seed,
                "note": note.text,
                "without": sum(map(note.holds, base, ex)) / N,
            }
            for s in scales:
                texts = generate(be, tw, tp, seed, s)
                recs = [extract_record(t).record for t in texts]
                row[f"with@{s}"] = sum(map(note.holds, recs, ex)) / N
                row[f"parse@{s}"] = sum(isinstance(r, dict) for r in recs) / N
                row[f"texts@{s}"] = texts[:3]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if not k.startswith("texts")}), flush=True)
    with open(sys.argv[4], "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
