"""Rubric questions decided in code, per task family (issue 10: "a rubric that can fail").

Each family module exposes `checks(spec) -> list[Check]`. A `Check` looks at one parsed record (and, where
it says so, at the task's own references or tables) and returns True (passes), False (fails) or None (not
applicable: a field it needs is absent or has the wrong type, which schema validity already counts).

A check may answer one of the task's rubric questions (`question`, the exact text in bench/tasks):
* `decides=True`: the code's answer *is* the answer (departure != destination);
* `decides=False`: the check is a necessary condition only (a price must read "12.30 pounds" before it
  can be a plausible fare): a failure answers "no", a pass leaves the question to the LLM judge.
Checks with no question are further constraints the schema allows but the rubric does not ask.

`tsr` fails a record on every failed check (`check:<name>` in the per-sample row); the judge cluster
(systems/optimizers/judge.py) answers a question in code when its checks decide it and asks the LLM only
the rest. docs/metrics.md lists every family's checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from bench.types import JSON, TaskSpec

CheckFn = Callable[[JSON], "bool | None"]


@dataclass(frozen=True)
class Check:
    """One code-checked property of a record; see the module docstring for `question` and `decides`."""

    name: str
    doc: str
    fn: CheckFn
    question: str | None = None
    decides: bool = True

    def __call__(self, record: JSON) -> bool | None:
        try:
            return self.fn(record)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError):
            return None  # a record the check cannot read is not this check's failure


def family_of(spec: TaskSpec) -> str:
    """The task family ("multiwoz", "truthfulqa", ...): the loader's meta, else the name's first part."""
    fam = spec.meta.get("family") if isinstance(spec.meta, dict) else None
    return str(fam or spec.name.split("/", 1)[0])


def rubric_checks(spec: TaskSpec) -> list[Check]:
    """Every code check of the task's family (an unknown family has none: generic rubric only)."""
    from metrics.rubrics import booking, multiwoz, self_instruct, superni, truthfulqa

    modules = {
        "multiwoz": multiwoz,
        "truthfulqa": truthfulqa,
        "self_instruct": self_instruct,
        "superni": superni,
        "demo": booking,
    }
    module = modules.get(family_of(spec))
    return list(module.checks(spec)) if module is not None else []


def failed(checks: Iterable[Check], record: JSON) -> list[str]:
    """`check:<name>` for every check the record fails, in the checks' order."""
    return [f"check:{c.name}" for c in checks if c(record) is False]


def failed_names(reasons: Iterable[object]) -> list[str]:
    """The check names among a scored sample's `tsr` reasons (the `check:<name>` entries `failed` wrote),
    in their order; other reasons (copies, duplicates, placeholders) are left out."""
    return [str(r).removeprefix("check:") for r in reasons if str(r).startswith("check:")]


def answer(checks: Sequence[Check], question: str, record: JSON) -> bool | None:
    """The code's answer to `question` for `record`, or None when the LLM must answer it.

    No: some check of the question fails. Yes: at least one check decides it and every deciding check
    passes (necessary-only checks passed too). Otherwise (no deciding check, or one not applicable): None.
    """
    mine = [c for c in checks if c.question == question]
    if not mine:
        return None
    results = [(c, c(record)) for c in mine]
    if any(r is False for _, r in results):
        return False
    deciding = [r for c, r in results if c.decides]
    if deciding and all(r is True for r in deciding):
        return True
    return None


def decidable(checks: Sequence[Check], question: str) -> bool:
    """True when some check can answer the question on its own (a deciding check exists)."""
    return any(c.question == question and c.decides for c in checks)


def check_fields(check: Check, references: Sequence[JSON], per_field: int = 8) -> tuple[str, ...]:
    """The top-level fields `check` reads, found on the data: a field counts when putting another
    reference's value of it, or the same record's value of another field of the same type (an equality
    relation: departure = destination), into a reference that passes the check makes the check fail
    or not apply.

    Why by perturbation: a check is plain code, and declaring its inputs by hand for every family would
    drift from the code. On multiwoz/train this finds (arriveBy, duration, leaveAt) for
    `duration_matches` and (departure, destination) for `departure_differs`; a check that no reference
    passes (a record must not copy a reference) reads nothing here. Deterministic: references and values
    are tried in their order, at most `per_field` passing references and values per field.
    """
    records = [r for r in references if isinstance(r, dict)]
    passing = [r for r in records if check(r) is True]
    keys = list(dict.fromkeys(k for r in passing for k in r))
    found: list[str] = []
    for key in keys:
        values = list({repr(r[key]): r[key] for r in records if key in r}.values())[:per_field]
        for r in passing[:per_field]:
            same_type = [v for k, v in r.items() if k != key and type(v) is type(r.get(key))]
            if any(check({**r, key: v}) is not True for v in values + same_type if v != r.get(key)):
                found.append(key)
                break
    return tuple(found)
