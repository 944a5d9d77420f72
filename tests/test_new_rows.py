"""New joint-pool rows (`new_rows.consistent_rows`): references' journeys shifted by whole hours, each
re-checked. Checked against clock arithmetic written out here, hand-made rows and multiwoz/train's data."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from bench.tasks import load_task
from bench.types import TaskSpec
from systems.optimizers.base import SteerPrompt
from systems.optimizers.edits import EditBounds, apply_edit, check_edit, joint_rows, together_template
from systems.optimizers.new_rows import clock_fields, consistent_rows, shifted_row

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets"))
JOURNEY = ("departure", "destination", "arriveBy", "leaveAt", "duration")
UNION = "departure_differs+arrives_after_leaving+duration_matches+clock_format+cambridge_endpoint"


@pytest.fixture(scope="module")
def train() -> TaskSpec:
    if not (DATA_DIR / "multiwoz_2.2").is_dir():
        pytest.skip(f"MultiWOZ absent from {DATA_DIR}")
    return load_task("multiwoz/train", n_references=64, n_holdout=32, data_dir=DATA_DIR)


def minutes(text: str) -> int:
    hours, mins = text.split(":")
    return int(hours) * 60 + int(mins)


def test_clock_fields_and_a_shift_on_hand_made_rows() -> None:
    rows = [("ely", "09:05", "5 minutes"), ("cambridge", "23:59", "60 minutes")]
    assert clock_fields(("station", "leaveAt", "duration"), rows) == [1]
    assert clock_fields(("a", "b"), [("x", "12:00"), ("y", "noon")]) == []  # one value is no clock
    assert shifted_row(("ely", "09:05", "21:10"), [1, 2], 120, 0, 1440) == ("ely", "11:05", "23:10")
    assert shifted_row(("ely", "10:05"), [1], -60, 0, 1440) == ("ely", "09:05")  # zero-padded: HH:MM
    assert shifted_row(("ely", "23:10"), [1], 120, 0, 1440) is None  # past the references' range
    assert shifted_row(("ely", "05:10"), [1], -120, 360, 1440) is None  # before it


def test_new_rows_pass_every_covered_check_and_are_no_reference_journey(train: TaskSpec) -> None:
    base = joint_rows(train, UNION, JOURNEY, 40)
    rows = consistent_rows(train, UNION, JOURNEY, base, random.Random(3), 32)
    assert len(rows) == 32 and len(set(rows)) == 32
    references = {tuple(r[f] for f in JOURNEY) for r in train.references}
    for dep, dest, arrive, leave, duration in rows:
        assert (dep, dest, arrive, leave, duration) not in references
        assert dep != dest and [dep, dest].count("cambridge") == 1
        # the checks' arithmetic, written out: arrival - departure (over midnight) equals the duration
        assert (minutes(arrive) - minutes(leave)) % 1440 == int(duration.split()[0]) > 0
        assert len(arrive) == len(leave) == 5  # zero-padded, as the references write times
        # the same journey (stations, duration) as a passing reference, some whole hours earlier or later
        assert any(
            b[0] == dep and b[1] == dest and b[4] == duration and (minutes(leave) - minutes(b[3])) % 60 == 0
            for b in base
        )
    assert rows == consistent_rows(train, UNION, JOURNEY, base, random.Random(3), 32)  # seeded
    assert rows != consistent_rows(train, UNION, JOURNEY, base, random.Random(4), 32)


def test_a_group_without_clock_fields_gets_no_new_rows(train: TaskSpec) -> None:
    group = ("departure", "destination")
    base = joint_rows(train, "departure_differs", group, 40)
    assert base and consistent_rows(train, "departure_differs", group, base, random.Random(0), 8) == []


def test_aod_s_joint_pool_takes_the_new_rows_and_falls_back_without_them(train: TaskSpec) -> None:
    p = SteerPrompt(train.instruction)
    batch = [{"duration_matches", "departure_differs", "cambridge_endpoint"}] * 4
    bounds = replace(EditBounds(), max_hints=5, joint_union=True, joint_new_rows=True)
    edit = together_template(p, train, random.Random(0), batch, bounds)
    assert edit.source == "new" and "new rows" in edit.describe()
    assert check_edit(edit, p, train, bounds, "x") is None
    assert apply_edit(p, edit).joint_pools == [(edit.fields, list(edit.rows))]
    references = {tuple(r[f] for f in edit.fields) for r in train.references}
    assert not set(edit.rows) & references
    old = together_template(p, train, random.Random(0), batch, replace(bounds, joint_new_rows=False))
    assert old.source == "" and set(old.rows) <= references and "real records" in old.describe()
    # a group without clock fields (the stations alone) falls back to the references' rows
    stations = together_template(p, train, random.Random(0), [{"departure_differs"}] * 4, bounds)
    assert stations.fields == ("departure", "destination") and stations.source == ""
    from systems.aod import AoDSystem

    assert AoDSystem({}).optimizer().config.bounds.joint_new_rows is True  # on by default
