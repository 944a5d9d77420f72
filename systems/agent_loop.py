"""The multi-turn agent loop (`bfcl/multi_turn_base`): a policy emits calls, BFCL's backends run them.

BFCL's loop (bfcl-eval `model_handler/base_handler.py`, `inference_multi_turn_prompting`), with the
model behind a `Policy` so that any system can drive it: `ar` and `ar-grammar` through a chat backend,
diffusion systems through their own sampler. For every user turn of an item:

    add the user's message; repeat: query the policy (one *round*); decode its reply as a call record;
    no decodable call (prose, `{"calls": []}`, half a call) -> the turn ends; else execute every call on
    the item's backends (bench.tasks.bfcl_env), add the results to the conversation, and query again.

Bounds: at most `max_steps_per_turn` rounds in a turn; a turn whose last allowed round still makes calls
stops the episode (`force_quit`, scored as the model's failure, like BFCL's force-quit after 20 steps).
The item's wall clock is checked before every round, and each round runs under the item's deadline
(bench.deadline), which the backends honour mid-generation (llama.cpp between tokens, beams between
steps, transformers by a time criterion, the OpenAI client by its request timeout, the LLaDA sampler
between blocks). Past `item_timeout_s` the episode stops and the sample is a harness failure (`timeout`,
not scored), as is any crash of the policy's runtime or of this loop (`backend_error`, with the
exception's text). A call that raises inside a backend is the model's
failure: its error text is what the model sees (as upstream) and the sample's trace records it.

The sample's text is the episode record (bench.tasks.bfcl_multi_turn) as JSON, so `bench score` can
re-check it by re-executing its calls; the per-round raw replies, decoded calls and results are in
`meta.agent_loop.trace`.

Context: a small model's window (SmolLM2 at 2048 tokens) cannot hold BFCL's full history, so each result
shown is cut to `result_chars`, and when the history passes `history_chars` the oldest whole turns are
dropped (the current turn is always kept). Upstream keeps everything; docs/tasks.md lists this.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from bench.deadline import DEADLINE_ERROR, DeadlinePassed, deadline
from bench.errors import BenchError
from bench.tasks.bfcl_env import BFCLEnvironment
from bench.types import JSON, Completion, GenerationResult, Sample, SampleStatus, TaskSpec, Usage

Messages = tuple[tuple[str, str], ...]


class Policy(Protocol):
    """One model turn of an agent: the next reply given the conversation so far.

    `item` is the task as this sample sees it (`spec.for_sample(i)`: the item's instruction, schema and
    meta, including `call_schema`, the schema of one step's call record); `round_index` counts the
    episode's rounds from 0, so a policy can seed each round apart."""

    def reply(
        self, item: TaskSpec, messages: Messages, seed: int, sample_index: int, round_index: int
    ) -> Completion: ...


@dataclass(frozen=True)
class LoopLimits:
    """The loop's bounds and context budget (docs/tasks.md, "multi_turn_base")."""

    max_steps_per_turn: int = 20
    item_timeout_s: float = 300.0
    result_chars: int = 300
    history_chars: int = 2400


class AgentLoopParams(BaseModel):
    """The agent-loop settings a system exposes (used on multi-turn tasks only)."""

    model_config = ConfigDict(extra="forbid")

    max_steps_per_turn: int = Field(
        20,
        ge=1,
        description="rounds allowed in one user turn; a turn still calling at the last is force-quit",
    )
    item_timeout_s: float = Field(
        300.0, gt=0, description="wall-clock limit of one episode (harness failure)"
    )
    result_chars: int = Field(300, ge=20, description="characters of each call result shown to the model")
    history_chars: int = Field(
        2400, ge=200, description="older whole turns dropped past this many characters"
    )

    def loop_limits(self) -> LoopLimits:
        return LoopLimits(self.max_steps_per_turn, self.item_timeout_s, self.result_chars, self.history_chars)


def is_multi_turn(spec: TaskSpec) -> bool:
    """A task whose items are multi-turn episodes (the loop runs instead of one generation per sample)."""
    return bool(spec.meta.get("multi_turn")) and bool(spec.items)


def decode_reply(text: str, finish_reason: str | None = None) -> list[JSON] | None:
    """A reply -> its calls `[{"name", "arguments"}]`, or None when it holds no decodable call record."""
    from metrics.extract import extract_record
    from metrics.toolcalls import decode_calls

    record = extract_record(text, finish_reason).record
    calls = decode_calls(record)
    if calls is None:
        return None
    return [{"name": n, "arguments": a} for n, a in calls]


def _user_text(turn: list[JSON]) -> str:
    return "\n".join(str(m.get("content", "")) for m in turn if isinstance(m, dict))


def _results_text(executions: list[JSON], limit: int) -> str:
    lines = []
    for ex in executions:
        result = ex["result"] if len(ex["result"]) <= limit else ex["result"][:limit] + " ...[cut]"
        lines.append(f"- {ex['name']}: {result}")
    return "Results of your calls:\n" + "\n".join(lines) + '\nContinue, or reply {"calls": []} when done.'


@dataclass
class _Conversation:
    """The messages after the system prompt, grouped by user turn, so whole old turns can be dropped."""

    system: str
    limits: LoopLimits
    turns: list[list[tuple[str, str]]] = field(default_factory=list)

    def messages(self) -> Messages:
        kept = list(self.turns)
        size = lambda ts: sum(len(c) for t in ts for _, c in t)  # noqa: E731
        dropped = False
        while len(kept) > 1 and size(kept) > self.limits.history_chars:
            kept.pop(0)
            dropped = True
        msgs: list[tuple[str, str]] = [("system", self.system)]
        for k, turn in enumerate(kept):
            for m, (role, content) in enumerate(turn):
                if dropped and k == 0 and m == 0:
                    content = "(earlier requests omitted)\n" + content
                msgs.append((role, content))
        return tuple(msgs)


@dataclass
class Episode:
    """What one episode produced: the record, its trace and counts, and how it stopped."""

    record: JSON
    trace: list[JSON]
    rounds: int = 0
    tool_calls: int = 0
    raised: int = 0
    undecodable: int = 0
    stopped: str = "done"  # done | max_steps | timeout | error
    error: str | None = None
    seconds: float = 0.0


def run_episode(
    item: TaskSpec, policy: Policy, seed: int, sample_index: int, limits: LoopLimits, usage: Usage
) -> Episode:
    """One item's episode; never raises except for configuration errors (BenchError)."""
    meta = item.meta
    t0 = time.perf_counter()
    turns: list[list[JSON]] = []
    ep = Episode(record={"turns": turns, "force_quit": False}, trace=[])
    try:
        env = BFCLEnvironment(meta.get("initial_config") or {}, meta["involved_classes"])
        conv = _Conversation(item.instruction, limits)
        for t, user_turn in enumerate(meta["turns"]):
            steps: list[JSON] = []
            turns.append(steps)
            conv.turns.append([("user", _user_text(user_turn))])
            for s in range(limits.max_steps_per_turn):
                if time.perf_counter() - t0 > limits.item_timeout_s:
                    ep.stopped = "timeout"
                    ep.error = f"item timeout after {limits.item_timeout_s:g} s (turn {t}, step {s})"
                    return ep
                with deadline(limits.item_timeout_s - (time.perf_counter() - t0)):
                    comp = policy.reply(item, conv.messages(), seed, sample_index, ep.rounds)
                ep.rounds += 1
                usage.add_call(comp.tokens_in, comp.tokens_out, comp.cached, comp.nfe, comp.cost_usd)
                if comp.error == DEADLINE_ERROR:
                    raise DeadlinePassed(DEADLINE_ERROR)
                if comp.error:
                    ep.stopped, ep.error = "error", f"model runtime: {comp.error}"
                    return ep
                calls = decode_reply(comp.text, comp.finish_reason)
                entry: JSON = {
                    "turn": t,
                    "step": s,
                    "text": comp.text,
                    "seconds": comp.seconds,
                    "nfe": comp.nfe,
                }
                ep.trace.append(entry)
                if not calls:
                    ep.undecodable += calls is None
                    entry["calls"] = calls
                    steps.append({"calls": []})
                    break
                steps.append({"calls": calls})
                executions = [env.execute(c["name"], c["arguments"]).to_json() for c in calls]
                ep.tool_calls += len(executions)
                ep.raised += sum(e["raised"] for e in executions)
                entry["calls"] = calls
                entry["results"] = [{**e, "result": e["result"][:1000]} for e in executions]
                conv.turns[-1].append(("assistant", json.dumps({"calls": calls}, ensure_ascii=False)))
                conv.turns[-1].append(("user", _results_text(executions, limits.result_chars)))
            else:  # the turn never ended within its rounds
                ep.record["force_quit"] = True
                ep.stopped = "max_steps"
                return ep
        return ep
    except DeadlinePassed:  # the round's generation ran into the item's deadline (bench.deadline)
        ep.stopped = "timeout"
        ep.error = f"item timeout after {limits.item_timeout_s:g} s (mid-generation, round {ep.rounds})"
        return ep
    except BenchError:
        raise
    except Exception as exc:  # a crash of the runtime or of the loop: a harness failure, never the model's
        ep.stopped, ep.error = "error", f"harness: {type(exc).__name__}: {exc}"
        return ep
    finally:
        ep.seconds = time.perf_counter() - t0


def run_agent_loop(
    spec: TaskSpec, n: int, seed: int, policy: Policy, limits: LoopLimits, system: str
) -> GenerationResult:
    """n episodes (sample i plays item i modulo the items), one sample each, with usage and a trace."""
    usage = Usage()
    samples: list[Sample] = []
    t0 = time.perf_counter()
    stopped: dict[str, int] = {}
    for i in range(n):
        item = spec.for_sample(i)
        ep = run_episode(item, policy, seed, i, limits, usage)
        stopped[ep.stopped] = stopped.get(ep.stopped, 0) + 1
        status = {"timeout": SampleStatus.TIMEOUT, "error": SampleStatus.BACKEND_ERROR}.get(ep.stopped)
        samples.append(
            Sample(
                index=i,
                text=json.dumps(ep.record, ensure_ascii=False),
                finish_reason="stop" if status is None else "error",
                error=ep.error,
                status=status,
                meta={
                    "item_id": item.meta.get("item_id"),
                    "seconds": ep.seconds,
                    "agent_loop": {
                        "steps": ep.rounds,
                        "tool_calls": ep.tool_calls,
                        "raised": ep.raised,
                        "undecodable_steps": ep.undecodable,
                        "stopped": ep.stopped,
                        "trace": ep.trace,
                    },
                },
            )
        )
    usage.seconds = time.perf_counter() - t0
    trace = [
        {
            "event": "agent_loop",
            "system": system,
            "n": n,
            "seed": seed,
            "limits": limits.__dict__,
            "stopped": stopped,
            "rounds": sum(s.meta["agent_loop"]["steps"] for s in samples),
        }
    ]
    return GenerationResult(samples=samples, trace=trace, usage=usage)
