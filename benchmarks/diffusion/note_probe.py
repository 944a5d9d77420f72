"""Does the embedded DLM *read* a note or hint? Teacher-forced probability of the constrained value, with vs without.

    python -m benchmarks.diffusion.note_probe ['{"note_kinds": ["value"]}'] [N]

Separates reading from decoding: for N references and each note kind (held-out phrasings) and a
`field: "value"` hint on `day`, the record is edited so the note holds (the training counterfactual),
only the tokens of the constrained value(s) are masked, and the model scores them given the default
`llada` prompt (instruction, 2 examples, field list) with and without the note. Prints per kind the mean
log-probability of those tokens with / without, and the mean copy-gate at them (how much of the
prediction comes from copying a prompt token). If the with-note probability is no higher than the
without-note one, the model ignores the note, whatever the sampler does. Needs BENCH_DATA_DIR.
"""

from __future__ import annotations

import json
import random
import sys
from types import SimpleNamespace
from typing import Any

import torch

from bench.context import default_cache_dir
from bench.tasks import load_task
from systems.backends.mdlm import EmbeddedMDLMBackend
from systems.backends.mdlm.train import hinted_positions, noted_values, record_text
from systems.diffusion_notes import Note, NoteSpace
from systems.skeleton_prompt import default_parts, hint_text, render_prompt


@torch.no_grad()
def value_log_prob(be: Any, prompt: str, record: dict, values: list[tuple[str, str]]) -> tuple[float, float]:
    """Mean log p of the tokens spelling `values` in `record` (only they are masked) and the copy gate."""
    tok, P, R = be.tok, be.params.max_prompt_tokens, be.response_length
    resp = tok.encode(record_text(record))[:R]
    pos = sorted(hinted_positions(tok, resp, record, values))
    if not pos:
        return float("nan"), float("nan")
    enc = be._encode(prompt)
    ids = torch.full((1, P + R), tok.pad_id, dtype=torch.long)
    ids[0, P - len(enc.ids) : P] = torch.tensor(enc.ids)
    ids[0, P:] = torch.tensor(resp + [tok.eos_id] * (R - len(resp)))
    target = ids.clone()
    for i in pos:
        ids[0, P + i] = tok.mask_id
    attn = torch.zeros_like(ids, dtype=torch.bool)
    attn[0, P - len(enc.ids) :] = True
    bound = be._conditioned([enc], P)
    logp = torch.log_softmax(bound(ids, attn), dim=-1)
    cols = [P + i for i in pos]
    lp = float(logp[0, cols].gather(-1, target[0, cols][:, None]).mean())
    h = be.model.hidden(ids, attn, bound._cond(1))
    gate = float(torch.sigmoid(be.model.copy_gate(be.model.ln_f(h[0, cols]))).mean())
    return lp, gate


def probe(be: Any, spec: Any, n: int) -> list[dict]:
    space = NoteSpace(spec)
    rng = random.Random(0)
    rows = []
    kinds = space.kinds() + ["hint"]
    for kind in kinds:
        acc = {"with": [], "without": [], "gate_with": [], "gate_without": []}
        for i in range(n):
            rec = rng.choice(spec.references)
            examples = rng.sample(list(spec.references), 2)
            parts = default_parts(spec, examples)
            if kind == "hint":
                values = sorted({r["day"] for r in spec.references if "day" in r})
                v = rng.choice(values)
                edited = {**rec, "day": v}
                constrained = [("day", hint_text(v))]
                with_prompt = render_prompt(parts) + f'\nday: "{v}"'
            else:
                note: Note | None = space.draw(kind, random.Random(f"probe:{kind}:{i}"), held_out=True)
                if note is None:
                    continue
                edited = space.satisfy(note, rec, rng, examples)
                if edited is None:
                    continue
                constrained = noted_values([note], edited)
                parts.notes = [note.text]
                with_prompt = render_prompt(parts)
                parts.notes = []
            plain_prompt = render_prompt(default_parts(spec, examples))
            lw, gw = value_log_prob(be, with_prompt, edited, constrained)
            lo, go = value_log_prob(be, plain_prompt, edited, constrained)
            if lw == lw and lo == lo:  # not NaN
                acc["with"].append(lw)
                acc["without"].append(lo)
                acc["gate_with"].append(gw)
                acc["gate_without"].append(go)
        m = {k: sum(v) / max(1, len(v)) for k, v in acc.items()}
        rows.append({"kind": kind, "n": len(acc["with"]), **m})
    return rows


def main(argv: list[str]) -> None:
    params = json.loads(argv[0]) if argv else {}
    n = int(argv[1]) if len(argv) > 1 else 48
    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    be = EmbeddedMDLMBackend.from_spec(
        {"params": params}, SimpleNamespace(cache_dir=default_cache_dir(), task=spec, seed=0)
    )
    print(
        "| kind | n | log p with | log p without | copy gate with | without |\n|---|---:|---:|---:|---:|---:|"
    )
    for r in probe(be, spec, n):
        print(
            f"| {r['kind']} | {r['n']} | {r['with']:.2f} | {r['without']:.2f} | {r['gate_with']:.3f} "
            f"| {r['gate_without']:.3f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
