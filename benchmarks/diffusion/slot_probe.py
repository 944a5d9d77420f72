"""Does the embedded DLM read a prompt line at a field's value slot? Teacher-forced, values masked.

    python -m benchmarks.diffusion.slot_probe [--task multiwoz/train] [--field day]
        [--group saturday,sunday] [--lines 'The day is a weekend day.|day: "saturday"'] [--params P]

Each reference record goes into the canvas behind `llada`'s bare prompt (`k_shots: 0`) with every value
token masked and its keys, quotes and separators visible, so no other field can predict the probed one
and only the prompt can move it. The probe reads the model's distribution at the first token of the
field's value and reports the share of the field's first tokens that the group holds, for the plain
prompt and for the prompt with each `--lines` line added after the instruction (where a note or a hint
goes). A model that reads a line moves that share; one that does not gives the plain number back.

Why: set notes do not steer in the steering benchmark even in training phrasings, and the traces could
not tell a model that misreads a note from one that never looks at the prompt (docs/systems-diffusion.md,
"Set notes are not read").
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

DEFAULT_LINES = (
    "The day is a weekend day.",
    "Pick the day so that it is saturday or sunday.",
    'day: "saturday"',
)


def value_masked(tok: Any, record: dict, field: str) -> tuple[list[int], list[bool], int]:
    """The record's ids, which of them spell a value (masked in the probe), and the index of `field`'s
    first value token. Positions come from decoding prefixes, so any tokenizer's merges are respected."""
    text = json.dumps(record, ensure_ascii=False)
    ids = tok.encode(text)
    ends = [len(tok.decode(ids[: i + 1])) for i in range(len(ids))]
    starts = [0, *ends[:-1]]
    spans = []
    for key, value in record.items():
        at = (
            text.index(json.dumps(key, ensure_ascii=False) + ": ")
            + len(json.dumps(key, ensure_ascii=False))
            + 2
        )
        spans.append((key, at, at + len(json.dumps(value, ensure_ascii=False))))
    in_value = [any(a < e and b > s for _, s, e in spans) for a, b in zip(starts, ends, strict=True)]
    s = next(s for k, s, _ in spans if k == field) + 1  # the first character inside the quotes
    first = next(i for i, (a, b) in enumerate(zip(starts, ends, strict=True)) if a <= s < b)
    return ids, in_value, first


def slot_distribution(behind: PromptCanvas, record: dict, field: str) -> torch.Tensor:
    """p(token) at `field`'s first value token, every value token masked."""
    ids, in_value, first = value_masked(behind.tok, record, field)
    masked = torch.tensor((in_value + [False] * behind.width)[: behind.width])
    return behind.logits(ids, masked)[first].softmax(-1)


def group_share(be: Any, spec: Any, prompt: str, field: str, group: set[str], n: int) -> float:
    """Mean over `n` references of p(a group value's first token) / p(any value's first token)."""
    firsts: dict[int, set[str]] = {}
    for r in spec.references:
        firsts.setdefault(be.tok.encode(str(r[field]))[0], set()).add(str(r[field]))
    good = [t for t, vs in firsts.items() if vs <= group]
    every = list(firsts)
    behind = PromptCanvas(be, prompt)
    shares = []
    for r in [r for r in spec.references if field in r][:n]:
        p = slot_distribution(behind, r, field)
        shares.append(float(p[good].sum() / p[every].sum().clamp_min(1e-12)))
    return statistics.fmean(shares)


def with_line(prompt: str, line: str) -> str:
    first, _, rest = prompt.partition("\n")
    return f"{first}\n{line}\n{rest}" if rest else f"{first}\n{line}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--n-holdout", type=int, default=32)
    ap.add_argument("--field", default="day")
    ap.add_argument("--group", default="saturday,sunday", help="comma-separated values the lines ask for")
    ap.add_argument("--lines", default="|".join(DEFAULT_LINES), help="'|'-separated prompt lines to probe")
    ap.add_argument("--n", type=int, default=40, help="reference records probed")
    ap.add_argument("--params", default="{}", help="MDLMParams JSON (default: the catalog defaults)")
    a = ap.parse_args(argv)
    spec = load_task(a.task, n_references=None, n_holdout=a.n_holdout)
    be = EmbeddedMDLMBackend.from_spec(
        {"params": json.loads(a.params)}, SimpleNamespace(cache_dir=default_cache_dir(), task=spec, seed=0)
    )
    prompt = LLaDASystem({"k_shots": 0}).prompts(spec, 1, 0)[0]
    group = set(a.group.split(","))
    print(f"## {a.task} `{a.field}` in {sorted(group)}: share of the slot's value mass, values masked")
    print("| prompt | group share |\n|---|---:|")
    print(f"| plain | {group_share(be, spec, prompt, a.field, group, a.n):.3f} |", flush=True)
    for line in a.lines.split("|"):
        share = group_share(be, spec, with_line(prompt, line), a.field, group, a.n)
        print(f"| + `{line}` | {share:.3f} |", flush=True)


if __name__ == "__main__":
    main()
