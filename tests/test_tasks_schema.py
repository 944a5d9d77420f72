"""Schema derivation rules on small hand-made records, plus the demo files' reproducibility."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from bench.errors import DataError
from bench.tasks import demo
from bench.tasks.schema import ENUM_MAX_VALUES, ENUM_MIN_COUNT_PER_VALUE, derive_schema, is_categorical
from bench.tasks.split import split_sizes


def test_types_required_and_closed_objects() -> None:
    records = [
        {"name": "a", "n": 1, "x": 1.5, "ok": True, "tags": ["t"]},
        {"name": "b", "n": 2, "x": 2, "ok": False, "tags": ["u", "v"], "extra": None},
    ]
    s = derive_schema(records, title="t")
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    p = s["properties"]
    assert p["n"] == {"type": "integer"}
    assert p["x"] == {"type": "number"}  # int and float mixed
    assert p["ok"] == {"type": "boolean"}  # bool is not an integer
    assert p["extra"] == {"type": "null"}
    assert p["tags"] == {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
    assert s["required"] == ["name", "n", "x", "ok", "tags"] and s["additionalProperties"] is False
    v = Draft202012Validator(s)
    assert all(v.is_valid(r) for r in records)
    assert not v.is_valid({**records[0], "surprise": 1})
    assert not v.is_valid({k: x for k, x in records[0].items() if k != "name"})


def test_mixed_kinds_give_anyof_and_fixed_length_arrays_get_max_items() -> None:
    s = derive_schema([{"v": "a", "pair": [1.0, 2.0]}, {"v": 3, "pair": [3.0, 4.5]}], title="t")
    assert s["properties"]["v"] == {"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1}]}
    assert s["properties"]["pair"]["minItems"] == s["properties"]["pair"]["maxItems"] == 2


def test_enum_threshold_boundary() -> None:
    k = 3
    at = [{"c": f"v{i % k}"} for i in range(ENUM_MIN_COUNT_PER_VALUE * k)]
    below = at[:-1]
    assert derive_schema(at, title="t")["properties"]["c"]["enum"] == ["v0", "v1", "v2"]
    assert "enum" not in derive_schema(below, title="t")["properties"]["c"]
    assert is_categorical(ENUM_MIN_COUNT_PER_VALUE * ENUM_MAX_VALUES, ENUM_MAX_VALUES)
    assert not is_categorical(10_000, ENUM_MAX_VALUES + 1)


def test_declared_categories_win_and_free_text_never_gets_an_enum() -> None:
    records = [{"area": "north", "note": "same"} for _ in range(50)] + [{"area": "nowhere", "note": "same"}]
    s = derive_schema(records, title="t", categorical={"area": ["north", "south"]}, free_text={"note"})
    assert s["properties"]["area"]["enum"] == [
        "north",
        "south",
        "nowhere",
    ]  # observed extras keep records valid
    assert "enum" not in s["properties"]["note"]


def test_nested_objects_without_common_keys_need_at_least_one_key() -> None:
    s = derive_schema([{"price": {"single": "1"}}, {"price": {"double": "2"}}], title="t")
    price = s["properties"]["price"]
    assert "required" not in price and price["minProperties"] == 1
    assert not Draft202012Validator(s).is_valid({"price": {}})


def test_bad_inputs_are_data_errors() -> None:
    with pytest.raises(DataError):
        derive_schema([], title="t")
    with pytest.raises(DataError):
        derive_schema([["not", "an", "object"]], title="t")  # type: ignore[list-item]


def test_split_sizes_rules() -> None:
    assert split_sizes(10, None, None, "t") == (8, 2)
    assert split_sizes(1, None, None, "t") == (1, 0)
    assert split_sizes(10, 3, None, "t") == (3, 7)
    assert split_sizes(10, None, 4, "t") == (6, 4)
    with pytest.raises(DataError):
        split_sizes(10, -1, 2, "t")


def test_shipped_demo_files_are_exactly_what_the_generator_writes() -> None:
    from importlib import resources

    for name, data in demo.render_files().items():
        assert resources.files("bench").joinpath("data", "demo", name).read_bytes() == data
    records = demo.booking_records()
    assert len(records) == demo.N_BOOKINGS >= 40
    v = Draft202012Validator(demo.BOOKING_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER)
    assert all(v.is_valid(r) for r in records)
    assert all(r["departure_city"] != r["arrival_city"] for r in records)
    assert demo.booking_records(seed=1) != records
