"""Code checks for Super-NaturalInstructions instances (Wang et al. 2022): a task's input and output.

The task definition is shared by every instance, so "consistent with the instruction's type" is read
off the task's own references: when every reference input starts with the same word ("Comment:",
"Sentence:", "Set1:"), a new input must too; when every reference output is a number, a new output must
be one; and a "new" instance's input is not one of the reference inputs. The output must not be blank
or the input repeated, unless the task's references themselves repeat inputs (text-modification tasks).

Neither field may carry the generation prompt's own words: a field name (`input`, `output`) or the
`Fields` label of the prompt's field line (systems/skeleton_prompt.py), unless some reference value of
that field carries it too. A small DLM's copy head pastes prompt tokens into free text ("KeFields" as a
food, "accident#accident#Fields" as a concept set); no other check of this family can see it, and none of
the 240 shipped SuperNI instances carries such a word (docs/metrics.md).

Brackets ((), [], {}) must balance in both fields, unless some reference value of the field leaves one
open: a set written `Set1: '{8}', Set}', Set '{:, 4, 15}'` is not an instance of a task whose every
reference writes well-formed sets. All 240 shipped instances balance (70 of them carry brackets).

Where a task's answer follows from its input, or a necessary condition of it does, the task has a check
of its own (metrics/rubrics/superni_answers.py).
"""

from __future__ import annotations

import re

from bench.tasks.superni import RUBRIC
from bench.types import JSON, TaskSpec
from metrics.rubrics import Check, CheckFn
from metrics.rubrics.common import is_text, nonblank, norm
from metrics.rubrics.superni_answers import answer_checks, output_text

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
FIELDS = ("input", "output")
PROMPT_LABEL = "Fields"  # the label of the field line the diffusion prompt ends with, before its hints


def _first_word(text: str) -> str:
    parts = text.strip().split(maxsplit=1)
    return parts[0] if parts else ""


def prompt_words(spec: TaskSpec, field: str) -> tuple[str, ...]:
    """The prompt words (lower case) a value of `field` must not contain: every field name of the schema
    and `PROMPT_LABEL`, less those some reference value of the field contains (the task's own text)."""
    words = [*(str(k).lower() for k in spec.schema.get("properties", {})), PROMPT_LABEL.lower()]
    seen = [_text_of(r.get(field)).lower() for r in spec.references]
    return tuple(w for w in dict.fromkeys(words) if not any(w in v for v in seen))


def _text_of(value: object) -> str:
    if isinstance(value, list):
        return " ".join(v for v in value if is_text(v))
    return value if is_text(value) else ""


def _field_text(r: JSON, field: str) -> str | None:
    """The field's text (a list's text items joined), None when the field is neither text nor a list."""
    v = r.get(field)
    return _text_of(v) if is_text(v) or isinstance(v, list) else None


_CLOSES = {")": "(", "]": "[", "}": "{"}


def balanced(text: str) -> bool:
    """True when every (, [ and { in `text` is closed in order and nothing is closed that was not open."""
    open_: list[str] = []
    for ch in text:
        if ch in "([{":
            open_.append(ch)
        elif ch in _CLOSES:
            if not open_ or open_.pop() != _CLOSES[ch]:
                return False
    return not open_


def checks(spec: TaskSpec) -> list[Check]:
    new_instance, correct, answer_format = RUBRIC
    refs = [r for r in spec.references if is_text(r.get("input"))]
    ref_inputs = {norm(r["input"]) for r in refs}
    firsts = {_first_word(r["input"]) for r in refs}
    lead = next(iter(firsts)) if len(firsts) == 1 and refs and len(refs) >= 3 else None
    outs = [o for o in (output_text(r) for r in spec.references) if o is not None]
    numeric = bool(outs) and all(_NUMBER.match(o.strip()) for o in outs)
    copies_allowed = any(norm(o) == norm(r["input"]) for r, o in zip(refs, outs, strict=False))

    def input_not_reference(r: JSON) -> bool | None:
        v = r.get("input")
        return None if not is_text(v) else norm(v) not in ref_inputs

    def input_shape(r: JSON) -> bool | None:
        v = r.get("input")
        if not is_text(v):
            return None
        return nonblank(v) and (lead is None or _first_word(v) == lead)

    def output_nonblank(r: JSON) -> bool | None:
        o = output_text(r)
        return None if o is None else nonblank(o)

    def output_not_copy(r: JSON) -> bool | None:
        o, v = output_text(r), r.get("input")
        if o is None or not is_text(v):
            return None
        return copies_allowed or norm(o) != norm(v)

    banned = {f: prompt_words(spec, f) for f in FIELDS}

    def no_prompt_words(field: str) -> CheckFn:
        def check(r: JSON) -> bool | None:
            text = _field_text(r, field)
            return None if text is None else not any(w in text.lower() for w in banned[field])

        return check

    must_balance = {f: all(balanced(_text_of(r.get(f))) for r in spec.references) for f in FIELDS}

    def brackets_balance(field: str) -> CheckFn:
        def check(r: JSON) -> bool | None:
            text = _field_text(r, field)
            return None if text is None else not must_balance[field] or balanced(text)

        return check

    def output_numeric(r: JSON) -> bool | None:
        o = output_text(r)
        return None if o is None or not numeric else bool(_NUMBER.match(o.strip()))

    out = [
        Check("input_not_reference", "input is not one of the task's reference inputs", input_not_reference,
              new_instance, decides=False),
        Check("input_shape", "input is not blank and starts like every reference input "
              f"({lead!r})" if lead else "input is not blank", input_shape, new_instance, decides=False),
        Check("output_nonblank", "output is not blank", output_nonblank, correct, decides=False),
        Check("output_not_copy", "output is not the input repeated (unless the references do it)",
              output_not_copy, correct, decides=False),
        Check("input_no_prompt_words", "input carries no field name and no 'Fields' label (unless a "
              "reference input does)", no_prompt_words("input"), new_instance, decides=False),
        Check("output_no_prompt_words", "output carries no field name and no 'Fields' label (unless a "
              "reference output does)", no_prompt_words("output"), correct, decides=False),
        Check("input_brackets_balance", "input's brackets balance (unless a reference input's do not)",
              brackets_balance("input"), new_instance, decides=False),
        Check("output_brackets_balance", "output's brackets balance (unless a reference output's do not)",
              brackets_balance("output"), answer_format, decides=False),
    ]  # fmt: skip
    out.extend(answer_checks(spec.name, correct))
    if numeric:
        out.append(
            Check(
                "output_numeric",
                "output is a number, as every reference output is",
                output_numeric,
                answer_format,
                decides=False,
            )  # fmt: skip
        )
    return out
