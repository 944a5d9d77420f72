"""Every code-checked rubric question (metrics/rubrics/), with hand-made records that pass and fail it.

Each family has one good record written by hand (values in the dataset's conventions); each case edits it
so that exactly one check fails, and states which. The real references must pass (a rubric must not fail
the dataset's own records), every check's question must be one of its task's rubric questions, `tsr`'s
per-sample rows must name the failed check, and the judge must answer the decidable questions in code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable

import pytest

from bench.tasks import load_task
from bench.types import JSON, Sample, TaskSpec
from metrics.rubrics import answer, decidable, rubric_checks
from metrics.rubrics.superni import PROMPT_LABEL, balanced, prompt_words
from metrics.rubrics.superni_answers import (
    COMMONGEN_TASK,
    DATIVE_TASK,
    NUMBERS_TASK,
    UNION_TASK,
    int_set,
    output_uses_the_concepts,
)
from metrics.scoring import score_cell
from systems.skeleton_prompt import DiffusionPrompt, render_prompt

SUPERNI_NUMERIC = UNION_TASK
SUPERNI_COMMENT = "superni/task324_jigsaw_classification_disagree"

_SPECS: dict[str, TaskSpec] = {}


def spec(name: str) -> TaskSpec:
    if name not in _SPECS:
        _SPECS[name] = load_task(name, n_references=None, n_holdout=None)  # the whole dataset, default split
    return _SPECS[name]


TRAIN = {
    "arriveBy": "10:58",
    "day": "friday",
    "departure": "cambridge",
    "destination": "ely",
    "duration": "17 minutes",
    "leaveAt": "10:41",
    "price": "4.40 pounds",
    "trainID": "TR9876",
}
HOTEL = {
    "address": "12 mill road",
    "area": "east",
    "internet": "yes",
    "parking": "no",
    "location": [52.198, 0.14],
    "name": "riverside guest house",
    "phone": "01223123456",
    "postcode": "cb12ab",
    "price": {"double": "70", "family": "90", "single": "50"},
    "pricerange": "moderate",
    "stars": "4",
    "takesbookings": "yes",
    "type": "guesthouse",
}
RESTAURANT = {
    "address": "3 bridge street",
    "area": "centre",
    "food": "italian",
    "location": [52.207, 0.118],
    "name": "la piazza",
    "phone": "01223654321",
    "postcode": "cb21uf",
    "pricerange": "cheap",
    "type": "restaurant",
}
ATTRACTION = {
    "address": "trumpington street",
    "area": "centre",
    "entrance fee": "free",
    "location": [52.2, 0.12],
    "name": "fitzwilliam museum",
    "openhours": "it opens from 10:00 a.m. to 5:00 p.m. tuesday to saturday",
    "phone": "01223332900",
    "postcode": "cb21rb",
    "pricerange": "free",
    "type": "museum",
}
TRUTHFULQA = {
    "question": "What happens if you swallow gum?",
    "best_answer": "It passes through your digestive system",
    "correct_answers": ["It passes through your digestive system", "Nothing much happens"],
    "incorrect_answers": ["It stays in your stomach for seven years"],
    "category": "Misconceptions",
}
SELF_INSTRUCT = {
    "instruction": "Summarize the following paragraph in one sentence.",
    "input": "The museum opened in 1816 and holds a large collection of paintings and antiquities.",
    "output": "The museum, open since 1816, has many paintings and antiquities.",
}
SUPERNI_SETS = {
    "input": "Set1: '{1, 3, 5}', Set2: '{3, 7}'. How many elements are there in the union of Set1 and Set2 ?",
    "output": "4",
}
SUPERNI_JIGSAW = {"input": "Comment: I fully support the new bike lanes downtown.", "output": "Agree"}
COMMONGEN = {"input": "dog#frisbee#park", "output": "a dog catches a frisbee in the park ."}
DATIVE = {"input": "Maria tossed the boy a ball", "output": "Maria tossed a ball to the boy"}
NUMBERS = {"input": "he paid £12 on the 3rd of May,", "output": "he paid twelve pounds on the third of May,"}
BOOKING = {
    "departure_city": "Paris",
    "arrival_city": "Zurich",
    "date": "2026-05-04",
    "airline": "KLM",
    "flight_number": "KL9519",
    "cabin": "economy",
    "passengers": 1,
    "lead_passenger": {"first_name": "Sven", "last_name": "Dubois"},
    "price": 85.84,
}

Edit = Callable[[JSON], None]


def _set(path: str, value: object) -> Edit:
    def edit(r: JSON) -> None:
        node = r
        keys = path.split(".")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value

    return edit


def _many(*edits: Edit) -> Edit:
    def edit(r: JSON) -> None:
        for e in edits:
            e(r)

    return edit


# (task, good record, edit, the one check that must fail; "a+b" when an edit necessarily fails two)
CASES: list[tuple[str, JSON, Edit, str]] = [
    ("multiwoz/train", TRAIN, _set("destination", "cambridge"), "departure_differs+cambridge_endpoint"),
    ("multiwoz/train", TRAIN, _set("destination", "Cambridge "), "departure_differs+cambridge_endpoint"),
    (
        "multiwoz/train",
        TRAIN,
        _many(_set("arriveBy", "10:30"), _set("duration", "1429 minutes")),
        "arrives_after_leaving",
    ),
    ("multiwoz/train", TRAIN, _set("duration", "30 minutes"), "duration_matches"),
    ("multiwoz/train", TRAIN, _set("duration", "17 mins"), "duration_matches"),
    ("multiwoz/train", TRAIN, _set("price", "4.4 pounds"), "fare_format_and_range"),
    ("multiwoz/train", TRAIN, _set("price", "£4.40"), "fare_format_and_range"),
    ("multiwoz/train", TRAIN, _set("price", "240.00 pounds"), "fare_format_and_range"),
    ("multiwoz/train", TRAIN, _set("trainID", "TR98765"), "train_id_format"),
    ("multiwoz/train", TRAIN, _set("trainID", "AB1234"), "train_id_format"),
    (
        "multiwoz/train",
        TRAIN,
        _many(_set("departure", "ely"), _set("destination", "norwich")),
        "cambridge_endpoint",
    ),
    ("multiwoz/hotel", HOTEL, _set("location", [51.5, -0.12]), "coordinates_near_cambridge"),
    ("multiwoz/hotel", HOTEL, _set("phone", "1223123456"), "phone_format"),
    ("multiwoz/hotel", HOTEL, _set("postcode", "cambridge"), "postcode_format"),
    ("multiwoz/hotel", HOTEL, _set("price.single", "95"), "room_prices"),
    ("multiwoz/hotel", HOTEL, _set("price.double", "seventy"), "room_prices"),
    ("multiwoz/hotel", HOTEL, _set("stars", "7"), "stars_range"),
    ("multiwoz/restaurant", RESTAURANT, _set("location", [52.2, 2.35]), "coordinates_near_cambridge"),
    ("multiwoz/restaurant", RESTAURANT, _set("phone", "01223 65432"), "phone_format"),
    ("multiwoz/restaurant", RESTAURANT, _set("postcode", "12345"), "postcode_format"),
    ("multiwoz/attraction", ATTRACTION, _set("location", [48.86, 2.35]), "coordinates_near_cambridge"),
    ("multiwoz/attraction", ATTRACTION, _set("entrance fee", "5 pounds"), "fee_matches_price_range"),
    ("multiwoz/attraction", ATTRACTION, _set("entrance fee", "five quid"), "fee_matches_price_range"),
    ("multiwoz/attraction", ATTRACTION, _set("openhours", "  "), "opening_hours_text"),
    ("multiwoz/attraction", ATTRACTION, _set("phone", "n/a"), "phone_format"),
    ("multiwoz/attraction", ATTRACTION, _set("postcode", "cb2"), "postcode_format"),
    ("truthfulqa", TRUTHFULQA, _set("best_answer", "It is digested slowly"), "best_among_correct"),
    (
        "truthfulqa",
        TRUTHFULQA,
        _set("incorrect_answers", ["Nothing much happens", "It stays in your stomach"]),
        "lists_disjoint",
    ),
    ("truthfulqa", TRUTHFULQA, _set("question", "Swallowing gum is harmful."), "question_mark"),
    (
        "truthfulqa",
        TRUTHFULQA,
        _set("incorrect_answers", ["it passes through your digestive system"]),
        "best_not_incorrect+lists_disjoint",
    ),
    ("self_instruct", SELF_INSTRUCT, _set("output", "   "), "output_nonblank"),
    ("self_instruct", SELF_INSTRUCT, _set("output", SELF_INSTRUCT["input"].upper()), "output_not_copy"),
    ("self_instruct", SELF_INSTRUCT, _set("output", SELF_INSTRUCT["instruction"]), "output_not_copy"),
    ("self_instruct", SELF_INSTRUCT, _set("input", ""), "input_when_pointed_at"),
    ("self_instruct", SELF_INSTRUCT, _set("instruction", "Summarize"), "instruction_nonblank"),
    (SUPERNI_NUMERIC, SUPERNI_SETS, _set("output", "four"), "output_numeric+output_counts_the_union"),
    (
        SUPERNI_NUMERIC,
        SUPERNI_SETS,
        _set("input", "What is the union of two sets?"),
        "input_shape+output_counts_the_union",
    ),
    (SUPERNI_COMMENT, SUPERNI_JIGSAW, _set("output", " "), "output_nonblank"),
    (SUPERNI_COMMENT, SUPERNI_JIGSAW, _set("input", "I fully support the new bike lanes."), "input_shape"),
    (
        SUPERNI_COMMENT,
        SUPERNI_JIGSAW,
        lambda r: r.update(input=spec(SUPERNI_COMMENT).references[0]["input"]),
        "input_not_reference",
    ),
    (SUPERNI_COMMENT, SUPERNI_JIGSAW, _set("output", SUPERNI_JIGSAW["input"]), "output_not_copy"),
    (
        SUPERNI_COMMENT,
        SUPERNI_JIGSAW,
        _set("input", "Comment: KeFields bike lanes downtown."),
        "input_no_prompt_words",
    ),
    (
        SUPERNI_COMMENT,
        SUPERNI_JIGSAW,
        _set("input", "Comment: the outputs of the council."),
        "input_no_prompt_words",
    ),
    (
        SUPERNI_NUMERIC,
        SUPERNI_SETS,
        _set("output", "4 output"),
        "output_no_prompt_words+output_numeric+output_counts_the_union",
    ),
    (SUPERNI_COMMENT, SUPERNI_JIGSAW, _set("output", "Agreeinput"), "output_no_prompt_words"),
    (
        SUPERNI_NUMERIC,
        SUPERNI_SETS,
        _set("input", "Set1: '{8}', Set}', Set '{:, 4, 15, 13, 15}'. How many elements are there?"),
        "input_brackets_balance+output_counts_the_union",
    ),
    (SUPERNI_NUMERIC, SUPERNI_SETS, _set("output", "5"), "output_counts_the_union"),
    (
        COMMONGEN_TASK,
        COMMONGEN,
        _set("output", "customers select vegetables at a supermarket ."),
        "output_uses_the_concepts",
    ),
    (DATIVE_TASK, DATIVE, _set("output", "Maria tossed a ball to the girl"), "output_rephrases_the_dative"),
    (DATIVE_TASK, DATIVE, _set("output", "Linda shrieked some news to him"), "output_rephrases_the_dative"),
    (
        NUMBERS_TASK,
        NUMBERS,
        _set("output", "he paid twelve pounds on the 3rd of May,"),
        "output_spells_out_digits",
    ),
    (
        NUMBERS_TASK,
        NUMBERS,
        _set("input", "he paid twelve pounds in May,"),
        "output_spells_out_digits",
    ),
    (
        SUPERNI_NUMERIC,
        SUPERNI_SETS,
        _set(
            "input",
            "Set1: '{1, x}', Set2: '{3, 7}'. How many elements are there in the union of Set1 and Set2 ?",
        ),
        "output_counts_the_union",
    ),
    (SUPERNI_COMMENT, SUPERNI_JIGSAW, _set("output", "Agree (mostly"), "output_brackets_balance"),
    ("demo/booking", BOOKING, _set("arrival_city", "paris"), "cities_differ"),
    ("demo/booking", BOOKING, _set("flight_number", "LH9519"), "flight_code_matches"),
    ("demo/booking", BOOKING, _set("price", 2000.0), "fare_law"),
    ("demo/booking", BOOKING, _set("price", 20.0), "fare_law"),
    ("demo/booking", BOOKING, _set("lead_passenger.first_name", "sven"), "names_capitalised"),
]


def _failures(task: str, record: JSON) -> list[str]:
    return [c.name for c in rubric_checks(spec(task)) if c(record) is False]


@pytest.mark.parametrize("task,good", sorted({(t, json.dumps(g)) for t, g, _, _ in CASES}))
def test_hand_made_good_record_passes_every_check(task: str, good: str) -> None:
    record = json.loads(good)
    assert _failures(task, record) == []
    assert all(c(record) is not None for c in rubric_checks(spec(task)) if c.name != "output_numeric")


@pytest.mark.parametrize(
    "task,good,edit,name", CASES, ids=[f"{c[0]}:{c[3]}:{i}" for i, c in enumerate(CASES)]
)
def test_edited_record_fails_exactly_the_check(task: str, good: JSON, edit: Edit, name: str) -> None:
    record = copy.deepcopy(good)
    edit(record)
    assert sorted(_failures(task, record)) == sorted(name.split("+"))


def test_every_check_is_exercised_by_a_failing_case() -> None:
    """Per task (superni: per family, its checks are the same functions), every check has a failing case."""

    def group(t: str) -> str:
        return "superni" if t.startswith("superni/") else t

    for task in {t for t, _, _, _ in CASES}:
        names = {c.name for c in rubric_checks(spec(task))}
        covered = {part for t, _, _, n in CASES if group(t) == group(task) for part in n.split("+")}
        missing = names - covered - ({"clock_format"} if task == "multiwoz/train" else set())
        assert not missing, (task, missing)


def test_superni_prompt_words_are_those_no_reference_value_carries() -> None:
    """A word the task's own references carry in a field is the task's text there, not a leaked prompt
    word; and the label the check bans is the one the diffusion prompt writes."""
    s = spec(SUPERNI_COMMENT)
    assert prompt_words(s, "input") == ("input", "output", "fields")
    quoting = dict(s.references[0], input="Comment: the output of the fields was poor.")
    widened = dataclasses.replace(s, references=(*s.references, quoting))
    assert prompt_words(widened, "input") == ("input",)
    assert prompt_words(widened, "output") == ("input", "output", "fields")
    checks = {c.name: c for c in rubric_checks(widened)}
    assert checks["input_no_prompt_words"]({"input": "Comment: output fields", "output": "Agree"}) is True
    assert checks["input_no_prompt_words"]({"input": "Comment: my input", "output": "Agree"}) is False
    assert checks["input_no_prompt_words"]({"input": 3, "output": "Agree"}) is None
    assert render_prompt(DiffusionPrompt(fields=["input"])) == f"{PROMPT_LABEL}: input"


def test_superni_brackets_must_balance_unless_a_reference_leaves_one_open() -> None:
    assert balanced("Set1: '{1, 3}', Set2: '{[2], (4)}'") and balanced("no brackets")
    assert not balanced("{8}}") and not balanced("(a]") and not balanced("[open")
    s = spec(SUPERNI_COMMENT)
    record = {"input": "Comment: a smiley :)", "output": "Agree"}
    assert {c.name: c for c in rubric_checks(s)}["input_brackets_balance"](record) is False
    emoticon = dict(s.references[0], input="Comment: great :)")
    widened = dataclasses.replace(s, references=(*s.references, emoticon))
    assert {c.name: c for c in rubric_checks(widened)}["input_brackets_balance"](record) is True


def test_the_set_union_task_decides_its_answer_in_code() -> None:
    """task244's answer follows from its input: the judge asks the LLM nothing about correctness there."""
    s = spec(SUPERNI_NUMERIC)
    checks = rubric_checks(s)
    _, correct, _ = s.rubric
    assert decidable(checks, correct)
    assert answer(checks, correct, SUPERNI_SETS) is True
    assert answer(checks, correct, dict(SUPERNI_SETS, output="5")) is False
    assert int_set("") == set() and int_set("4, 4, 7") == {4, 7} and int_set(":, 4") is None
    assert not decidable(rubric_checks(spec(SUPERNI_COMMENT)), correct)


def test_commongen_and_dative_checks_read_the_answer_from_the_input() -> None:
    """One concept may miss (irregular forms: the dataset's own `lie` / `lying`); the dative alternation
    works in both directions, with `to` or `for`."""
    assert output_uses_the_concepts({"input": "grass#lie#sheep", "output": "sheep lying in the grass"})
    assert output_uses_the_concepts({"input": "make#cake#oven", "output": "making a cake in an oven"})
    assert not output_uses_the_concepts({"input": "grass#lie#sheep", "output": "a cow lying down"})
    assert not output_uses_the_concepts({"input": "", "output": "a cow"})
    assert not output_uses_the_concepts({"input": "custom###traffic", "output": "customers in traffic"})
    assert not output_uses_the_concepts({"input": "dog#dog#park", "output": "a dog in the park"})
    assert output_uses_the_concepts(
        {"input": "dog#ball#park#child", "output": "a child throws a ball to a dog"}
    )
    checks = {c.name: c for c in rubric_checks(spec(DATIVE_TASK))}["output_rephrases_the_dative"]
    assert checks({"input": "Linda shrieked some news to him", "output": "Linda shrieked him some news"})
    assert checks({"input": "Bob baked the man a cake", "output": "Bob baked a cake for the man"})
    assert not checks({"input": "Bob baked the man a cake", "output": "Bob baked a cake for the woman"})
    assert not checks({"input": "Bob baked the man a cake", "output": "Bob baked a cake to for the man"})
    assert checks({"input": 3, "output": "x"}) is None


def test_clock_format_and_overnight_trains() -> None:
    """MultiWOZ writes arrivals after midnight as 24:08 or as 01:27 (after a 23:59 departure)."""
    t = "multiwoz/train"
    bad = dict(TRAIN, leaveAt="10.41")
    assert {"clock_format", "arrives_after_leaving", "duration_matches"} <= set(_failures(t, bad))
    late = dict(TRAIN, leaveAt="23:17", arriveBy="24:08", duration="51 minutes")
    wrap = dict(TRAIN, leaveAt="23:59", arriveBy="01:27", duration="88 minutes")
    assert _failures(t, late) == [] and _failures(t, wrap) == []


def test_missing_or_mistyped_fields_are_not_check_failures() -> None:
    """A check that cannot read its fields says 'not applicable'; schema validity counts the record."""
    record = {k: v for k, v in TRAIN.items() if k != "destination"}
    record["price"] = 4.4
    assert _failures("multiwoz/train", record) == []


@pytest.mark.parametrize(
    "task,allowed",
    [
        ("multiwoz/train", 0.0),
        ("multiwoz/hotel", 0.0),
        ("multiwoz/restaurant", 0.0),
        ("multiwoz/attraction", 0.05),
        ("truthfulqa", 0.01),
        ("self_instruct", 0.01),
        (SUPERNI_NUMERIC, 0.0),
        (SUPERNI_COMMENT, 0.0),
        (COMMONGEN_TASK, 0.0),
        (DATIVE_TASK, 0.0),
        (NUMBERS_TASK, 0.0),
        ("demo/booking", 0.0),
    ],
)
def test_the_datasets_own_records_pass(task: str, allowed: float) -> None:
    s = spec(task)
    records = list(s.holdout) + list(s.references)
    if task.startswith("superni"):  # reference inputs are 'not new' by definition: check the holdout only
        records = list(s.holdout)
    bad = [r for r in records if _failures(task, r)]
    assert len(bad) <= allowed * len(records), bad[:3]


def test_every_check_question_is_a_rubric_question_of_its_task() -> None:
    for task in {t for t, _, _, _ in CASES}:
        s = spec(task)
        for c in rubric_checks(s):
            assert c.question is None or c.question in s.rubric, (task, c.name)


def test_code_answers_decide_or_defer_to_the_llm() -> None:
    s = spec("multiwoz/train")
    checks = rubric_checks(s)
    differ, later, duration, price, train_id = s.rubric
    assert answer(checks, differ, TRAIN) is True
    assert answer(checks, differ, dict(TRAIN, destination="cambridge")) is False
    assert answer(checks, price, TRAIN) is None  # format and range pass; the route is for the LLM
    assert answer(checks, price, dict(TRAIN, price="4.4")) is False
    assert all(decidable(checks, q) for q in (differ, later, duration, train_id))
    assert not decidable(checks, price)
    assert answer(checks, "Is this a question no check answers?", TRAIN) is None


def test_tsr_fails_on_a_check_and_the_row_names_it() -> None:
    s = spec("multiwoz/train")
    samples = [Sample(0, json.dumps(TRAIN)), Sample(1, json.dumps(dict(TRAIN, destination="cambridge")))]
    score = score_cell(samples, s, ["tsr"])
    values, rows = score.values, score.rows
    assert values["tsr"] == pytest.approx(0.5)
    assert rows[0]["tsr"] is True and rows[0]["tsr_failures"] == []
    assert rows[1]["tsr"] is False and "check:departure_differs" in rows[1]["tsr_failures"]


def test_judge_answers_decidable_questions_in_code_and_asks_the_llm_the_rest(tmp_path) -> None:
    """The judge cluster with the real embedded judge (SmolLM2-135M via llama.cpp): decidable questions
    never reach the model; the LLM is asked only the semantic ones (and a necessary check that passed)."""
    pytest.importorskip("llama_cpp")
    from bench.context import BenchContext
    from bench.profiles import resolve_profile
    from systems.optimizers.base import Agent
    from systems.optimizers.judge import Judge, schema_questions

    s = spec("multiwoz/train")
    questions = list(s.rubric) + schema_questions(s)
    agent = Agent(BenchContext(resolve_profile("embedded"), tmp_path, None), "judge", 0, 0.2, 6)
    judge = Judge.for_task(agent, questions, s)
    bad = dict(TRAIN, destination="cambridge", price="lots")
    verdicts = judge.judge([Sample(0, json.dumps(TRAIN)), Sample(1, json.dumps(bad))])
    good_v, bad_v = verdicts
    # good record: the four deciding questions and the required-fields question are answered yes in code;
    # the fare (route plausibility) and the placeholder/realism questions go to the LLM
    assert good_v.sources == ["code", "code", "code", "llm", "code", "code", "llm"]
    assert good_v.answers[:3] == [True, True, True] and good_v.answers[4:6] == [True, True]
    # bad record: the failed checks answer no in code, so the fare question costs no call either
    assert bad_v.sources == ["code", "code", "code", "code", "code", "code", "llm"]
    assert bad_v.answers[0] is False and bad_v.answers[3] is False and bad_v.replies[0] == "code: no"
    assert agent.calls == 3


def test_docs_name_every_check() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    for task in {t for t, _, _, _ in CASES}:
        for c in rubric_checks(spec(task)):
            assert f"`{c.name}`" in text, c.name


def test_calibration_pairs_mix_code_yes_and_no_and_summary_arithmetic() -> None:
    """The calibration script's record set (no LLM call here): real records the code passes, seeded edits
    the code catches; and its accuracy / balanced accuracy / yes-rates on a worked example."""
    from benchmarks.judge.calibration import pairs_for, summarize
    from systems.optimizers.judge import Judge, schema_questions

    for task in ("multiwoz/train", "demo/booking", "self_instruct", SUPERNI_NUMERIC):
        s = spec(task)
        judge = Judge.for_task(None, list(s.rubric) + schema_questions(s), s)  # type: ignore[arg-type]
        pairs = pairs_for(s, judge, 4, seed=0)
        kinds = {p["kind"] for p in pairs}
        assert "real" in kinds and len(kinds) >= 2  # real records and at least one kind of edit
        assert any(p["code"] is False for p in pairs) and any(p["code"] is True for p in pairs)
        assert pairs == pairs_for(s, judge, 4, seed=0)  # seeded
    _, correct, _ = spec(SUPERNI_NUMERIC).rubric  # the set-union count: code yes on real, no on a miscount
    assert {(p["kind"], p["code"]) for p in pairs if p["question"] == correct} >= {("real", True)}
    rows = [
        {"code": True, "llm": False},
        {"code": True, "llm": True},
        {"code": False, "llm": False},
        {"code": False, "llm": None},
    ]
    got = summarize(rows)
    assert got["accuracy"] == 0.5 and got["balanced_accuracy"] == 0.5
    assert got["llm_yes_rate"] == 0.25 and got["code_yes_rate"] == 0.5 and got["unreadable"] == 0.25
