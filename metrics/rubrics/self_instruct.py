"""Code checks for Self-Instruct instances (Wang et al. 2023): instruction, input, output.

Whether the output carries out the instruction is the LLM's question. What the record decides: the
output is not blank and is not a copy of the instruction or of the input; and an instruction that
points at an input ("the following", "given", "below", "this paragraph", ...) has one, unless it
carries the input inline after a colon. All 427 upstream instances pass.
"""

from __future__ import annotations

import re

from bench.tasks.self_instruct import RUBRIC
from bench.types import JSON, TaskSpec
from metrics.rubrics import Check
from metrics.rubrics.common import is_text, nonblank, norm

POINTS_AT_INPUT = re.compile(
    r"\b(the following|given|below|provided|the input|attached|this (?:text|sentence|paragraph|article|"
    r"passage|code|list|email|essay|document|review|story|poem|table|data))\b",
    re.IGNORECASE,
)
_INLINE = re.compile(r":\s*\S+(?:\s+\S+){2,}")


def _fields(r: JSON) -> tuple[str, str, str] | None:
    v = (r.get("instruction"), r.get("input"), r.get("output"))
    return v if all(is_text(x) for x in v) else None  # type: ignore[return-value]


def output_nonblank(r: JSON) -> bool | None:
    v = r.get("output")
    return None if not is_text(v) else nonblank(v)


def output_not_copy(r: JSON) -> bool | None:
    v = _fields(r)
    if v is None:
        return None
    out = norm(v[2])
    return out != norm(v[0]) and (not norm(v[1]) or out != norm(v[1]))


def input_when_pointed_at(r: JSON) -> bool | None:
    v = _fields(r)
    if v is None:
        return None
    instruction, given = v[0], v[1]
    if not POINTS_AT_INPUT.search(instruction) or _INLINE.search(instruction):
        return True
    return nonblank(given)


def instruction_nonblank(r: JSON) -> bool | None:
    v = r.get("instruction")
    return None if not is_text(v) else len(norm(v).split()) >= 2


def checks(spec: TaskSpec) -> list[Check]:
    clear, consistent, correct = RUBRIC
    return [
        Check(
            "instruction_nonblank", "instruction has at least two words", instruction_nonblank, clear, False
        ),
        Check(
            "input_when_pointed_at",
            "an instruction that points at an input has a non-empty input (or an inline one)",
            input_when_pointed_at,
            consistent,
            decides=False,
        ),
        Check("output_nonblank", "output is not blank", output_nonblank, correct, decides=False),
        Check(
            "output_not_copy",
            "output is not the instruction or the input repeated",
            output_not_copy,
            correct,
            decides=False,
        ),
    ]
