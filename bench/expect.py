"""Suite expectations: `system.metric OP number` or `system.metric OP system.metric`.

A side may name one task: `ar[multiwoz/train].parse_rate > 0.5`; without it the value is the system's
macro mean over tasks of the per-task mean over seeds (the paper's tables average over datasets).
A task where a metric is undefined (no parsed record) drops out of that system's mean, so two macro
means may cover different tasks; the result's detail then says so and gives both means over the tasks
they share, because a claim that compares different task sets is easy to misread.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    "<": operator.lt,
}

_REF = r"(?P<{p}sys>[A-Za-z0-9_\-]+)(?:\[(?P<{p}task>[^\]]+)\])?\.(?P<{p}metric>[A-Za-z_][A-Za-z0-9_]*)"
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_PATTERN = re.compile(
    r"^\s*"
    + _REF.format(p="l")
    + r"\s*(?P<op>>=|<=|==|!=|>|<)\s*(?:(?P<num>"
    + _NUM
    + r")|"
    + _REF.format(p="r")
    + r")\s*$"
)


@dataclass(frozen=True)
class Ref:
    system: str
    metric: str
    task: str | None = None

    def __str__(self) -> str:
        return f"{self.system}{f'[{self.task}]' if self.task else ''}.{self.metric}"


@dataclass(frozen=True)
class Expectation:
    text: str
    left: Ref
    op: str
    right: Ref | float

    def systems(self) -> list[str]:
        return [self.left.system] + ([self.right.system] if isinstance(self.right, Ref) else [])

    def tasks(self) -> list[str]:
        refs = [self.left] + ([self.right] if isinstance(self.right, Ref) else [])
        return [r.task for r in refs if r.task]

    def metrics(self) -> list[str]:
        return [self.left.metric] + ([self.right.metric] if isinstance(self.right, Ref) else [])


@dataclass(frozen=True)
class ExpectationResult:
    text: str
    passed: bool
    detail: str
    skipped: bool = False
    """Not evaluated: it names a system or task left out of this run (`--systems` / `--tasks`)."""


def parse_expectation(text: str) -> Expectation:
    m = _PATTERN.match(text or "")
    if not m:
        raise ValueError(
            f"cannot parse expectation {text!r}; write 'system.metric OP number' or "
            "'system.metric OP system.metric' with OP one of > >= < <= == !="
        )
    left = Ref(m["lsys"], m["lmetric"], m["ltask"])
    right: Ref | float = float(m["num"]) if m["num"] is not None else Ref(m["rsys"], m["rmetric"], m["rtask"])
    return Expectation(text.strip(), left, m["op"], right)


ValueLookup = Callable[[Ref], float]


@runtime_checkable
class TaskMeansLookup(Protocol):
    """A ValueLookup that can also give a Ref's per-task means (the tasks where the metric is defined)."""

    def __call__(self, ref: Ref) -> float: ...

    def task_means(self, ref: Ref) -> dict[str, float]: ...


def skip_if_left_out(
    exp: Expectation, left_out_systems: set[str], left_out_tasks: set[str]
) -> ExpectationResult | None:
    """A skipped result when `exp` names a suite system or task that this run left out.

    Comparing against a system deliberately left out (`--systems`, `--tasks`) would read NaN and fail; a
    user who runs `--systems llada,aod` wants the comparisons that can be checked, and to be told which
    ones were not. A name that is not in the suite at all still evaluates (and fails), so typos show.
    """
    missing = [f"system {s!r}" for s in exp.systems() if s in left_out_systems]
    missing += [f"task {t!r}" for t in exp.tasks() if t in left_out_tasks]
    if not missing:
        return None
    return ExpectationResult(
        exp.text, False, "not evaluated: " + ", ".join(missing) + " left out of this run", True
    )


def evaluate(exp: Expectation, lookup: ValueLookup) -> ExpectationResult:
    """NaN on either side fails the expectation (an unscorable cell never passes silently)."""
    lv = lookup(exp.left)
    rv = exp.right if isinstance(exp.right, float) else lookup(exp.right)
    ok = not (math.isnan(lv) or math.isnan(rv)) and OPS[exp.op](lv, rv)
    rtxt = f"{rv:.4g}" if isinstance(exp.right, float) else f"{exp.right} = {rv:.4g}"
    note = _task_set_note(exp, lookup) if isinstance(lookup, TaskMeansLookup) else ""
    return ExpectationResult(exp.text, bool(ok), f"{exp.left} = {lv:.4g} {exp.op} {rtxt}{note}")


def _task_set_note(exp: Expectation, lookup: TaskMeansLookup) -> str:
    """'' unless both sides are macro means over different task sets; then which tasks differ, and
    both means over the shared tasks (informative only: the claim is still decided as written)."""
    if not isinstance(exp.right, Ref) or exp.left.task or exp.right.task:
        return ""
    left, right = lookup.task_means(exp.left), lookup.task_means(exp.right)
    if not left or not right or set(left) == set(right):
        return ""
    only = [
        f"only {ref.system}: {', '.join(sorted(set(mine) - set(other)))}"
        for ref, mine, other in ((exp.left, left, right), (exp.right, right, left))
        if set(mine) - set(other)
    ]
    shared = sorted(set(left) & set(right))
    if not shared:
        return f" (the means cover different tasks, none shared; {'; '.join(only)})"
    lm = sum(left[t] for t in shared) / len(shared)
    rm = sum(right[t] for t in shared) / len(shared)
    verdict = "holds" if OPS[exp.op](lm, rm) else "fails"
    return (
        f" (the means cover different tasks; {'; '.join(only)}. Over the {len(shared)} shared: "
        f"{lm:.4g} {exp.op} {rm:.4g}, {verdict})"
    )
