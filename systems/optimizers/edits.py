"""Bounded prompt edits: what an optimizer may change in a prompt, how an LLM's text becomes an edit,
and the template edits used when that text is junk.

Edit kinds (the policy's actions):
- `add_note`: append one instruction line (at most `max_notes` notes, each at most `max_note_chars`),
- `replace_note`: replace one existing note,
- `set_hint`: set one `field: value` line (field must be a leaf path of the task; an enum field's value
  must be one of its allowed values; at most `max_hints` hints, values at most `max_hint_chars`),
- `vary_hint`: a distributional hint: one field whose value is drawn per sample from a pool (values
  not among the references' values of that field, made by `novel_values`; an enum field varies over
  all its allowed values; a free field of words, whose new values the data cannot make, gets the
  optimizer agent's values, `agent_pool`), at most `max_pools` pools of at most `max_pool` values,
- `vary_together`: a joint distributional hint: the fields one failing rubric check reads (found on the
  data by `metrics.rubrics.check_fields`) drawn together, per sample, from one reference that passes the
  check, so related fields stay consistent (arriveBy = leaveAt + duration). A rule edit: the check with
  the most failures in the incumbent's batch is the target; at most `max_joint` joint pools of at most
  `max_rows` rows, and all hint lines (fixed, pooled, joint) within `max_hints`. With `joint_union`,
  the union of the failed checks' groups is one more candidate group (one edit for a lever that
  otherwise takes two pools, `union_group`); with `joint_new_rows` the rows are passing references'
  rows with their clock fields shifted by whole hours, each re-checked (`new_rows.consistent_rows`),
- `remove_hint`: drop one hint (fixed, distributional or joint),
- `rewrite_instruction`: replace the instruction by a text of at most `max_ratio` times the original
  instruction's length and at least `min_ratio` times it (or 40 characters, whichever is less).

Bounds keep each step small (the paper's bounded-edit assumption) and keep a 135M optimizer's rambling
out of the prompt: an edit that breaks a bound is rejected and replaced by a template edit, and the
trace says so.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from bench.types import JSON, TaskSpec
from metrics.schema_paths import fields_of
from systems.optimizers.base import copy_prompt, prompt_joint, prompt_pools
from systems.skeleton_prompt import DiffusionPrompt, hint_text, leaf_items

if TYPE_CHECKING:
    from metrics.rubrics import Check

EDIT_KINDS = (
    "add_note",
    "replace_note",
    "set_hint",
    "vary_hint",
    "vary_together",
    "remove_hint",
    "rewrite_instruction",
)


@dataclass(frozen=True)
class EditBounds:
    max_notes: int = 3
    max_note_chars: int = 160
    min_note_words: int = 3
    max_hints: int = 3
    max_hint_chars: int = 40
    max_pools: int = 2
    max_pool: int = 8
    max_joint: int = 1
    max_rows: int = 32
    joint_union: bool = False
    joint_new_rows: bool = False  # a joint pool's rows are references' journeys shifted in time (`new_rows`)
    agent_values: bool = True  # a pool on a free field of words takes the agent's values (`agent_pool`)
    min_ratio: float = 0.4
    max_ratio: float = 1.5


@dataclass(frozen=True)
class PromptEdit:
    kind: str
    text: str = ""
    field: str = ""
    value: str = ""
    index: int = -1
    values: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    source: str = ""  # `vary_together`: "new" when the rows are `new_rows.consistent_rows`, else references'

    def to_json(self) -> JSON:
        return {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in asdict(self).items()
            if v not in ("", -1, ())
        }

    def describe(self) -> str:
        if self.kind == "vary_hint":
            return f"varied {self.field} over {', '.join(self.values)}"
        if self.kind == "vary_together":
            source = "new rows (references' shifted in time)" if self.source == "new" else "real records"
            return f"drew {', '.join(self.fields)} together from {len(self.rows)} {source} (for {self.text})"
        if self.kind == "set_hint":
            return f"set hint {self.field}: {self.value}"
        if self.kind == "remove_hint":
            return f"removed hint #{self.index}"
        if self.kind == "rewrite_instruction":
            return f'rewrote the instruction as "{self.text}"'
        if self.kind == "replace_note":
            return f'replaced note #{self.index} with "{self.text}"'
        return f'added note "{self.text}"'


# ------------------------------------------------------------------------------------- task fields
def hint_fields(spec: TaskSpec) -> dict[str, list[str] | None]:
    """Leaf paths a hint may name -> allowed values (enum) or None (free text).

    Paths come from the references (what the diffusion LM saw hints for) and the schema's properties.
    """
    schema_fields = fields_of(spec.schema)
    paths: dict[str, list[str] | None] = {}
    for r in spec.references:
        for p, _ in leaf_items(r):
            paths.setdefault(p, None)
    for p, info in schema_fields.items():
        if p and "[]" not in p and info.types - {"object", "array"}:
            paths.setdefault(p, None)
    for p in paths:
        enum = _enum_at(spec.schema, p)
        if enum is not None:
            paths[p] = enum
    return paths


def _enum_at(schema: JSON, path: str) -> list[str] | None:
    node: object = schema
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = (node.get("properties") or {}).get(part)
    if isinstance(node, dict) and isinstance(node.get("enum"), list):
        return [hint_text(v) for v in node["enum"]]
    return None


def applicable_kinds(
    prompt: DiffusionPrompt,
    bounds: EditBounds,
    spec: TaskSpec | None = None,
    failing: list[set[str]] | None = None,
) -> list[str]:
    """The edit kinds that can change `prompt` within `bounds`.

    `vary_together` needs the task (its checks) and the batch's failed checks per record (`failing`): it
    is offered only when a group that fits covers a check that failed, since otherwise it has nothing
    to fix and would spend a round.
    """
    kinds = ["add_note", "set_hint", "rewrite_instruction"]
    if prompt.notes:
        kinds.insert(1, "replace_note")
    if prompt.hints or prompt_pools(prompt) or prompt_joint(prompt):
        kinds.append("remove_hint")
    if len(prompt_pools(prompt)) < bounds.max_pools:
        kinds.append("vary_hint")
    if spec is not None and failing and len(prompt_joint(prompt)) < bounds.max_joint:
        failed = set().union(*failing)
        every = together_groups(spec)
        for group in fitting_groups(prompt, candidate_groups(every, failing, bounds), bounds).values():
            if any(set(g) <= set(group) for c, g in every.items() if c in failed):
                kinds.append("vary_together")
                break
    if len(prompt.notes) >= bounds.max_notes:
        kinds.remove("add_note")
    return [k for k in EDIT_KINDS if k in kinds]


# ------------------------------------------------------------------------------------------ apply
def check_edit(
    edit: PromptEdit, prompt: DiffusionPrompt, spec: TaskSpec, bounds: EditBounds, original: str
) -> str | None:
    """Why `edit` breaks a bound (None when it is acceptable)."""
    if edit.kind in ("add_note", "replace_note"):
        if len(edit.text) > bounds.max_note_chars:
            return f"note longer than {bounds.max_note_chars} characters"
        if len(edit.text.split()) < bounds.min_note_words:
            return f"note shorter than {bounds.min_note_words} words"
        if edit.text in prompt.notes:
            return "note already present"
        if edit.text.endswith(":"):
            return "note is a header, not an instruction"
        if edit.kind == "replace_note" and not 0 <= edit.index < len(prompt.notes):
            return "no such note"
        if edit.kind == "add_note" and len(prompt.notes) >= bounds.max_notes:
            return "too many notes"
    elif edit.kind == "set_hint":
        fields = hint_fields(spec)
        if edit.field not in fields:
            return f"unknown field {edit.field!r}"
        if not edit.value or len(edit.value) > bounds.max_hint_chars:
            return f"hint value empty or longer than {bounds.max_hint_chars} characters"
        allowed = fields[edit.field]
        if allowed is not None and edit.value not in allowed:
            return f"value {edit.value!r} not allowed for {edit.field!r}"
        if allowed is None and (why := unlike_references(spec, edit.field, edit.value)):
            return why
        if (edit.field, edit.value) in prompt.hints:
            return "hint already present"
        if len(prompt.hints) >= bounds.max_hints and edit.field not in dict(prompt.hints):
            return "too many hints"
    elif edit.kind == "vary_hint":
        fields = hint_fields(spec)
        if edit.field not in fields:
            return f"unknown field {edit.field!r}"
        if not 2 <= len(edit.values) <= bounds.max_pool or len(set(edit.values)) != len(edit.values):
            return f"a pool needs 2 to {bounds.max_pool} distinct values"
        if any(not v or len(v) > bounds.max_hint_chars for v in edit.values):
            return f"pool value empty or longer than {bounds.max_hint_chars} characters"
        allowed = fields[edit.field]
        if allowed is not None and any(v not in allowed for v in edit.values):
            return f"pool value not allowed for {edit.field!r}"
        if allowed is None and (
            why := next(filter(None, (unlike_references(spec, edit.field, v) for v in edit.values)), None)
        ):
            return why
        pools = prompt_pools(prompt)
        if pools.get(edit.field) == list(edit.values):
            return "pool already present"
        if len(pools) >= bounds.max_pools and edit.field not in pools:
            return "too many pools"
    elif edit.kind == "vary_together":
        fields = hint_fields(spec)
        if len(edit.fields) < 2 or len(set(edit.fields)) != len(edit.fields):
            return "a joint pool needs at least two distinct fields"
        if any(f not in fields or "[]" in f for f in edit.fields):
            return f"unknown field in {list(edit.fields)!r}"
        if not 2 <= len(edit.rows) <= bounds.max_rows or len(set(edit.rows)) != len(edit.rows):
            return f"a joint pool needs 2 to {bounds.max_rows} distinct rows"
        if any(len(r) != len(edit.fields) for r in edit.rows):
            return "a joint pool row needs one value per field"
        if any(not v or len(v) > bounds.max_hint_chars for r in edit.rows for v in r):
            return f"joint pool value empty or longer than {bounds.max_hint_chars} characters"
        joint = prompt_joint(prompt)
        if any(f == edit.fields for f, _ in joint):
            return "joint pool already present"
        if len(joint) >= bounds.max_joint:
            return "too many joint pools"
        if hint_lines(prompt, drop=edit.fields) + len(edit.fields) > bounds.max_hints:
            return f"more than {bounds.max_hints} hint lines"
    elif edit.kind == "remove_hint":
        if not 0 <= edit.index < len(prompt.hints) + len(prompt_pools(prompt)) + len(prompt_joint(prompt)):
            return "no such hint"
    elif edit.kind == "rewrite_instruction":
        n = len(edit.text)
        lo = min(int(bounds.min_ratio * len(original)), 40)
        hi = int(bounds.max_ratio * max(len(original), 40))
        if not lo <= n <= hi:
            return f"instruction length {n} outside [{lo}, {hi}]"
        if len(edit.text.split()) < bounds.min_note_words:
            return "instruction too short"
    else:
        return f"unknown edit kind {edit.kind!r}"
    return None


def apply_edit(prompt: DiffusionPrompt, edit: PromptEdit) -> DiffusionPrompt:
    """A new prompt with the (already checked) edit applied; the input prompt is left unchanged."""
    out = copy_prompt(prompt)
    if edit.kind == "add_note":
        out.notes.append(edit.text)
    elif edit.kind == "replace_note":
        out.notes[edit.index] = edit.text
    elif edit.kind == "set_hint":
        out.hints = [(k, v) for k, v in out.hints if k != edit.field] + [(edit.field, edit.value)]
        out.hint_pools = [(k, v) for k, v in out.hint_pools if k != edit.field]
    elif edit.kind == "vary_hint":
        out.hint_pools = [(k, v) for k, v in out.hint_pools if k != edit.field] + [
            (edit.field, list(edit.values))
        ]
        out.hints = [(k, v) for k, v in out.hints if k != edit.field]
    elif edit.kind == "vary_together":
        drop = set(edit.fields)
        out.hints = [(k, v) for k, v in out.hints if k not in drop]
        out.hint_pools = [(k, v) for k, v in out.hint_pools if k not in drop]
        out.joint_pools = [(f, r) for f, r in out.joint_pools if not drop & set(f)] + [
            (tuple(edit.fields), [tuple(r) for r in edit.rows])
        ]
    elif edit.kind == "remove_hint":  # indices: fixed hints first, then pools, then joint pools
        if edit.index < len(out.hints):
            del out.hints[edit.index]
        elif edit.index < len(out.hints) + len(out.hint_pools):
            del out.hint_pools[edit.index - len(out.hints)]
        else:
            del out.joint_pools[edit.index - len(out.hints) - len(out.hint_pools)]
    elif edit.kind == "rewrite_instruction":
        out.instruction = edit.text
    return out


# ------------------------------------------------------------------------------------------ parse
_PREFIX = {
    "add_note": ("note",),
    "replace_note": ("note",),
    "set_hint": ("hint",),
    "rewrite_instruction": ("instruction", "prompt", "new instruction"),
}
_CHATTER = re.compile(
    r"^(sure|okay|ok|here|i |i'm|i am|as an ai|certainly|of course|note that|cheers|thank)", re.I
)


def clean_line(line: str) -> str:
    line = line.strip().strip("`*\"' ").strip()
    line = re.sub(r"^[-•\d.)\s]+", "", line)  # list markers
    return re.sub(r"\s+", " ", line).strip().strip("\"'")


def parse_edit(
    kind: str, text: str, spec: TaskSpec, prompt: DiffusionPrompt, index: int = -1
) -> PromptEdit | None:
    """Read the optimizer's reply as an edit of `kind`; None when nothing usable is in it.

    Preferred form is one line `NOTE: ...` / `HINT: field = value` / `INSTRUCTION: ...`; without the
    prefix, the first line that is not chatter is taken (notes and instructions) or scanned for a known
    field name followed by a value (hints).
    """
    lines = [ln for ln in (clean_line(x) for x in text.splitlines()) if ln]
    if not lines:
        return None
    prefixes = _PREFIX.get(kind, ())
    chosen = None
    for ln in lines:
        m = re.match(r"^([A-Za-z ]{2,20})\s*:\s*(.+)$", ln)
        if m and m.group(1).strip().lower() in prefixes:
            chosen = m.group(2).strip().strip("\"'")
            break
    if kind == "set_hint":
        return _parse_hint(chosen or "", lines, spec)
    if chosen is None:
        chosen = next((ln for ln in lines if not _CHATTER.match(ln) and "{" not in ln), None)
    if not chosen:
        return None
    if kind == "rewrite_instruction":
        return PromptEdit(kind, text=chosen)
    return PromptEdit(kind, text=chosen, index=index)


def _norm_field(s: str) -> str:
    return re.sub(r"[\s_\-]+", "", s.lower())


def _parse_hint(chosen: str, lines: list[str], spec: TaskSpec) -> PromptEdit | None:
    fields = hint_fields(spec)
    by_norm = {_norm_field(f): f for f in fields}
    for candidate in ([chosen] if chosen else []) + lines:
        m = re.match(r"^\s*([A-Za-z_][\w.\- ]{0,40}?)\s*(?:=|:|->| is )\s*(.+)$", candidate)
        if not m:
            continue
        field = by_norm.get(_norm_field(m.group(1)))
        if field is None:
            continue
        value = m.group(2).strip().strip("\"',.;").strip()
        allowed = fields[field]
        if allowed is not None:
            match = next((a for a in allowed if a.lower() == value.lower()), None)
            if match is None:
                continue
            value = match
        return PromptEdit("set_hint", field=field, value=value)
    return None


# --------------------------------------------------------------------------------------- templates
GENERIC_NOTES = (
    "Answer with one JSON object and nothing else.",
    "Fill every field with a realistic, specific value.",
    "Use values that differ from the examples.",
    "Keep each value short, as in a real database record.",
    "Close every brace and quote of the JSON object.",
)


def template_edit(
    kind: str,
    prompt: DiffusionPrompt,
    spec: TaskSpec,
    rng: random.Random,
    judge_misses: list[str],
    schema_problem: str | None,
) -> PromptEdit:
    """A sensible edit of `kind` built without the LLM (the fallback), informed by the latest critique."""
    if kind in ("add_note", "replace_note"):
        pool = [n for n in GENERIC_NOTES if n not in prompt.notes]
        pool += [f"Make sure the answer is yes: {q}" for q in judge_misses]
        if schema_problem:
            pool.append("Avoid this: " + schema_problem.removeprefix("Most common schema problem: "))
        pool = [n for n in pool if n not in prompt.notes] or list(GENERIC_NOTES)
        text = rng.choice(pool)[:160]
        if kind == "replace_note" and prompt.notes:
            return PromptEdit(kind, text=text, index=rng.randrange(len(prompt.notes)))
        return PromptEdit("add_note", text=text)
    if kind == "set_hint":
        fields = hint_fields(spec)
        enums = [(f, vals) for f, vals in sorted(fields.items()) if vals]
        if enums:
            f, vals = rng.choice(enums)
            return PromptEdit("set_hint", field=f, value=rng.choice(vals))
        f = rng.choice(sorted(fields))
        values = sorted(
            {hint_text(v) for r in spec.references for p, v in leaf_items(r) if p == f and v is not None}
        )
        return PromptEdit("set_hint", field=f, value=(rng.choice(values) if values else "x")[:40])
    if kind == "vary_hint":
        return vary_template(prompt, spec, rng)
    if kind == "vary_together":
        return together_template(prompt, spec, rng, [], EditBounds())
    n_hints = len(prompt.hints) + len(prompt_pools(prompt)) + len(prompt_joint(prompt))
    if kind == "remove_hint" and n_hints:
        return PromptEdit("remove_hint", index=rng.randrange(n_hints))
    # rewrite_instruction: the task's own instruction, optionally with one generic sentence
    name = spec.name.split("/")[-1].replace("_", " ")
    options = [
        spec.instruction,
        f"Generate one new, realistic {name} record as a JSON object.",
        f"{spec.instruction} Every value must be new and realistic.",
    ]
    options = [o for o in options if o != prompt.instruction] or options
    return PromptEdit("rewrite_instruction", text=rng.choice(options))


def edit_from_reply(
    kind: str,
    reply: str,
    spec: TaskSpec,
    prompt: DiffusionPrompt,
    index: int,
    rng: random.Random,
    judge_misses: list[str],
    schema_problem: str | None,
    bounds: EditBounds,
    original: str,
) -> tuple[PromptEdit | None, JSON]:
    """The optimizer's reply as a checked edit, or a template edit when the reply is unusable.

    Returns the edit (None only when not even a template edit of `kind` fits the bounds) and what
    happened, for the trace: `agent_reply`, `edit_source` ("agent" / "fallback" / "none") and, for a
    fallback, `fallback_reason`.
    """
    info: JSON = {"agent_reply": reply}
    edit = parse_structured(kind, reply, spec, prompt, index, rng, bounds)
    if edit is None:
        edit = parse_edit(kind, reply, spec, prompt, index)
    else:
        info["reply_form"] = "json"
    reason = "reply had no usable edit" if edit is None else check_edit(edit, prompt, spec, bounds, original)
    if edit is not None and reason is None:
        info["edit_source"] = "agent"
        if edit.kind == "vary_hint":  # the agent names the field; the values are its own only for words
            info["values_source"] = "agent" if agent_writes_values(spec, edit.field, bounds) else "rule"
        return edit, info
    if kind == "vary_hint":
        info["values_source"] = "rule"  # the template's pool: novel_values
    info["edit_source"] = "fallback"
    info["fallback_reason"] = reason
    for _ in range(8):
        candidate = template_edit(kind, prompt, spec, rng, judge_misses, schema_problem)
        if check_edit(candidate, prompt, spec, bounds, original) is None:
            return candidate, info
    info["edit_source"] = "none"
    info["fallback_reason"] = f"{reason}; no template edit of kind {kind} fits the bounds"
    return None, info


# --------------------------------------------------------------------------- distributional hints
def variable_fields(spec: TaskSpec) -> dict[str, list[str] | None]:
    """Fields a pool can vary: enum fields, and free fields with at least two distinct reference values."""
    out: dict[str, list[str] | None] = {}
    for f, allowed in hint_fields(spec).items():
        if "[]" in f:
            continue
        if allowed is not None or len(reference_values(spec, f)) >= 2:
            out[f] = allowed
    return out


def reference_values(spec: TaskSpec, path: str) -> list[str]:
    """Distinct values (as hint text) of one leaf path across the references, in first-seen order.

    Built once per task (`metrics.cell.per_spec`): `unlike_references` and the pools ask for every
    field's values at each proposal; callers get their own list."""
    from metrics.cell import per_spec

    def build() -> dict[str, tuple[str, ...]]:
        seen: dict[str, dict[str, None]] = {}
        for r in spec.references:
            for p, v in leaf_items(r):
                if v is not None:
                    seen.setdefault(p, {}).setdefault(hint_text(v), None)
        return {p: tuple(values) for p, values in seen.items()}

    return list(per_spec(spec, "optimizer_reference_values", build).get(path, ()))


DIGIT_RUN = "\x00"
"""What `_shape` writes for each run of digits: a character no text value carries, so a value with a
literal `#` (SuperNI commongen's inputs are `accident#city#traffic`) is not read as having digits."""


def _shape(value: str) -> str:
    return re.sub(r"\d+", DIGIT_RUN, value)


def _dominant_shape(values: list[str]) -> str:
    """The most common digit shape of `values` (ties: the larger string); "" for none."""
    shapes: dict[str, int] = {}
    for v in values:
        shapes[_shape(v)] = shapes.get(_shape(v), 0) + 1
    return max(shapes, key=lambda sh: (shapes[sh], sh)) if shapes else ""


def needs_agent_values(spec: TaskSpec, path: str) -> bool:
    """Whether a pool on `path` needs the optimizer agent's values: a free field whose references share
    no digit shape (dish names, questions), where `novel_values` can only return the references' own
    values. A pool of those makes every record a copy of a reference's value: on SuperNI task1192
    (900-step DLM) such `vary_hint` edits lowered the paired reward by 0.178 on average (39 edits)."""
    if hint_fields(spec).get(path) is not None:
        return False
    return DIGIT_RUN not in _dominant_shape(reference_values(spec, path))


def agent_writes_values(spec: TaskSpec, path: str, bounds: EditBounds) -> bool:
    """Whether a pool on `path` takes the agent's values under `bounds` (`agent_values` on and the field
    needs them): the one rule the reply schema, the parser, the request and the trace share."""
    return bounds.agent_values and needs_agent_values(spec, path)


def agent_pool(spec: TaskSpec, path: str, values: object, bounds: EditBounds) -> list[str]:
    """The agent's proposed pool values for `path` that can serve: strings, not a reference's value,
    like the references' values (`unlike_references`), within the hint length, distinct, in its order,
    at most `max_pool` (and 6) of them."""
    seen = set(reference_values(spec, path))
    out: list[str] = []
    for v in values if isinstance(values, list) else []:
        v = clean_line(v) if isinstance(v, str) else ""
        if v and v not in seen and v not in out and len(v) <= bounds.max_hint_chars:
            if unlike_references(spec, path, v) is None:
                out.append(v)
    return out[: min(6, bounds.max_pool)]


def unlike_references(spec: TaskSpec, path: str, value: str) -> str | None:
    """Why a free hint value on `path` does not look like the references' values there (None if it does).

    Why: a hint is copied into every record, and the code checks cannot tell a dish from "15". On
    SuperNI task1192 the 135M optimizer's kept hints included `input` = "2", "15", "input" and "The task
    is to classify the 20" (docs/systems-aod.md, "The default profile"). The shape is read from the
    data, so every family gets the same rule:
    - where every reference value has digits (times, prices, IDs), the value's digit shape (`19:54` ->
      `#:#`) must be one of theirs;
    - where none has, the value must have none, at most one word more than the longest of them, no
      word more than half again as long as their longest word (a 135M model's pools ran words together:
      "KefadakarKoftaKfKf"), and not be another field's value there (`input` = "sweet", an `output`);
    - it must not be a field's name (the label the prompt writes before the value).
    A reference value is always like the references.
    """
    seen = reference_values(spec, path)
    if not seen or value in seen:
        return None
    fields = hint_fields(spec)
    if value.strip().lower() in {f.rsplit(".", 1)[-1].lower() for f in fields}:
        return f"hint value {value!r} is a field name"
    with_digits = [any(c.isdigit() for c in v) for v in seen]
    if all(with_digits) and _shape(value) not in {_shape(v) for v in seen}:
        return f"hint value {value!r} has none of the digit shapes of {path!r} in the references"
    if not any(with_digits):
        if any(c.isdigit() for c in value):
            return f"hint value {value!r} has digits; no reference value of {path!r} has"
        longest = max(len(v.split()) for v in seen)
        if len(value.split()) > longest + 1:
            return (
                f"hint value {value!r} is longer than {longest + 1} words, unlike {path!r} in the references"
            )
        widest = max(len(w) for v in seen for w in v.split())
        if max((len(w) for w in value.split()), default=0) > max(widest + 3, widest * 3 // 2):
            return f"hint value {value!r} has a word longer than {path!r}'s words in the references"
        other = next(
            (f for f in fields if f != path and "[]" not in f and value in reference_values(spec, f)), None
        )
        if other is not None:
            return f"hint value {value!r} is a value of {other!r}, not of {path!r}"
    return None


def novel_values(
    spec: TaskSpec, path: str, rng: random.Random, k: int = 6, max_chars: int = 40
) -> tuple[list[str], bool]:
    """Up to `k` values for a pool on `path`, and whether they are all absent from the references.

    - enum field: allowed values absent from the references first, then present ones (seeded order);
    - free field whose reference values share a digit shape (`19:54`, `49 minutes`, `TR9547`,
      `12.80 pounds`): new values of the most common shape, each digit run drawn within the range that
      run takes in the references (zero-padded as there), skipping reference values;
    - otherwise: the references' own values (no novelty possible without a model; flagged False).
    The rule is generic (derived from the data, not per family), so every family gets pools.
    """
    seen = reference_values(spec, path)
    allowed = hint_fields(spec).get(path)
    if allowed is not None:
        absent = [a for a in allowed if a not in seen]
        present = [a for a in allowed if a in seen]
        rng.shuffle(absent)
        rng.shuffle(present)
        pool = (absent + present)[:k]
        return pool, len(absent) >= len(pool)
    shape = _dominant_shape(seen)
    if DIGIT_RUN in shape:
        runs = [[int(x) for x in re.findall(r"\d+", v)] for v in seen if _shape(v) == shape]
        widths = [re.findall(r"\d+", v) for v in seen if _shape(v) == shape]
        n = shape.count(DIGIT_RUN)
        lo = [min(r[j] for r in runs) for j in range(n)]
        hi = [max(r[j] for r in runs) for j in range(n)]
        pad = [
            max(len(w[j]) for w in widths) if any(w[j].startswith("0") for w in widths) else 0
            for j in range(n)
        ]
        known = set(seen)
        out: list[str] = []
        for _ in range(50 * k):
            digits = [str(rng.randint(lo[j], hi[j])).zfill(pad[j]) for j in range(n)]
            pieces = shape.split(DIGIT_RUN)
            value = pieces[0] + "".join(d + pieces[j + 1] for j, d in enumerate(digits))
            if value not in known and value not in out and len(value) <= max_chars:
                out.append(value)
            if len(out) == k:
                break
        if len(out) >= 2:
            return out, True
    pool = [v for v in seen if len(v) <= max_chars]
    rng.shuffle(pool)
    return pool[:k], False


def vary_template(prompt: DiffusionPrompt, spec: TaskSpec, rng: random.Random, path: str = "") -> PromptEdit:
    """A distributional hint on `path` (or a random variable field not yet pooled)."""
    fields = variable_fields(spec)
    if not path:
        pooled = prompt_pools(prompt)
        choices = sorted(f for f in fields if f not in pooled) or sorted(fields)
        path = rng.choice(choices) if choices else ""
    if not path:
        return PromptEdit("vary_hint")
    values, _ = novel_values(spec, path, rng)
    return PromptEdit("vary_hint", field=path, values=tuple(values))


# ------------------------------------------------------------------------------ joint pools
def hint_lines(prompt: DiffusionPrompt, drop: tuple[str, ...] = ()) -> int:
    """Hint lines each sample's prompt carries (fixed, pooled, joint), not counting fields in `drop`.

    The embedded DLM saw 0-3 hints in training; five hint lines pushed the first ones out of its token
    window and it copied none of them (docs/systems-aod.md), hence one bound for all three kinds.
    """
    skip = set(drop)
    n = sum(1 for k, _ in prompt.hints if k not in skip)
    n += sum(1 for k in prompt_pools(prompt) if k not in skip)
    n += sum(len(f) for f, _ in prompt_joint(prompt) if not skip & set(f))
    return n


def together_groups(spec: TaskSpec) -> dict[str, tuple[str, ...]]:
    """Check name -> the hint fields it reads, for the task's rubric checks that read two or more."""
    from metrics.rubrics import check_fields, rubric_checks

    fields = hint_fields(spec)
    out: dict[str, tuple[str, ...]] = {}
    for check in rubric_checks(spec):
        group = check_fields(check, spec.references)
        if len(group) >= 2 and all(f in fields and "[]" not in f for f in group):
            out[check.name] = group
    return out


def fitting_groups(
    prompt: DiffusionPrompt, groups: dict[str, tuple[str, ...]], bounds: EditBounds
) -> dict[str, tuple[str, ...]]:
    """Those of the task's `groups` (`together_groups`) a joint pool can take now within the hint-line bound."""
    return {
        name: group
        for name, group in groups.items()
        if hint_lines(prompt, drop=group) + len(group) <= bounds.max_hints
        and not any(f == group for f, _ in prompt_joint(prompt))
    }


def union_group(
    every: dict[str, tuple[str, ...]], failing: list[set[str]]
) -> tuple[str, tuple[str, ...]] | None:
    """The union of the groups of the checks that failed in the batch, as (name, fields); None when it
    is no larger than one of them.

    Why: on multiwoz/train the time and the station checks fail together, so one group's pool alone
    barely moves a small batch's `tsr` (0.178 with the time pool over 32 records, 0.006 without) and
    the acceptance test turned the second pool down in half the cells; one pool over all five fields
    gives 0.775 on plain `llada` (docs/systems-aod.md, "A second joint pool" and "One pool over the
    union"). Groups come most-failed first (rubric order on ties), fields in group order, so the lines
    of the bottleneck check lead. The name joins the checks it covers with "+" (the failed ones first);
    its rows pass all of them.
    """
    count = {c: sum(1 for f in failing if c in f) for c in every}
    failed = sorted((c for c in every if count[c]), key=lambda c: -count[c])  # stable: rubric order on ties
    fields: list[str] = []
    for c in failed:
        fields += [f for f in every[c] if f not in fields]
    if not failed or any(set(every[c]) == set(fields) for c in failed):
        return None
    covered = failed + [c for c, g in every.items() if c not in failed and set(g) <= set(fields)]
    return "+".join(covered), tuple(fields)


def candidate_groups(
    every: dict[str, tuple[str, ...]], failing: list[set[str]], bounds: EditBounds
) -> dict[str, tuple[str, ...]]:
    """The groups a joint pool may take: each check's (`together_groups`), and with `joint_union` the
    union of the failed ones (`union_group`)."""
    union = union_group(every, failing) if bounds.joint_union else None
    return {**every, union[0]: union[1]} if union else dict(every)


def covered_checks(spec: TaskSpec, check_name: str) -> list[Check]:
    """The task's rubric checks a joint pool's name stands for: one check, or every check of a
    "+"-joined union name (`union_group`)."""
    from metrics.rubrics import rubric_checks

    names = set(check_name.split("+"))
    return [c for c in rubric_checks(spec) if c.name in names]


def joint_rows(
    spec: TaskSpec, check_name: str, group: tuple[str, ...], max_chars: int
) -> list[tuple[str, ...]]:
    """Distinct value rows of `group` from the references that pass the check (every check of a
    "+"-joined union name), in first-seen order."""
    checks = covered_checks(spec, check_name)
    rows: dict[tuple[str, ...], None] = {}
    for r in spec.references:
        if isinstance(r, dict) and all(f in r for f in group) and all(c(r) is True for c in checks):
            row = tuple(hint_text(r[f]) for f in group)
            if all(v and len(v) <= max_chars for v in row):
                rows.setdefault(row, None)
    return list(rows)


def together_template(
    prompt: DiffusionPrompt,
    spec: TaskSpec,
    rng: random.Random,
    failing: list[set[str]],
    bounds: EditBounds,
) -> PromptEdit:
    """A joint pool for the group that could fix the most of the batch (`failing`: each record's failed
    check names), rows in a seeded order.

    A group covers the checks whose fields all lie in it. The group chosen is the one with the most
    records whose failures it covers entirely (the records it can turn into successes); then the one
    covering the most-failed check (the bottleneck: no edit that leaves a check failing in every record
    can raise `tsr`); then the most fields; then the rubric's order. Not the sum of covered failures:
    checks on the same fields fail together (`departure_differs` and `cambridge_endpoint` on
    departure = destination = cambridge), so a sum counts one fault twice, and in the first 10-seed run
    it chose (departure, destination) in batches where every record also failed `duration_matches`.
    """
    every = together_groups(spec)
    groups = fitting_groups(prompt, candidate_groups(every, failing, bounds), bounds)
    if not groups:
        return PromptEdit("vary_together")
    order = list(groups)

    def score(name: str) -> tuple[int, int, int, int]:
        covered = {c for c, g in every.items() if set(g) <= set(groups[name])}
        fixable = sum(1 for f in failing if f and f <= covered)
        worst = max((sum(1 for f in failing if c in f) for c in covered), default=0)
        return fixable, worst, len(groups[name]), -order.index(name)

    name = max(order, key=score)
    rows = joint_rows(spec, name, groups[name], bounds.max_hint_chars)
    if bounds.joint_new_rows:
        from systems.optimizers.new_rows import consistent_rows

        new = consistent_rows(spec, name, groups[name], rows, rng, bounds.max_rows)
        if len(new) >= 2:
            return PromptEdit("vary_together", text=name, fields=groups[name], rows=tuple(new), source="new")
    rng.shuffle(rows)
    return PromptEdit("vary_together", text=name, fields=groups[name], rows=tuple(rows[: bounds.max_rows]))


# ------------------------------------------------------------------------ constrained agent replies
_NOTE_PATTERN = "^[A-Z][a-z]{0,11}( [A-Za-z0-9,'-]{1,14}){3,14}[.]$"
_FREE_VALUE_PATTERN = "^[A-Za-z0-9][A-Za-z0-9 :.'/-]{0,29}$"


def reply_schema(
    kind: str, spec: TaskSpec, prompt: DiffusionPrompt, bounds: EditBounds, original: str
) -> JSON | None:
    """The JSON shape the optimizer's reply must take for an edit of `kind` (None: no LLM needed).

    Decoded under a grammar (llama.cpp), a 135M model can only write an object of this shape: a note is
    one capitalised sentence of 4 to 15 words; a hint names a known field and, for an enum field, one of
    its values; a distributional hint names a variable field (the values come from `novel_values`); an
    instruction is a word sequence. What a grammar cannot check (bounds, duplicates) `check_edit` does.
    """
    if kind in ("add_note", "replace_note"):
        props: JSON = {"note": {"type": "string", "pattern": _NOTE_PATTERN}}
        return {"type": "object", "properties": props, "required": ["note"], "additionalProperties": False}
    if kind == "set_hint":
        options = []
        for f, allowed in sorted(hint_fields(spec).items())[:24]:
            if "[]" in f:
                continue
            value: JSON = (
                {"enum": list(allowed)} if allowed else {"type": "string", "pattern": _FREE_VALUE_PATTERN}
            )
            options.append(
                {
                    "type": "object",
                    "properties": {"field": {"const": f}, "value": value},
                    "required": ["field", "value"],
                    "additionalProperties": False,
                }
            )
        return {"anyOf": options} if options else None
    if kind == "vary_hint":
        pooled = prompt_pools(prompt)
        names = sorted(f for f in variable_fields(spec) if f not in pooled)
        if not names:
            return None
        wordy = [f for f in names if agent_writes_values(spec, f, bounds)]
        plain = [f for f in names if f not in wordy]
        options = []
        if plain:
            props = {"field": {"enum": plain}}
            options.append(
                {"type": "object", "properties": props, "required": ["field"], "additionalProperties": False}
            )
        for f in wordy:  # the data cannot make new values of words: the agent writes the pool
            item = {"type": "string", "pattern": _FREE_VALUE_PATTERN}
            props = {
                "field": {"const": f},
                "values": {"type": "array", "items": item, "minItems": 2, "maxItems": 6},
            }
            options.append(
                {
                    "type": "object",
                    "properties": props,
                    "required": ["field", "values"],
                    "additionalProperties": False,
                }
            )
        return options[0] if len(options) == 1 else {"anyOf": options}
    if kind == "rewrite_instruction":
        hi = int(bounds.max_ratio * max(len(original), 40))
        words = max(4, min(60, hi // 6))
        pattern = f"^[A-Z][A-Za-z0-9,:()'/-]{{0,14}}( [A-Za-z0-9,:()'/.-]{{1,16}}){{4,{words}}}[.]$"
        props = {"instruction": {"type": "string", "pattern": pattern}}
        return {
            "type": "object",
            "properties": props,
            "required": ["instruction"],
            "additionalProperties": False,
        }
    return None


def reply_format(kind: str) -> str:
    """The one-line answer format shown to the agent for `kind` (matches `reply_schema`)."""
    return {
        "add_note": 'Answer as JSON: {"note": "<one sentence>"}',
        "replace_note": 'Answer as JSON: {"note": "<one sentence>"}',
        "set_hint": 'Answer as JSON: {"field": "<field>", "value": "<value>"}',
        "vary_hint": 'Answer as JSON: {"field": "<field>"}',
        "rewrite_instruction": 'Answer as JSON: {"instruction": "<text>"}',
    }.get(kind, "")


def parse_structured(
    kind: str,
    reply: str,
    spec: TaskSpec,
    prompt: DiffusionPrompt,
    index: int,
    rng: random.Random,
    bounds: EditBounds,
) -> PromptEdit | None:
    """An edit from a JSON reply in `reply_schema`'s shape (None when the reply is not such an object)."""
    import json

    start = reply.find("{")
    if start < 0:
        return None
    try:
        obj, _ = json.JSONDecoder().raw_decode(reply[start:])
    except json.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    if kind in ("add_note", "replace_note") and isinstance(obj.get("note"), str):
        return PromptEdit(kind, text=clean_line(obj["note"]), index=index)
    if kind == "rewrite_instruction" and isinstance(obj.get("instruction"), str):
        return PromptEdit(kind, text=clean_line(obj["instruction"]))
    if kind == "set_hint" and isinstance(obj.get("field"), str) and isinstance(obj.get("value"), str):
        return PromptEdit(kind, field=obj["field"], value=obj["value"].strip())
    if kind == "vary_hint" and isinstance(obj.get("field"), str):
        if obj["field"] not in variable_fields(spec):
            return PromptEdit(kind, field=obj["field"])  # check_edit names the problem
        if agent_writes_values(spec, obj["field"], bounds):  # < 2 usable: check_edit refuses
            return PromptEdit(
                kind,
                field=obj["field"],
                values=tuple(agent_pool(spec, obj["field"], obj.get("values"), bounds)),
            )
        values, _ = novel_values(spec, obj["field"], rng, k=min(6, bounds.max_pool))
        return PromptEdit(kind, field=obj["field"], values=tuple(values))
    return None
