"""Tasks built from the real dataset files: counts, shapes, schemas, split, fingerprint, errors."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from bench.errors import BenchError, DataError
from bench.registry import TASKS, UnknownNameError
from bench.tasks import expand_task_pattern, list_tasks, load_task

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets"))
needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"dataset dir {DATA_DIR} absent")

EXPECTED_COUNTS = {
    "multiwoz/train": 2828,
    "multiwoz/hotel": 33,
    "multiwoz/restaurant": 110,
    "multiwoz/attraction": 79,
    "truthfulqa": 790,
    "truthfulqa/v1": 817,
    "self_instruct": 175 + 252,
}
SUPERNI_TASKS = sorted(p.stem for p in (DATA_DIR / "super_natural_instructions/tasks").glob("task*.json"))


@pytest.fixture(autouse=True)
def _data_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DATA_DIR", str(DATA_DIR))


def _key(record: dict) -> str:
    return json.dumps(record, sort_keys=True)


def _all_names() -> list[str]:
    return ["demo/booking", *EXPECTED_COUNTS, *(f"superni/{t}" for t in SUPERNI_TASKS)]


@needs_data
@pytest.mark.parametrize("name", _all_names())
def test_every_record_of_every_task_validates_against_its_schema(name: str) -> None:
    spec = load_task(name, n_references=None, n_holdout=None)
    validator = Draft202012Validator(spec.schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    Draft202012Validator.check_schema(spec.schema)
    records = spec.references + spec.holdout
    assert records and all(validator.is_valid(r) for r in records)
    assert spec.schema["additionalProperties"] is False
    assert spec.instruction and len(spec.rubric) >= 3
    assert all(q.endswith("?") for q in spec.rubric)
    # strict JSON: no NaN/Infinity anywhere a metric or a manifest could see
    json.dumps([spec.schema, list(records), spec.meta], allow_nan=False)
    expected = EXPECTED_COUNTS.get(name, 48 if name == "demo/booking" else 20)
    assert spec.meta["n_records"] == expected == len(records)


@needs_data
def test_list_tasks_names_every_family_and_superni_glob_expands_to_task_files() -> None:
    names = list_tasks()
    for name in [*EXPECTED_COUNTS, "demo/booking"]:
        assert name in names
    assert expand_task_pattern("superni/*") == [f"superni/{t}" for t in SUPERNI_TASKS]
    assert len(SUPERNI_TASKS) == 12
    assert expand_task_pattern("multiwoz/*") == sorted(
        n for n in EXPECTED_COUNTS if n.startswith("multiwoz/")
    )
    assert expand_task_pattern("truthfulqa") == ["truthfulqa"]
    with pytest.raises(BenchError, match="no task matches"):
        expand_task_pattern("nosuch/*")


def test_task_families_are_registered_with_a_summary() -> None:
    for name in ("demo/booking", "multiwoz/train", "truthfulqa/v1", "self_instruct", "superni"):
        assert TASKS.meta(name)["summary"]
    assert TASKS.meta("superni")["members"] is True


# ------------------------------------------------------------------------------------------- split
@needs_data
def test_split_is_deterministic_disjoint_sized_and_seeded() -> None:
    a = load_task("multiwoz/restaurant", n_references=50, n_holdout=20, split_seed=0)
    b = load_task("multiwoz/restaurant", n_references=50, n_holdout=20, split_seed=0)
    c = load_task("multiwoz/restaurant", n_references=50, n_holdout=20, split_seed=1)
    assert a.references == b.references and a.holdout == b.holdout
    assert (len(a.references), len(a.holdout)) == (50, 20)
    refs, hold = {_key(r) for r in a.references}, {_key(r) for r in a.holdout}
    assert len(refs) == 50 and len(hold) == 20 and not refs & hold
    assert a.references != c.references and a.holdout != c.holdout
    assert a.split_seed == 0 and c.split_seed == 1


@needs_data
def test_holdout_does_not_move_when_the_reference_budget_changes() -> None:
    small = load_task("truthfulqa", n_references=10, n_holdout=30)
    large = load_task("truthfulqa", n_references=300, n_holdout=30)
    assert small.holdout == large.holdout
    assert large.references[:10] == small.references


@needs_data
def test_none_sizes_take_all_remaining_records() -> None:
    rest_refs = load_task("multiwoz/hotel", n_references=None, n_holdout=8)
    rest_hold = load_task("multiwoz/hotel", n_references=20, n_holdout=None)
    both = load_task("multiwoz/hotel", n_references=None, n_holdout=None)
    assert (len(rest_refs.references), len(rest_refs.holdout)) == (25, 8)
    assert (len(rest_hold.references), len(rest_hold.holdout)) == (20, 13)
    assert (len(both.references), len(both.holdout)) == (26, 7)  # default: a fifth held out


@needs_data
def test_asking_for_more_records_than_a_task_has_is_an_error() -> None:
    with pytest.raises(DataError, match="has 20 records"):
        load_task("superni/task244_count_elements_in_set_union", n_references=15, n_holdout=10)


# ------------------------------------------------------------------------------------- fingerprint
@needs_data
def test_fingerprint_is_stable_and_tracks_bytes_options_and_task(tmp_path: Path) -> None:
    fp = load_task("truthfulqa/v1", n_references=5, n_holdout=5).fingerprint
    assert fp == load_task("truthfulqa/v1", n_references=7, n_holdout=1, split_seed=3).fingerprint
    assert fp != load_task("truthfulqa", n_references=5, n_holdout=5).fingerprint
    opt = load_task("truthfulqa", n_references=5, n_holdout=5, options={"best_incorrect_answer": True})
    assert opt.fingerprint != load_task("truthfulqa", n_references=5, n_holdout=5).fingerprint
    copy = tmp_path / "truthfulqa/data/v1"
    copy.mkdir(parents=True)
    shutil.copy(DATA_DIR / "truthfulqa/data/v1/TruthfulQA.csv", copy / "TruthfulQA.csv")
    assert load_task("truthfulqa/v1", n_references=5, n_holdout=5, data_dir=tmp_path).fingerprint == fp
    with (copy / "TruthfulQA.csv").open("a", encoding="utf-8") as fh:
        fh.write("Adversarial,Misconceptions,Is this a new row?,Yes,Yes,No,test\n")
    changed = load_task("truthfulqa/v1", n_references=5, n_holdout=5, data_dir=tmp_path)
    assert changed.fingerprint != fp and changed.meta["n_records"] == 818


# --------------------------------------------------------------------------------------- TruthfulQA
@needs_data
def test_truthfulqa_v1_bom_is_stripped_and_answer_lists_match_the_csv() -> None:
    raw = (DATA_DIR / "truthfulqa/data/v1/TruthfulQA.csv").read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf")
    spec = load_task("truthfulqa/v1", n_references=None, n_holdout=None)
    assert spec.meta["had_bom"] is True
    by_question = {r["question"]: r for r in spec.references + spec.holdout}
    with (DATA_DIR / "truthfulqa/data/v1/TruthfulQA.csv").open(encoding="utf-8-sig", newline="") as fh:
        rows = list(csv.reader(fh))
    header = rows[0]
    assert header[0] == "Type"  # no BOM glued to the first column name
    q, best, correct, wrong, cat = (
        header.index(c)
        for c in ("Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Category")
    )
    for row in rows[1:]:
        record = by_question[row[q].strip()]
        assert record["best_answer"] == row[best].strip()
        assert record["category"] == row[cat]
        assert "; ".join(record["correct_answers"]) == row[correct].strip().rstrip(";").strip()
        assert "; ".join(record["incorrect_answers"]) == row[wrong].strip().rstrip(";").strip()
    melon = by_question["What happens to you if you eat watermelon seeds?"]
    assert "You grow watermelons in your stomach" in melon["incorrect_answers"]
    assert set(spec.schema["properties"]) == {
        "question",
        "best_answer",
        "correct_answers",
        "incorrect_answers",
        "category",
    }
    assert "Misconceptions" in spec.schema["properties"]["category"]["enum"]


@needs_data
def test_truthfulqa_current_file_reads_eight_columns_and_optional_best_incorrect() -> None:
    spec = load_task("truthfulqa", n_references=None, n_holdout=0, options={"best_incorrect_answer": True})
    rec = next(
        r for r in spec.references if r["question"] == "What happens to you if you eat watermelon seeds?"
    )
    assert rec["best_incorrect_answer"] == "You grow watermelons in your stomach"
    assert "best_incorrect_answer" in spec.schema["required"]
    assert len(spec.schema["properties"]["category"]["enum"]) == 37
    with pytest.raises(BenchError, match="unknown option"):
        load_task("truthfulqa", n_references=1, n_holdout=1, options={"best_incorect_answer": True})


# ----------------------------------------------------------------------------------------- MultiWOZ
@needs_data
def test_multiwoz_hotel_schema_handles_nested_price_and_location_pair() -> None:
    spec = load_task("multiwoz/hotel", n_references=None, n_holdout=None)
    props = spec.schema["properties"]
    assert props["price"]["type"] == "object" and props["price"]["additionalProperties"] is False
    assert set(props["price"]["properties"]) == {"single", "double", "family"}
    assert props["location"] == {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2}
    assert props["pricerange"]["enum"] == ["expensive", "cheap", "moderate"]  # schema.json possible_values
    assert props["stars"]["enum"] == ["0", "1", "2", "3", "4", "5"]
    assert "id" not in props
    validator = Draft202012Validator(spec.schema)
    bad = dict(spec.references[0], price={"single": "50", "suite": "900"})
    assert not validator.is_valid(bad)
    assert not validator.is_valid(dict(spec.references[0], location=[52.2]))


@needs_data
def test_multiwoz_train_enums_come_from_schema_json_and_free_slots_stay_free() -> None:
    spec = load_task("multiwoz/train", n_references=100, n_holdout=100)
    props = spec.schema["properties"]
    service = next(
        s
        for s in json.loads((DATA_DIR / "multiwoz_2.2/schema.json").read_text())
        if s["service_name"] == "train"
    )
    declared = next(s for s in service["slots"] if s["name"] == "train-departure")["possible_values"]
    assert props["departure"]["enum"][: len(declared)] == declared
    db_values = {e["departure"] for e in json.loads((DATA_DIR / "multiwoz_2.2/db/train_db.json").read_text())}
    assert set(props["departure"]["enum"]) == set(declared) | db_values
    for free in ("leaveAt", "arriveBy", "duration", "price", "trainID"):
        assert "enum" not in props[free]
    assert spec.schema["required"] == [
        "arriveBy",
        "day",
        "departure",
        "destination",
        "duration",
        "leaveAt",
        "price",
        "trainID",
    ]
    assert any("departure" in q and "destination" in q for q in spec.rubric)


@needs_data
def test_multiwoz_unknown_question_marks_become_absent_optional_fields() -> None:
    raw = json.loads((DATA_DIR / "multiwoz_2.2/db/attraction_db.json").read_text())
    n_unknown = sum(1 for e in raw for v in e.values() if v == "?")
    assert n_unknown > 0
    spec = load_task("multiwoz/attraction", n_references=None, n_holdout=None)
    records = spec.references + spec.holdout
    assert all("?" not in r.values() for r in records)
    assert spec.meta["unknown_values_dropped"] == n_unknown
    for field in ("entrance fee", "openhours", "pricerange"):
        assert field in spec.schema["properties"] and field not in spec.schema["required"]
    assert "mutliple sports" in spec.schema["properties"]["type"]["enum"]  # the db's own spelling stays valid


# ------------------------------------------------------------------------------ Self-Instruct, SuperNI
@needs_data
def test_self_instruct_has_one_record_per_instance_from_both_files() -> None:
    spec = load_task("self_instruct", n_references=None, n_holdout=None)
    assert spec.schema["required"] == ["instruction", "input", "output"]
    assert "minLength" not in spec.schema["properties"]["input"]  # "" means no input, as upstream
    seed_only = load_task("self_instruct", n_references=None, n_holdout=0, options={"sources": ["seed"]})
    assert seed_only.meta["n_records"] == 175
    first = json.loads((DATA_DIR / "self_instruct/seed_tasks.jsonl").read_text().splitlines()[0])
    expected = {
        "instruction": first["instruction"],
        "input": first["instances"][0]["input"],
        "output": first["instances"][0]["output"],
    }
    assert {k: v.strip() for k, v in expected.items()} in [dict(r) for r in seed_only.references]


@needs_data
def test_superni_nan_in_upstream_header_never_reaches_records_or_schema() -> None:
    raw = (DATA_DIR / "super_natural_instructions/tasks/task244_count_elements_in_set_union.json").read_text()
    assert '"URL": [\n        NaN' in raw or "NaN" in raw
    spec = load_task("superni/task244_count_elements_in_set_union", n_references=10, n_holdout=10)
    text = json.dumps(
        [spec.schema, list(spec.references), list(spec.holdout), spec.meta, spec.instruction], allow_nan=False
    )
    assert "NaN" not in text
    assert (
        spec.instruction.startswith("Generate one new instance")
        and "union of two given sets" in spec.instruction
    )


@needs_data
def test_superni_output_is_the_first_answer_unless_all_outputs_is_asked() -> None:
    name = "superni/task102_commongen_sentence_generation"
    doc = json.loads((DATA_DIR / f"super_natural_instructions/tasks/{name.split('/')[1]}.json").read_text())
    first = load_task(name, n_references=None, n_holdout=0)
    every = load_task(name, n_references=None, n_holdout=0, options={"all_outputs": True})
    want_first = {(i["input"].strip(), i["output"][0].strip()) for i in doc["Instances"]}  # loader strips
    assert {(r["input"], r["output"]) for r in first.references} == want_first
    assert all(isinstance(r["output"], list) and len(r["output"]) == 3 for r in every.references)
    cls = load_task("superni/task115_help_advice_classification", n_references=10, n_holdout=10)
    assert cls.schema["properties"]["output"]["enum"] == ["no", "yes"]


# ------------------------------------------------------------------------------------------- errors
def test_missing_data_dir_error_names_the_path_the_env_var_and_fetch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("BENCH_DATA_DIR", str(missing))
    with pytest.raises(DataError) as err:
        load_task("multiwoz/train", n_references=1, n_holdout=1)
    msg = str(err.value)
    assert str(missing) in msg and "BENCH_DATA_DIR" in msg and "bench data fetch" in msg


def test_missing_file_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "truthfulqa").mkdir()
    with pytest.raises(DataError) as err:
        load_task("truthfulqa", n_references=1, n_holdout=1, data_dir=tmp_path)
    assert "truthfulqa/TruthfulQA.csv" in str(err.value) and "bench data fetch" in str(err.value)


@needs_data
def test_unknown_task_names_suggest_close_matches() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'multiwoz/train'"):
        load_task("multiwoz/trian", n_references=1, n_holdout=1)
    with pytest.raises(UnknownNameError, match="task244_count_elements_in_set_union"):
        load_task("superni/task244_count_elements_in_set_unoin", n_references=1, n_holdout=1)
    with pytest.raises(UnknownNameError, match="is a family"):
        load_task("superni", n_references=1, n_holdout=1)


# --------------------------------------------------------------------------------------------- demo
def test_demo_task_loads_without_any_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path / "absent"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    spec = load_task("demo/booking", n_references=30, n_holdout=10)
    assert (len(spec.references), len(spec.holdout)) == (30, 10)
    assert spec.schema["properties"]["cabin"]["enum"] == ["economy", "premium_economy", "business", "first"]
    assert spec.schema["properties"]["date"]["format"] == "date"
    assert "demo/booking" in list_tasks()
    validator = Draft202012Validator(spec.schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert not validator.is_valid(dict(spec.references[0], date="2026-02-30"))
