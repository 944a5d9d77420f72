"""Multi-turn tool-call metrics for `bfcl/multi_turn_base`: BFCL's state checker, rounds and invocations.

The checker re-implements bfcl-eval's `multi_turn_checker` (Patil et al., ICML 2025;
`eval_checker/multi_turn_eval/multi_turn_checker.py`) on our episode records and is cross-checked against
it in tests/test_multiturn_checker_agreement.py. For every user turn, in order, the model's calls of that
turn are executed on one persistent set of backend instances and the ground truth's on another (both from
the item's initial config); then, for a turn whose ground truth has calls:

1. the model must have made at least one call in the turn (`empty_turn`);
2. every public attribute of every backend instance must equal the ground truth's (`state_mismatch`);
3. every result of the turn's ground-truth calls must occur among the results of all the model's calls so
   far, as a multiset, in any order (`response_mismatch`).

An episode that stopped at the step bound (`force_quit`), or holds fewer turns than the conversation, is
`force_terminated` (BFCL fails it before checking). Steps with no decodable call are ignored, as BFCL's
decoder skips them. The episode's failure is the first check that fails, or None.

Speed and effort, as the DLLM Agent study reports them (arXiv 2602.07451, "rounds and tool invocations
per solved task"): a *round* is one model query (a step, including the reply that ends a turn), a *tool
invocation* one executed call. A call that raises in a backend (bad arguments, an unknown name) is the
model's failure, counted in `tool_error_rate` with its message on the row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.tasks.bfcl_env import BFCLEnvironment
from bench.tasks.bfcl_multi_turn import parse_call
from bench.types import JSON
from metrics.cell import NAN, CellView
from metrics.registry import MULTI_TURN_FAILURE_CLASSES

#: Episode failure classes (BFCL's multi-turn error types), in the order the checker tries them.
MULTI_TURN_FAILURES = MULTI_TURN_FAILURE_CLASSES


def episode_steps(record: Any) -> list[list[list[tuple[str, dict]]]] | None:
    """An episode record -> per turn, per step, its calls `(name, arguments)` (malformed steps: no calls).
    None when the record is not an episode at all."""
    if not isinstance(record, dict) or not isinstance(record.get("turns"), list):
        return None
    out = []
    for turn in record["turns"]:
        if not isinstance(turn, list):
            return None
        steps = []
        for step in turn:
            calls = step.get("calls") if isinstance(step, dict) else None
            good = isinstance(calls, list) and all(
                isinstance(c, dict)
                and isinstance(c.get("name"), str)
                and isinstance(c.get("arguments"), dict)
                for c in calls
            )
            steps.append([(c["name"], c["arguments"]) for c in calls] if good else [])
        out.append(steps)
    return out


@dataclass
class EpisodeCheck:
    """The verdict on one episode and its effort counts."""

    valid: bool
    failure: str | None
    turn: int | None = None  # the turn the failure was found in
    message: str = ""
    rounds: int = 0
    tool_calls: int = 0
    tool_errors: list[str] = field(default_factory=list)  # "name: message" of calls that raised

    def row(self) -> JSON:
        return {
            "state_valid": self.valid,
            "failure": self.failure,
            "failure_turn": self.turn,
            "failure_message": self.message,
            "rounds": self.rounds,
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors[:10],
            "n_tool_errors": len(self.tool_errors),
        }


def _counts(turns: list[list[list[tuple[str, dict]]]]) -> tuple[int, int]:
    return sum(len(t) for t in turns), sum(len(s) for t in turns for s in t)


def check_episode(record: Any, meta: JSON) -> EpisodeCheck:
    """BFCL's multi-turn verdict on one episode record for the item described by `meta`."""
    turns = episode_steps(record)
    if turns is None:
        return EpisodeCheck(False, "invalid_episode", message="not an episode record {'turns': [[...]]}")
    truth: list[list[str]] = meta["ground_truth"]
    rounds, tool_calls = _counts(turns)
    errors: list[str] = []
    result = EpisodeCheck(True, None, rounds=rounds, tool_calls=tool_calls, tool_errors=errors)
    model_env = BFCLEnvironment(meta.get("initial_config") or {}, meta["involved_classes"])
    if record.get("force_quit") or len(turns) != len(truth):
        # still execute, so the row lists the calls that raised
        for steps in turns:
            for step in steps:
                for name, args in step:
                    ex = model_env.execute(name, args)
                    if ex.raised:
                        errors.append(f"{name}: {ex.result}")
        why = (
            "stopped at the step bound" if record.get("force_quit") else f"{len(turns)} of {len(truth)} turns"
        )
        result.valid, result.failure, result.message = False, "force_terminated", why
        return result
    truth_env = BFCLEnvironment(meta.get("initial_config") or {}, meta["involved_classes"])
    all_model_results: list[str] = []
    for t, (steps, truth_turn) in enumerate(zip(turns, truth, strict=True)):
        made = [s for s in steps if s]
        for step in made:
            for name, args in step:
                ex = model_env.execute(name, args)
                all_model_results.append(ex.result)
                if ex.raised:
                    errors.append(f"{name}: {ex.result}")
        truth_results = []
        for source in truth_turn:
            name, pos, kwargs = parse_call(source)
            truth_results.append(truth_env.execute(name, kwargs, pos).result)
        if result.failure is not None:
            continue  # keep executing so every raising call is listed; the verdict stands
        if truth_turn and not made:
            result.valid, result.failure, result.turn = False, "empty_turn", t
            result.message = f"no call in turn {t}"
            continue
        if not truth_turn:
            continue
        for class_name in truth_env.instances:
            mine, want = model_env.state(class_name), truth_env.state(class_name)
            differing = sorted(k for k in want if mine.get(k) != want[k])
            if differing:
                result.valid, result.failure, result.turn = False, "state_mismatch", t
                result.message = f"{class_name} differs in {', '.join(differing)}"
                break
        if result.failure is not None:
            continue
        remaining = list(all_model_results)
        missing = []
        for r in truth_results:
            try:
                remaining.remove(r)
            except ValueError:
                missing.append(r)
        if missing:
            result.valid, result.failure, result.turn = False, "response_mismatch", t
            result.message = (
                f"{len(missing)} ground-truth result(s) never produced, first: {missing[0][:200]}"
            )
    return result


# ------------------------------------------------------------------------------------ the metrics
def _checks(cell: CellView) -> list[EpisodeCheck | None]:
    """One check per judged sample (None: not a multi-turn item, or a harness failure), once per cell."""
    cached = getattr(cell, "_multiturn", None)
    if cached is not None:
        return cached
    out: list[EpisodeCheck | None] = []
    for pos, j in enumerate(cell.judged):
        item = cell.spec.item_for(j.sample.index)
        if item is None or not item.meta.get("multi_turn") or j.harness_failure:
            out.append(None)
            continue
        record = j.extraction.record if j.extraction is not None else None
        try:
            check = check_episode(record, item.meta)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a record the checker cannot read
            check = EpisodeCheck(False, "invalid_episode", message=f"{type(exc).__name__}: {exc}")
        out.append(check)
        cell.row_extras.setdefault(pos, {}).update({"item_id": item.id, **check.row()})
    cell._multiturn = out  # type: ignore[attr-defined]
    return out


def _scored(cell: CellView) -> list[EpisodeCheck]:
    return [c for c in _checks(cell) if c is not None]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else NAN


def multi_turn_accuracy(cell: CellView) -> float:
    """Share of scored episodes that pass BFCL's multi-turn checker."""
    return _mean([float(c.valid) for c in _scored(cell)])


def rounds_per_solved(cell: CellView) -> float:
    """Mean model queries per solved episode (NaN when none is solved)."""
    return _mean([float(c.rounds) for c in _scored(cell) if c.valid])


def tool_calls_per_solved(cell: CellView) -> float:
    """Mean tool invocations per solved episode (NaN when none is solved)."""
    return _mean([float(c.tool_calls) for c in _scored(cell) if c.valid])


def rounds_per_item(cell: CellView) -> float:
    """Mean model queries per scored episode, solved or not."""
    return _mean([float(c.rounds) for c in _scored(cell)])


def tool_calls_per_item(cell: CellView) -> float:
    """Mean tool invocations per scored episode, solved or not."""
    return _mean([float(c.tool_calls) for c in _scored(cell)])


def tool_error_rate(cell: CellView) -> float:
    """Share of all tool invocations of scored episodes that raised in a backend (or named no function)."""
    checks = _scored(cell)
    total = sum(c.tool_calls for c in checks)
    return sum(len(c.tool_errors) for c in checks) / total if total else NAN


def invalid_step_rate(cell: CellView) -> float:
    """Share of model steps whose output held no decodable call record (from the agent loop's sample
    meta; NaN for samples scored from text alone). Such a step ends its turn, as in BFCL's loop."""
    steps = invalid = 0
    for j, c in zip(cell.judged, _checks(cell), strict=True):
        loop = j.sample.meta.get("agent_loop") if c is not None else None
        if isinstance(loop, dict) and "steps" in loop:
            steps += int(loop["steps"])
            invalid += int(loop.get("undecodable_steps", 0))
    return invalid / steps if steps else NAN


def failure_share(cell: CellView, kind: str) -> float:
    """Share of scored episodes whose failure class is `kind`."""
    checks = _scored(cell)
    return _mean([float(c.failure == kind) for c in checks])


def _make(kind: str):  # noqa: ANN202
    from metrics.toolcalls import failure_metric

    return failure_metric("mt_failure_", kind, failure_share, "multi-turn episodes")


mt_failure_invalid_episode = _make("invalid_episode")
mt_failure_force_terminated = _make("force_terminated")
mt_failure_empty_turn = _make("empty_turn")
mt_failure_state_mismatch = _make("state_mismatch")
mt_failure_response_mismatch = _make("response_mismatch")
