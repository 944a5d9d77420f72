"""Generation limits from the task: how many new tokens a record of this task needs.

Why: a fixed `max_tokens` (it was 192-256) cuts off every TruthfulQA record (a question with lists of
correct and incorrect answers runs to 300+ tokens pretty-printed), and the cut-off was then scored as the
model's truncation. A harness limit must never be charged to a model, so the default limit comes from the
task's references:

    need(r)  = characters of r as JSON pretty-printed with indent 2 inside a ```json fence (the most
               verbose form models write) / CHARS_PER_TOKEN (2: conservative for JSON; measured with
               SmolLM2's tokenizer, short-valued records such as MultiWOZ run 2.2-2.3 characters per
               token, TruthfulQA and Self-Instruct 3.7-3.8; tests/test_gen_limits.py checks the bound)
    limit    = round_up(max(MARGIN x p95(need), max(need)) + EXTRA, 32), within [FLOOR, CAP]

so the limit is at least the longest reference in its most verbose form plus a margin. A sample that
still stops at this default limit before any complete JSON object is regenerated once with twice the
limit (`RETRY_FACTOR`); the sample records both limits (`meta.limit`). (A sample that completes a record
and then rambles on to the limit is not retried: its record is whole, and extraction takes it.) A record cut off after that has run past three times what the task's
records need: that is the model's run-on, and it is scored as truncated (docs/systems-ar.md).
An explicit `max_tokens` in a suite is the user's choice and is used as is, without the retry.
A backend that stops generation at the first complete record (llama_cpp, hf) gets twice the limit at
once instead: the same text as generate-then-retry, without the first attempt (systems/ar.py).
"""

from __future__ import annotations

import json
import math

from bench.types import JSON, TaskSpec

CHARS_PER_TOKEN = 2.0
PERCENTILE = 0.95
MARGIN = 1.5
EXTRA = 32
FLOOR = 128
CAP = 1536
RETRY_FACTOR = 2


def record_need(record: JSON) -> int:
    """Tokens (estimated, upper side) the most verbose rendering of one record takes."""
    text = "```json\n" + json.dumps(record, ensure_ascii=False, indent=2) + "\n```"
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def percentile(values: list[int], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 1]."""
    xs = sorted(values)
    if not xs:
        return 0.0
    pos = q * (len(xs) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def task_max_tokens(spec: TaskSpec) -> int:
    """The default new-token limit for one record of this task (module docstring)."""
    needs = [record_need(r) for r in spec.references]
    if not needs:
        return FLOOR
    want = max(MARGIN * percentile(needs, PERCENTILE), max(needs)) + EXTRA
    return int(min(CAP, max(FLOOR, 32 * math.ceil(want / 32))))


def dlm_response_shape(spec: TaskSpec, steps: int, block_length: int = 32) -> tuple[int, int]:
    """(gen_length, block_length) of a pretrained DLM's response canvas for this task.

    The canvas needs what an AR limit needs (`task_max_tokens`): a fixed 256 positions cut TruthfulQA
    records (up to ~700 tokens pretty-printed) and charged the cut to the model. LLaDA's sampler needs at
    least one step per semi-autoregressive block, so the block is the smallest multiple of the default
    block (LLaDA-Instruct: 32) that keeps the number of blocks <= steps (T = 12: 32 up to 384 positions,
    64 up to 768).
    """
    gen = task_max_tokens(spec)
    block = block_length * math.ceil(gen / (block_length * max(1, steps)))
    return gen, block
