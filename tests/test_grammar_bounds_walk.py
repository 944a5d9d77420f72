"""The cap walkers of systems/backends/grammar/bounds.py share one descent (`value_children`)."""

from __future__ import annotations

from systems.backends.grammar.bounds import record_sizes, reference_caps, value_children

SCHEMA = {
    "type": "object",
    "properties": {
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "items": {"type": "string"},
        },
        "tags": {"type": "array", "items": {"type": "string"}},
        "any": {"type": "array", "items": True},
    },
}
RECORDS = [
    {"pair": ["ab", 3, "xyz", "é"], "tags": ["a", ""], "any": ["free"], "extra": "not capped"},
    {"pair": ["abcd", 12345], "tags": []},
]


def test_children_follow_prefix_items_then_items_then_properties():
    pair = SCHEMA["properties"]["pair"]
    kids = list(value_children(pair, "#/properties/pair", ["ab", 3, "xyz"]))
    assert [p for _, p, _ in kids] == [
        "#/properties/pair/prefixItems/0",
        "#/properties/pair/prefixItems/1",
        "#/properties/pair/items",
    ]
    assert list(value_children(SCHEMA["properties"]["any"], "#/a", ["x"])) == []  # `items: true`
    assert [p for _, p, _ in value_children(SCHEMA, "#", RECORDS[0])] == [
        "#/properties/pair",
        "#/properties/tags",
        "#/properties/any",
    ]  # `extra` has no subschema here


def test_both_walkers_see_the_same_locations_and_sizes():
    caps = reference_caps(SCHEMA, RECORDS)
    # by hand: strings in bytes without quotes ("é" is 2 bytes), arrays by items and text between brackets
    assert caps.fields["#/properties/pair/prefixItems/0"].lengths == [2, 4]
    assert caps.fields["#/properties/pair/items"].lengths == [3, 2]
    assert caps.fields["#/properties/tags"].counts == [2, 0] and caps.fields["#/properties/tags/items"].empty
    assert caps.int_digits == 5
    for record in RECORDS:
        sizes = record_sizes(SCHEMA, record)
        for (ptr, kind), v in sizes.items():
            f = caps.fields[ptr]
            seen = {"maxLength": f.lengths, "maxItems": f.counts, "maxBytes": f.texts}[kind]
            assert v in seen or v == max(seen)  # a record's largest value at a location was seen there
    assert record_sizes(SCHEMA, RECORDS[0])[("#/properties/pair", "maxBytes")] == len(
        '"ab", 3, "xyz", "é"'.encode()
    )
