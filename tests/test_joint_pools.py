"""Joint pools (`vary_together`): fields one rubric check reads, drawn together per sample from a passing
reference. Checked against hand-made checks, records and batches, and against multiwoz/train's data."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

import pytest

from bench.tasks import load_task
from bench.types import TaskSpec
from metrics.rubrics import Check, check_fields, rubric_checks
from systems.optimizers.base import SteerPrompt, template_text
from systems.optimizers.edits import (
    EditBounds,
    PromptEdit,
    applicable_kinds,
    apply_edit,
    check_edit,
    hint_lines,
    together_groups,
    together_template,
    union_group,
)

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets"))


@pytest.fixture(scope="module")
def booking() -> TaskSpec:
    return load_task("demo/booking", n_references=16, n_holdout=16)


@pytest.fixture(scope="module")
def train() -> TaskSpec:
    if not (DATA_DIR / "multiwoz_2.2").is_dir():
        pytest.skip(f"MultiWOZ absent from {DATA_DIR}")
    return load_task("multiwoz/train", n_references=64, n_holdout=32, data_dir=DATA_DIR)


# ------------------------------------------------------------------------------- check_fields
def test_check_fields_finds_what_a_hand_made_check_reads() -> None:
    refs = [{"a": 1, "b": 2, "c": "x", "d": "y"}, {"a": 3, "b": 5, "c": "z", "d": "w"}]
    total = Check("sum_odd", "a + b is odd", lambda r: (r["a"] + r["b"]) % 2 == 1)
    differ = Check("c_not_d", "c != d", lambda r: r["c"] != r["d"])
    assert check_fields(total, refs) == ("a", "b")  # a := 3 gives 3 + 2 odd (no), a := b gives 2 + 2
    assert check_fields(differ, refs) == ("c", "d")  # only the same-record swap c := d makes them equal
    nobody = Check("never", "no reference passes", lambda r: False)
    assert check_fields(nobody, refs) == ()


def test_check_fields_on_multiwoz_train_name_the_journey_fields(train: TaskSpec) -> None:
    found = {c.name: check_fields(c, train.references) for c in rubric_checks(train)}
    assert found["duration_matches"] == ("arriveBy", "duration", "leaveAt")
    assert found["departure_differs"] == ("departure", "destination")
    assert set(found["arrives_after_leaving"]) == {"arriveBy", "leaveAt"}


# ---------------------------------------------------------------------------- the template edit
def test_the_group_that_can_make_records_pass_wins_over_the_most_failed(train: TaskSpec) -> None:
    prompt = SteerPrompt(train.instruction)
    # every record fails the duration check; two fail only journey-time checks: the time group can
    # turn those two into successes, the station group none, although it covers more failures
    failing = [
        {"duration_matches", "departure_differs", "cambridge_endpoint"},
        {"duration_matches", "departure_differs", "cambridge_endpoint"},
        {"duration_matches", "arrives_after_leaving"},
        {"duration_matches"},
    ]
    edit = together_template(prompt, train, random.Random(0), failing, EditBounds())
    assert edit.kind == "vary_together" and edit.text == "duration_matches"
    assert edit.fields == ("arriveBy", "duration", "leaveAt")
    by_check = {c.name: c for c in rubric_checks(train)}
    for row in edit.rows:  # every row passes the check it was drawn for
        assert by_check["duration_matches"](dict(zip(edit.fields, row, strict=True))) is True
    refs = {tuple(r[f] for f in edit.fields) for r in train.references}
    assert set(edit.rows) <= refs and len(set(edit.rows)) == len(edit.rows) >= 2
    # no record fixable by either group, and both cover a check every record fails: the station group
    # covers two checks (they fail together on departure = destination), the time group more fields
    tie = [{"duration_matches", "departure_differs", "cambridge_endpoint"}] * 4
    assert together_template(prompt, train, random.Random(0), tie, EditBounds()).text == "duration_matches"
    # a batch whose only failures are the stations: the station group
    stations = together_template(
        prompt, train, random.Random(0), [{"departure_differs", "cambridge_endpoint"}], EditBounds()
    )
    assert stations.fields == ("departure", "destination")


def test_joint_edits_are_checked_applied_shown_and_removed(train: TaskSpec) -> None:
    b = EditBounds()
    p = SteerPrompt(train.instruction, hints=[("leaveAt", "10:00"), ("day", "monday")])
    # with the `day` pin only a 2-field group fits: it covers arrives_after_leaving, not the duration
    assert "vary_together" in applicable_kinds(p, b, train, [{"duration_matches", "arrives_after_leaving"}])
    assert "vary_together" not in applicable_kinds(p, b, train, [{"duration_matches"}])
    assert "vary_together" not in applicable_kinds(p, b)  # without the task there are no checks
    assert "vary_together" not in applicable_kinds(p, b, train, [set(), set()])  # nothing failed
    assert "vary_together" not in applicable_kinds(p, b, train, [{"train_id_format"}])  # no group covers it
    # the 3-field time group plus the `day` hint would be 4 hint lines, over the bound of 3: the
    # template takes the largest group that fits (the 2-field one replaces the `leaveAt` pin) ...
    edit = together_template(p, train, random.Random(1), [{"duration_matches", "arrives_after_leaving"}], b)
    assert edit.text == "arrives_after_leaving" and check_edit(edit, p, train, b, "x") is None
    # ... and a hand-built 3-field one is rejected
    over = PromptEdit(
        "vary_together", fields=("arriveBy", "duration", "leaveAt"), rows=(("1", "2", "3"), ("4", "5", "6"))
    )
    assert check_edit(over, p, train, b, train.instruction) == "more than 3 hint lines"
    p = SteerPrompt(train.instruction, hints=[("leaveAt", "10:00")])
    edit = together_template(p, train, random.Random(1), [{"duration_matches"}], b)
    assert check_edit(edit, p, train, b, train.instruction) is None
    q = apply_edit(p, edit)
    assert q.hints == [] and q.joint_pools == [(edit.fields, list(edit.rows))]  # the pool replaces the pin
    assert hint_lines(q) == 3 and "arriveBy, duration, leaveAt: taken together" in template_text(q)
    assert "vary_together" not in applicable_kinds(q, b, train, [{"departure_differs"}])  # one at most
    assert check_edit(edit, q, train, b, train.instruction) == "joint pool already present"
    assert apply_edit(q, PromptEdit("remove_hint", index=0)).joint_pools == []
    bad = PromptEdit("vary_together", fields=("leaveAt", "arriveBy"), rows=(("10:00",), ("11:00",)))
    assert check_edit(bad, p, train, b, train.instruction) == "a joint pool row needs one value per field"
    unknown = PromptEdit("vary_together", fields=("leaveAt", "nope"), rows=(("1", "2"), ("3", "4")))
    assert "unknown field" in (check_edit(unknown, p, train, b, train.instruction) or "")


def test_a_family_without_multi_field_checks_offers_no_joint_pool() -> None:
    spec = TaskSpec(
        "t", "Write a record.", {"type": "object"}, references=({"a": "x"}, {"a": "y"}), holdout=()
    )
    assert together_groups(spec) == {}
    assert "vary_together" not in applicable_kinds(SteerPrompt("x"), EditBounds(), spec, [{"a"}])


# ------------------------------------------------------------------------------ llada's side
def test_llada_draws_one_row_per_sample_and_keeps_the_old_prompts_without_joint_pools(
    booking: TaskSpec,
) -> None:
    from systems.llada import LLaDASystem, with_pool_hints

    rows = [["Air France", "AF1234"], ["Finnair", "AY6612"], ["Lufthansa", "LH0420"]]
    params = {
        "k_shots": 0,
        "hints": {"airline": "KLM", "cabin": "first"},
        "joint_pools": [{"fields": ["airline", "flight_number"], "rows": rows}],
    }
    system = LLaDASystem(params)
    drawn = [system.prompt_parts(booking, 5, i).hints for i in range(12)]
    for hints in drawn:
        assert hints[0] == ("cabin", "first")  # the fixed hint stays; the joint field replaces `airline`
        assert [list(v for _, v in hints[1:])] in [[r] for r in rows] and len(hints) == 3
    assert len({tuple(h) for h in drawn}) > 1  # the row varies by sample ...
    assert drawn == [LLaDASystem(params).prompt_parts(booking, 5, i).hints for i in range(12)]  # ... seeded
    # without joint pools the hints are exactly the pooled ones of before
    pools = {"cabin": ["economy", "business"]}
    assert with_pool_hints([("airline", "KLM")], pools, 3, 4) == with_pool_hints(
        [("airline", "KLM")], pools, 3, 4, []
    )


def test_a_joint_pool_row_of_the_wrong_length_is_a_clear_error() -> None:
    from bench.errors import BenchError
    from systems.llada import LLaDASystem

    with pytest.raises(BenchError, match="one value per field"):
        LLaDASystem({"joint_pools": [{"fields": ["a", "b"], "rows": [["1", "2"], ["3"]]}]})


def test_a_second_joint_pool_fits_when_the_bounds_allow_it(train: TaskSpec) -> None:
    """With `max_joint: 2, max_hints: 5` (AoD params, for a DLM trained on up to 5 hint lines) the
    station pool joins the time pool; at the defaults it cannot."""
    from systems.aod import AoDNoRLSystem

    wide = AoDNoRLSystem({"max_joint": 2, "max_hints": 5}).optimizer().config.bounds
    assert (wide.max_joint, wide.max_hints) == (2, 5)
    # the AoD systems' defaults since 2026-12-05: five hint lines and the union pool (EditBounds keeps
    # the narrower library defaults, which the suites measured before then pin)
    assert AoDNoRLSystem().optimizer().config.bounds == replace(
        EditBounds(), max_hints=5, joint_union=True, joint_new_rows=True
    )
    p = SteerPrompt(train.instruction)
    time = together_template(p, train, random.Random(1), [{"duration_matches"}], wide)
    q = apply_edit(p, time)
    stations = [{"departure_differs", "cambridge_endpoint"}]
    assert "vary_together" not in applicable_kinds(q, EditBounds(), train, stations)
    assert "vary_together" in applicable_kinds(q, wide, train, stations)
    edit = together_template(q, train, random.Random(2), stations, wide)
    assert edit.fields == ("departure", "destination") and check_edit(edit, q, train, wide, "x") is None
    both = apply_edit(q, edit)
    assert [f for f, _ in both.joint_pools] == [time.fields, edit.fields] and hint_lines(both) == 5
    assert check_edit(edit, q, train, EditBounds(), "x") == "too many joint pools"


def test_the_union_of_the_failed_checks_is_one_group_with_rows_that_pass_them_all(train: TaskSpec) -> None:
    """`joint_union`: one pool over the fields of every failed check (hand-made groups, then the data)."""
    every = {"c1": ("a", "b"), "c2": ("c", "d"), "c3": ("a", "b", "e"), "c4": ("b", "c")}
    failing = [{"c2"}, {"c2", "c3"}, {"c3"}, {"c2", "x"}]  # c2 failed 3 times, c3 twice, c1 and c4 never
    # most-failed group first, fields in group order; c4's fields lie inside the union, so it is covered
    assert union_group(every, failing) == ("c2+c3+c1+c4", ("c", "d", "a", "b", "e"))
    assert union_group(every, [{"c3"}, {"c1"}]) is None  # c1's fields lie in c3's: no larger group
    assert union_group(every, [set(), {"x"}]) is None  # no group failed

    p = SteerPrompt(train.instruction)
    batch = [{"duration_matches", "departure_differs", "cambridge_endpoint"}] * 3 + [{"duration_matches"}]
    union = replace(EditBounds(), max_hints=5, joint_union=True)
    edit = together_template(p, train, random.Random(0), batch, union)
    assert edit.fields == ("arriveBy", "duration", "leaveAt", "departure", "destination")
    assert edit.text.split("+")[:3] == ["duration_matches", "departure_differs", "cambridge_endpoint"]
    assert check_edit(edit, p, train, union, "x") is None and hint_lines(apply_edit(p, edit)) == 5
    by_check = {c.name: c for c in rubric_checks(train)}
    for row in edit.rows:  # each row is a reference's journey that passes every check the pool covers
        record = dict(zip(edit.fields, row, strict=True))
        assert all(by_check[name](record) is True for name in edit.text.split("+"))
    journeys = {tuple(r[f] for f in edit.fields) for r in train.references}
    assert set(edit.rows) <= journeys and len(set(edit.rows)) == len(edit.rows) >= 2
    # off in EditBounds' library defaults (AoD's system defaults turn it on), and within 3 hint lines
    # the union does not fit: one check's group, as before
    assert together_template(p, train, random.Random(0), batch, replace(union, joint_union=False)) == (
        together_template(p, train, random.Random(0), batch, EditBounds())
    )
    narrow = together_template(p, train, random.Random(0), batch, replace(union, max_hints=3))
    assert narrow.text == "duration_matches"
    # the AoD param reaches the bounds
    from systems.aod import AoDNoRLSystem

    params = {"joint_union": True, "max_hints": 5, "joint_new_rows": False}
    assert AoDNoRLSystem(params).optimizer().config.bounds == union
