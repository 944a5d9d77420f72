"""Natural-language notes about a record, derived from a task's schema and references (no per-task code).

The embedded DLM is trained on prompts that carry such notes, each made true of the record it is trained
to write, by editing the record when needed (a counterfactual swap: "The day is a weekend day." and the
record's `day` becomes `saturday`). At evaluation (benchmarks/diffusion/steering.py) the same notes are
checked in code on generated records. Kinds, derived per object path from the references' values:

* `value`: the field has one given value (any field with at least two distinct values);
* `set`: the value lies in a group: weekend / weekday for day-name fields, morning / afternoon /
  evening for `HH:MM` fields, low / high (tertiles) for numeric fields or strings that start with a
  number (prices, durations), otherwise a random 2-3 subset of a categorical field's values; only
  groups at most half the references fall in are kept (weekday is dropped: 72% of MultiWOZ trains);
* `relation`: two fields of the same type: `differ` / `same` for categorical fields sharing values
  (departure, destination), `after` / `before` for time fields (arriveBy, leaveAt);
* `length`: a free-text field's word count at most the references' lower tertile or at least the upper;
* `novelty`: the field's value is none of the few-shot examples' values.

Every kind has eight phrasings; the last two (`HELD_OUT`) are never used in training, so measuring on
them tests generalisation to phrasings the model never saw.
"""

from __future__ import annotations

import copy
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.types import JSON, TaskSpec

KINDS = ("value", "set", "relation", "length", "novelty")
HELD_OUT = 2
"""The last HELD_OUT phrasings of every template list are evaluation-only."""

TEMPLATES: dict[str, list[str]] = {
    "value": [
        "The {field} is {value}.",
        "Set {field} to {value}.",
        "Use {value} as the {field}.",
        "The {field} must be {value}.",
        "Make sure the {field} is {value}.",
        "Give it a {field} of {value}.",
        "I want {value} for the {field}.",
        "Let the {field} be {value}.",
    ],
    "set": [
        "The {field} is {desc}.",
        "Make the {field} {desc}.",
        "Keep the {field} {desc}.",
        "Choose a {field} that is {desc}.",
        "Every record needs a {field} {desc}.",
        "Pick the {field} so that it is {desc}.",
        "Only generate records whose {field} is {desc}.",
        "It is important that the {field} be {desc}.",
    ],
    "differ": [
        "The {a} and the {b} are different.",
        "The {a} differs from the {b}.",
        "Do not use the same value for {a} and {b}.",
        "The {a} must not equal the {b}.",
        "Never repeat the {a} as the {b}.",
        "Keep the {a} distinct from the {b}.",
        "Avoid records where the {a} equals the {b}.",
        "The {b} has to be something other than the {a}.",
    ],
    "same": [
        "The {a} and the {b} are the same.",
        "The {a} equals the {b}.",
        "Use the same value for {a} and {b}.",
        "The {b} must match the {a}.",
        "Copy the {a} into the {b}.",
        "Let the {a} and the {b} be identical.",
        "The {b} is identical to the {a}.",
        "Make the {a} the same as the {b}.",
    ],
    "after": [
        "The {a} is later than the {b}.",
        "The {a} comes after the {b}.",
        "The {b} is earlier than the {a}.",
        "Put the {a} after the {b}.",
        "The {a} must be later than the {b}.",
        "The {b} comes before the {a}.",
        "Schedule the {a} after the {b}.",
        "The {b} precedes the {a}.",
    ],
    "before": [
        "The {a} is earlier than the {b}.",
        "The {a} comes before the {b}.",
        "The {b} is later than the {a}.",
        "Put the {a} before the {b}.",
        "The {a} must be earlier than the {b}.",
        "The {b} comes after the {a}.",
        "Schedule the {a} before the {b}.",
        "The {a} precedes the {b}.",
    ],
    "short": [
        "Keep the {field} short, at most {n} words.",
        "The {field} is brief: {n} words or fewer.",
        "Write a short {field} of no more than {n} words.",
        "Use at most {n} words for the {field}.",
        "A concise {field}, {n} words at most.",
        "The {field} should be short (up to {n} words).",
        "Limit the {field} to {n} words.",
        "Do not let the {field} exceed {n} words.",
    ],
    "long": [
        "Make the {field} long, at least {n} words.",
        "The {field} is detailed: {n} words or more.",
        "Write a long {field} of no fewer than {n} words.",
        "Use at least {n} words for the {field}.",
        "An elaborate {field}, {n} words at least.",
        "The {field} should be long (from {n} words).",
        "Expand the {field} to {n} words or more.",
        "The {field} needs {n} or more words.",
    ],
    "novelty": [
        "Use a {field} that is not among the examples.",
        "The {field} must differ from every example.",
        "Pick a new {field}, not one from the examples.",
        "Do not copy the {field} of the examples.",
        "Choose a {field} that none of the examples has.",
        "Avoid the {field} values of the examples.",
        "The {field} should be unseen in the examples.",
        "Give a fresh {field} that no example uses.",
    ],
}

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday")
WEEKEND = ("saturday", "sunday")
TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
LEADING_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
MAX_CATEGORIES = 40
MAX_GROUP_SHARE = 0.5
"""Set notes name only groups that at most this share of the references fall in (see _informative)."""


def get_path(record: Any, path: str) -> Any:
    """The value at dotted object `path` (None when absent)."""
    node = record
    for k in path.split("."):
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node


def set_path(record: JSON, path: str, value: Any) -> None:
    *heads, last = path.split(".")
    node = record
    for k in heads:
        node = node[k]
    node[last] = value


def minutes(v: Any) -> int | None:
    m = TIME.match(v) if isinstance(v, str) else None
    return int(m.group(1)) * 60 + int(m.group(2)) if m else None


def number_of(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    m = LEADING_NUMBER.match(v) if isinstance(v, str) else None
    return float(m.group(1)) if m else None


def words(v: Any) -> int:
    return len(v.split()) if isinstance(v, str) else 0


@dataclass(frozen=True)
class Note:
    """One note: its kind, the field(s) it is about, its argument, and its text."""

    kind: str  # value | set | relation | length | novelty
    path: str
    text: str
    arg: Any = None  # value; ("members", tuple) / ("range", lo, hi); (other path, rel); (short|long, n)
    sub: str = ""  # the template family used (set, differ, after, short, ...)

    def holds(self, record: Any, examples: Sequence[JSON] = ()) -> bool:
        """Whether `record` satisfies the note (examples: the prompt's few-shot records, for novelty)."""
        if not isinstance(record, dict):
            return False
        v = get_path(record, self.path)
        if self.kind in ("value", "set", "novelty"):
            return self.value_ok(v, examples)
        if self.kind == "relation":
            other, rel = self.arg
            w = get_path(record, other)
            if rel == "differ":
                return v is not None and w is not None and v != w
            if rel == "same":
                return v is not None and v == w
            a, b = minutes(v), minutes(w)
            if a is None or b is None:
                return False
            return a > b if rel == "after" else a < b
        if self.kind == "length":
            side, n = self.arg
            if not isinstance(v, str) or not v:
                return False
            return words(v) <= n if side == "short" else words(v) >= n
        raise ValueError(f"unknown note kind {self.kind!r}")

    def value_ok(self, v: Any, examples: Sequence[JSON] = ()) -> bool:
        """For notes about one field's value (value, set, novelty): whether the value `v` satisfies it."""
        if self.kind == "value":
            return v == self.arg
        if self.kind == "novelty":
            return v is not None and all(get_path(e, self.path) != v for e in examples)
        if self.arg[0] == "members":
            return v in self.arg[1]
        if self.arg[0] == "minutes":
            m = minutes(v)
            return m is not None and self.arg[1] <= m < self.arg[2]
        x = number_of(v)
        return x is not None and self.arg[1] <= x <= self.arg[2]


@dataclass
class FieldInfo:
    path: str
    kind: str  # day | time | number | category | text | other
    pool: list[Any] = field(default_factory=list)


def _leaf_paths(record: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(record, dict):
        return [it for k, v in record.items() for it in _leaf_paths(v, f"{path}.{k}" if path else k)]
    return [] if isinstance(record, list) else [(path, record)]


class NoteSpace:
    """The notes a task allows, derived from its references; draws, phrases and applies them."""

    def __init__(self, spec: TaskSpec) -> None:
        self.refs = list(spec.references)
        values: dict[str, dict[str, Any]] = {}
        for r in self.refs:
            for p, v in _leaf_paths(r):
                if v is not None:
                    values.setdefault(p, {})[json.dumps(v, sort_keys=True)] = v
        self.fields: dict[str, FieldInfo] = {}
        for p, d in values.items():
            pool = sorted(d.values(), key=lambda v: json.dumps(v, sort_keys=True))
            if len(pool) < 2:
                continue
            strs = all(isinstance(v, str) for v in pool)
            if strs and all(v.lower() in WEEKDAYS + WEEKEND for v in pool):
                kind = "day"
            elif strs and all(TIME.match(v) for v in pool):
                kind = "time"
            elif all(number_of(v) is not None for v in pool) and len(pool) > 3:
                kind = "number"
            elif strs and len(pool) <= MAX_CATEGORIES:
                kind = "category"
            elif strs:
                kind = "text"
            else:
                kind = "other"
            self.fields[p] = FieldInfo(p, kind, pool)
        self.value_fields = [
            f for f in self.fields.values() if all(len(json.dumps(v)) <= 42 for v in f.pool[:500])
        ]
        self.groups = {p: self._informative(p, self._groups(f)) for p, f in self.fields.items()}
        self.relations = self._relations()
        self.lengths = self._lengths()

    # ---------------------------------------------------------------- derivation
    def _groups(self, f: FieldInfo) -> list[tuple[str, tuple]]:
        """(description, arg) of each named value group of a field."""
        if f.kind == "day":
            lower = [v for v in f.pool if v.lower() in WEEKEND]
            upper = [v for v in f.pool if v.lower() in WEEKDAYS]
            return [
                ("a weekend day", ("members", tuple(lower))),
                ("saturday or sunday", ("members", tuple(lower))),
                ("a weekday", ("members", tuple(upper))),
                ("a working day", ("members", tuple(upper))),
            ]
        if f.kind == "time":
            return [
                ("in the morning", ("minutes", 5 * 60, 12 * 60)),
                ("before noon", ("minutes", 0, 12 * 60)),
                ("in the afternoon", ("minutes", 12 * 60, 17 * 60)),
                ("in the evening", ("minutes", 17 * 60, 24 * 60)),
            ]
        if f.kind == "number":
            xs = sorted(x for v in f.pool if (x := number_of(v)) is not None)
            lo, hi = xs[len(xs) // 3], xs[(2 * len(xs)) // 3]
            fmt = (lambda x: f"{x:g}") if all(float(x).is_integer() for x in xs) else (lambda x: f"{x:.2f}")
            return [
                ("low", ("range", xs[0], lo)),
                (f"at most {fmt(lo)}", ("range", xs[0], lo)),
                ("high", ("range", hi, xs[-1])),
                (f"at least {fmt(hi)}", ("range", hi, xs[-1])),
            ]
        return []

    def _informative(self, path: str, groups: list[tuple[str, tuple]]) -> list[tuple[str, tuple]]:
        """The groups that at most MAX_GROUP_SHARE of the references fall in.

        A note naming a group most records already satisfy ("a weekday": 72% of MultiWOZ trains) says
        little and cannot steer by much (its lift is at most 1 - share); minority groups (weekend,
        morning, the low tertile) are the ones a prompt optimizer needs.
        """
        out = []
        for desc, arg in groups:
            note = Note("set", path, "", arg)
            share = sum(note.value_ok(get_path(r, path)) for r in self.refs) / max(1, len(self.refs))
            if share <= MAX_GROUP_SHARE:
                out.append((desc, arg))
        return out

    def _relations(self) -> list[tuple[str, str, str]]:
        """(a, b, family) pairs: categorical fields sharing values, time fields (both orders)."""
        out = []
        paths = list(self.fields)
        for i, a in enumerate(paths):
            for b in paths[i + 1 :]:
                fa, fb = self.fields[a], self.fields[b]
                if fa.kind == fb.kind == "time":
                    out += [(a, b, "order"), (b, a, "order")]
                elif fa.kind == fb.kind and fa.kind in ("category", "day"):
                    shared = {json.dumps(v) for v in fa.pool} & {json.dumps(v) for v in fb.pool}
                    if len(shared) >= 0.5 * min(len(fa.pool), len(fb.pool)):
                        out += [(a, b, "eq"), (b, a, "eq")]
        return out

    def _lengths(self) -> dict[str, tuple[int, int]]:
        """Per free-text field (a spread of word counts): the lower and upper tertile of word counts."""
        out = {}
        for p, f in self.fields.items():
            if f.kind not in ("text", "category"):
                continue
            wc = sorted(words(get_path(r, p)) for r in self.refs if isinstance(get_path(r, p), str))
            if len(wc) < 6:
                continue
            lo, hi = wc[len(wc) // 3], wc[(2 * len(wc)) // 3]
            if hi - lo >= 3:
                out[p] = (lo, hi)
        return out

    # ---------------------------------------------------------------- kinds available
    def kinds(self) -> list[str]:
        out = []
        if self.value_fields:
            out.append("value")
        if any(self.groups.values()) or any(
            f.kind == "category" and len(f.pool) > 3 for f in self.fields.values()
        ):
            out.append("set")
        if self.relations:
            out.append("relation")
        if self.lengths:
            out.append("length")
        if self.fields:
            out.append("novelty")
        return out

    # ---------------------------------------------------------------- phrasing
    @staticmethod
    def phrase(family: str, rng: random.Random, held_out: bool, **slots: Any) -> str:
        ts = TEMPLATES[family]
        pick = ts[-HELD_OUT:] if held_out else ts[:-HELD_OUT]
        return rng.choice(pick).format(**{k: _show(v) for k, v in slots.items()})

    # ---------------------------------------------------------------- drawing
    def draw(
        self, kind: str, rng: random.Random, held_out: bool = False, path: str | None = None
    ) -> Note | None:
        """A random note of `kind` (about `path` if given), phrased from the training or held-out set."""
        name = lambda p: p.rsplit(".", 1)[-1]  # noqa: E731
        if kind == "value":
            fs = [f for f in self.value_fields if path in (None, f.path)]
            if not fs:
                return None
            f = rng.choice(fs)
            v = rng.choice(f.pool)
            return Note(
                "value", f.path, self.phrase("value", rng, held_out, field=name(f.path), value=v), v, "value"
            )
        if kind == "set":
            cands = []
            for p, f in self.fields.items():
                if path not in (None, p):
                    continue
                cands += [(p, d, a) for d, a in self.groups[p]]
                if not self.groups[p] and f.kind == "category" and len(f.pool) > 3:
                    cands.append((p, None, None))
            if not cands:
                return None
            p, desc, arg = rng.choice(cands)
            if desc is None:
                members = rng.sample(self.fields[p].pool, rng.choice((2, 3)))
                desc = "one of " + ", ".join(map(_show, members[:-1])) + " or " + _show(members[-1])
                arg = ("members", tuple(members))
            return Note("set", p, self.phrase("set", rng, held_out, field=name(p), desc=desc), arg, "set")
        if kind == "relation":
            rs = [r for r in self.relations if path in (None, r[0])]
            if not rs:
                return None
            a, b, fam = rng.choice(rs)
            rel = rng.choice(("differ", "same") if fam == "eq" else ("after", "before"))
            return Note("relation", a, self.phrase(rel, rng, held_out, a=name(a), b=name(b)), (b, rel), rel)
        if kind == "length":
            ps = [p for p in self.lengths if path in (None, p)]
            if not ps:
                return None
            p = rng.choice(ps)
            side = rng.choice(("short", "long"))
            n = self.lengths[p][0 if side == "short" else 1]
            return Note("length", p, self.phrase(side, rng, held_out, field=name(p), n=n), (side, n), side)
        if kind == "novelty":
            ps = [p for p in self.fields if path in (None, p)]
            if not ps:
                return None
            p = rng.choice(ps)
            return Note("novelty", p, self.phrase("novelty", rng, held_out, field=name(p)), None, "novelty")
        raise ValueError(f"unknown note kind {kind!r}")

    # ---------------------------------------------------------------- counterfactual edits
    def satisfy(
        self, note: Note, record: JSON, rng: random.Random, examples: Sequence[JSON] = ()
    ) -> JSON | None:
        """`record` edited so that `note` holds (a copy), or None when no edit of one field can do it."""
        if note.holds(record, examples):
            return record
        if get_path(record, note.path) is None and note.kind != "value":
            return None
        out = copy.deepcopy(record)
        f = self.fields.get(note.path)
        if note.kind == "value":
            try:
                set_path(out, note.path, note.arg)
            except (KeyError, TypeError):
                return None
            return out
        if note.kind in ("set", "novelty") and f is not None:
            ok = [v for v in f.pool if note.value_ok(v, examples)]
            if not ok:
                return None
            set_path(out, note.path, rng.choice(ok))
            return out
        if note.kind == "relation":
            other, rel = note.arg
            v, w = get_path(out, note.path), get_path(out, other)
            if rel == "same":
                fo = self.fields.get(other)
                if fo is None or v not in fo.pool:
                    return None
                set_path(out, other, v)
                return out
            if rel == "differ":
                fo = self.fields.get(other)
                alts = [x for x in (fo.pool if fo else []) if x != v]
                if not alts:
                    return None
                set_path(out, other, rng.choice(alts))
                return out
            set_path(out, note.path, w)
            set_path(out, other, v)
            return out if note.holds(out, examples) else None
        return None  # length: a record's text cannot be lengthened by an edit; pick a record that holds


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def notes_text(notes: Sequence[Note]) -> list[str]:
    return [n.text for n in notes]
