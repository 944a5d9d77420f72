"""Diffusion policies in the multi-turn agent loop: the step-level task a DLM is trained on, and the policy.

A per-task DLM trained on whole episode records would answer a round with an episode; the loop asks for
one step. So `llada` on `bfcl/multi_turn_base` trains its DLM on a *step task* derived from the reference
items (never a scored item): the ground truth of each reference conversation is replayed on BFCL's
backends, and every round a perfect agent would play becomes one (prompt, step record) pair:

    turn t, first round: prompt(request t, no results)          -> {"calls": <turn t's calls>}
    turn t, second round: prompt(request t, those calls' results) -> {"calls": []}

(a turn without ground-truth calls gives only the second pair). The prompt is what `DLMPolicy` renders
from the live conversation, so training and inference see the same shape:

    Answer the request with calls to these functions.
    Functions: name(arg, opt?); ...
    Request: <the current user turn>
    Results: <name: result; ...>            (only after a round with calls)

The DLM keeps the end of its prompt, so the request and the results survive a cut and the function list
(the same few backend classes across items) is what goes first.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.tasks.bfcl import RECORD_SCHEMA
from bench.tasks.bfcl_env import BFCLEnvironment
from bench.types import JSON, Completion, GenerationRequest, SamplingParams, TaskSpec
from systems.agent_loop import Messages
from systems.tool_prompt import TOOL_INSTRUCTION, signature

RESULTS_PREFIX = "Results of your calls:"
RESULT_CHARS = 120


def step_prompt(functions: list[JSON], request: str, results: list[tuple[str, str]] | None) -> str:
    """The DLM prompt of one round (module docstring)."""
    lines = [
        TOOL_INSTRUCTION,
        "Functions: " + "; ".join(signature(f) for f in functions),
        "Request: " + request,
    ]
    if results:
        lines.append(
            "Results: " + "; ".join(f"{n}: {' '.join(r.split())[:RESULT_CHARS]}" for n, r in results)
        )
    return "\n".join(lines)


def _request(turn: list[JSON]) -> str:
    return " ".join(str(m.get("content", "")) for m in turn if isinstance(m, dict))


def step_pairs(meta: JSON) -> list[tuple[str, JSON]]:
    """(prompt, step record) of every round a perfect agent plays on one conversation (its ground truth)."""
    env = BFCLEnvironment(meta.get("initial_config") or {}, meta["involved_classes"])
    pairs: list[tuple[str, JSON]] = []
    for turn, steps in zip(meta["turns"], meta["record"]["turns"], strict=True):
        request = _request(turn)
        calls = [c for step in steps for c in step["calls"]]
        results = None
        if calls:
            pairs.append((step_prompt(meta["functions"], request, None), {"calls": calls}))
            results = [(c["name"], env.execute(c["name"], c["arguments"]).result) for c in calls]
        pairs.append((step_prompt(meta["functions"], request, results), {"calls": []}))
    return pairs


def step_task(spec: TaskSpec) -> TaskSpec:
    """The step-level training task of a multi-turn task: the reference items' rounds (module docstring)."""
    prompts, records = [], []
    for item in spec.meta.get("reference_items") or []:
        if item is None:
            continue
        for prompt, record in step_pairs(item.meta):
            prompts.append(prompt)
            records.append(record)
    return replace(
        spec,
        name=spec.name + "#steps",
        instruction="one round of tool calls",
        schema=RECORD_SCHEMA,
        references=tuple(records),
        holdout=(),
        items=(),
        meta={"family": "bfcl", "reference_prompts": prompts},
    )


def conversation_state(messages: Messages) -> tuple[str, list[tuple[str, str]] | None]:
    """(the current user request, the last round's results or None) from the loop's messages."""
    request, results = "", None
    for role, content in messages:
        if role != "user":
            continue
        if content.startswith(RESULTS_PREFIX):
            results = []
            for line in content.splitlines()[1:]:
                if line.startswith("- ") and ": " in line:
                    name, _, text = line[2:].partition(": ")
                    results.append((name, text))
                elif results and not line.startswith("Continue, or reply"):
                    results[-1] = (results[-1][0], results[-1][1] + " " + line)  # a multi-line result
        else:
            request = content.removeprefix("(earlier requests omitted)\n")
            results = None
    return request, results


class DLMPolicy:
    """The agent loop's policy for a diffusion backend: one prompt per round (`step_prompt`)."""

    def __init__(self, backend: Any, params: SamplingParams):
        self.backend, self.params = backend, params

    def reply(
        self, item: TaskSpec, messages: Messages, seed: int, sample_index: int, round_index: int
    ) -> Completion:
        request, results = conversation_state(messages)
        prompt = step_prompt(item.meta["functions"], request, results)
        # one row seed per (sample, round): rounds of an episode are sampled apart
        req = GenerationRequest.chat(prompt, self.params, seed, sample_index * 1000 + round_index)
        return self.backend.generate([req])[0]
