"""Natural-language notes for the embedded DLM: kinds derived from the data, checks, counterfactual edits."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from bench.types import TaskSpec
from systems.diffusion_notes import HELD_OUT, TEMPLATES, Note, NoteSpace

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
needs_data = pytest.mark.skipif(
    not Path(os.environ["BENCH_DATA_DIR"]).exists(), reason="BENCH_DATA_DIR absent"
)

TRAIN = {
    "arriveBy": "12:09",
    "day": "sunday",
    "departure": "ely",
    "destination": "cambridge",
    "duration": "17 minutes",
    "leaveAt": "11:52",
    "price": "4.40 pounds",
    "trainID": "TR1",
}


def load(name: str) -> TaskSpec:
    from bench.tasks import load_task

    return load_task(name, n_references=None, n_holdout=None)


def test_checks_on_hand_made_records() -> None:
    weekend = Note("set", "day", "The day is a weekend day.", ("members", ("saturday", "sunday")))
    assert weekend.holds(TRAIN) and not weekend.holds({**TRAIN, "day": "monday"})
    morning = Note("set", "leaveAt", "", ("minutes", 300, 720))
    assert morning.holds(TRAIN) and not morning.holds({**TRAIN, "leaveAt": "12:00"})
    cheap = Note("set", "price", "", ("range", 1.0, 10.0))
    assert cheap.holds(TRAIN) and not cheap.holds({**TRAIN, "price": "23.60 pounds"})
    differ = Note("relation", "departure", "", ("destination", "differ"))
    assert differ.holds(TRAIN) and not differ.holds({**TRAIN, "departure": "cambridge"})
    after = Note("relation", "arriveBy", "", ("leaveAt", "after"))
    assert after.holds(TRAIN) and not after.holds({**TRAIN, "arriveBy": "11:00"})
    assert not after.holds({**TRAIN, "arriveBy": "noon"})  # unparsable times fail
    short = Note("length", "output", "", ("short", 3))
    assert short.holds({"output": "one two three"}) and not short.holds({"output": "one two three four"})
    novel = Note("novelty", "day", "")
    assert novel.holds(TRAIN, [{"day": "monday"}]) and not novel.holds(TRAIN, [{"day": "sunday"}])
    assert not weekend.holds("not a record") and not Note("value", "day", "", "sunday").holds({})


def test_held_out_phrasings_are_disjoint_from_training_ones() -> None:
    for family, ts in TEMPLATES.items():
        assert len(ts) >= 6 + HELD_OUT, family
        train, held = set(ts[:-HELD_OUT]), set(ts[-HELD_OUT:])
        assert not train & held
    rng = random.Random(0)
    for _ in range(50):
        assert NoteSpace.phrase("value", rng, True, field="day", value="x") in {
            t.format(field="day", value="x") for t in TEMPLATES["value"][-HELD_OUT:]
        }


@needs_data
def test_kinds_are_derived_from_each_familys_data() -> None:
    train = NoteSpace(load("multiwoz/train"))
    assert train.kinds() == ["value", "set", "relation", "novelty"]
    assert train.fields["day"].kind == "day" and train.fields["leaveAt"].kind == "time"
    assert train.fields["price"].kind == "number"
    rel = {(a, b) for a, b, _ in train.relations}
    assert {("departure", "destination"), ("arriveBy", "leaveAt")} <= rel
    qa = NoteSpace(load("truthfulqa"))
    assert "length" in qa.kinds() and "best_answer" in qa.lengths
    si = NoteSpace(load("self_instruct"))
    assert "length" in si.kinds()


@needs_data
@pytest.mark.parametrize("task", ["multiwoz/train", "truthfulqa", "superni/task1192_food_flavor_profile"])
def test_counterfactual_edits_make_the_note_true_and_touch_only_its_fields(task: str) -> None:
    spec = load(task)
    space = NoteSpace(spec)
    rng = random.Random(1)
    edited = 0
    for i in range(300):
        kind = space.kinds()[i % len(space.kinds())]
        note = space.draw(kind, rng, held_out=bool(i % 2))
        rec = rng.choice(spec.references)
        examples = rng.sample(spec.references, 2)
        out = space.satisfy(note, rec, rng, examples)
        if out is None:
            continue
        assert note.holds(out, examples), note
        allowed = {note.path} | ({note.arg[0]} if note.kind == "relation" else set())
        changed = {k for k in rec if rec[k] != out.get(k)}
        assert changed <= {p.split(".")[0] for p in allowed}
        edited += out is not rec
    assert edited > 30


@needs_data
def test_set_notes_name_only_minority_groups() -> None:
    from systems.diffusion_notes import MAX_GROUP_SHARE, get_path

    spec = load("multiwoz/train")
    space = NoteSpace(spec)
    descs = {d for d, _ in space.groups["day"]}
    assert "a weekend day" in descs and "a weekday" not in descs  # 72% of trains run on weekdays
    for path, groups in space.groups.items():
        for desc, arg in groups:
            note = Note("set", path, desc, arg)
            share = sum(note.value_ok(get_path(r, path)) for r in spec.references) / len(spec.references)
            assert share <= MAX_GROUP_SHARE, (path, desc, share)
