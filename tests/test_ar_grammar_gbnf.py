"""The JSON Schema -> GBNF converter accepts only schema-valid, bounded JSON (checked by walking the grammar).

The walker below draws random sentences straight from the grammar tree that is rendered to GBNF, so
every test is a statement about the grammar itself: each sentence must parse strictly and validate
(Draft 2020-12 with the format checker) against the schema it came from.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import pytest

from bench.tasks.schema import validator_for
from metrics.extract import parse_strict
from systems.backends.grammar import (
    Alt,
    Chars,
    GrammarLimits,
    Lit,
    Rep,
    Seq,
    UnsupportedSchema,
    bounded_schema,
    build_grammar,
    int_range,
    schema_to_gbnf,
)
from systems.backends.grammar.sample import sentences as draw_sentences

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))
DEMO_SCHEMA = json.loads((Path(__file__).parents[1] / "bench/data/demo/booking.schema.json").read_text())


def sentences(schema: dict, n: int, seed: int = 0, limits: GrammarLimits | None = None) -> list[str]:
    return draw_sentences(build_grammar(schema, limits), n, seed)


def assert_all_valid(schema: dict, n: int = 150, limits: GrammarLimits | None = None) -> list:
    validator = validator_for(schema)
    records = []
    for text in sentences(schema, n, limits=limits):
        value = parse_strict(text)
        errors = [e.message for e in validator.iter_errors(value)]
        assert not errors, f"grammar sentence {text[:300]!r} violates the schema: {errors[:3]}"
        records.append(value)
    return records


def task_schemas() -> list[tuple[str, dict]]:
    if not DATA_DIR.is_dir():
        pytest.skip(f"data dir {DATA_DIR} absent")
    return _task_schemas()


@functools.cache
def _task_schemas() -> list[tuple[str, dict]]:
    from bench.tasks.loading import list_tasks, load_task

    return [(n, load_task(n, n_references=None, n_holdout=None).schema) for n in list_tasks(DATA_DIR)]


def test_every_sentence_of_every_task_grammar_is_schema_valid():
    schemas = task_schemas()
    families = {name.split("/")[0] for name, _ in schemas}
    assert {"demo", "multiwoz", "truthfulqa", "self_instruct", "superni"} <= families
    for name, schema in schemas:
        records = assert_all_valid(schema, n=25)
        assert records, name


def test_bounded_schema_is_a_subset_whose_sentences_fit_the_caps():
    limits = GrammarLimits(max_string_chars=12, max_items=3)
    for name, schema in task_schemas()[:8]:
        bounded = bounded_schema(schema, limits)
        validator_for(bounded)  # still a valid Draft 2020-12 schema
        original = validator_for(schema)
        for record in assert_all_valid(bounded, n=40, limits=limits):
            assert original.is_valid(record), name
            for path, value in _leaves(record):
                if isinstance(value, str) and "enum" not in json.dumps(_sub(schema, path)):
                    assert len(value) <= 12, (name, path, value)


def _leaves(value, path=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}")
    elif isinstance(value, list):
        assert len(value) <= 3 or path == ""
        for v in value:
            yield from _leaves(v, path + "[]")
    else:
        yield path, value


def _sub(schema, path):  # the (sub)schema at a leaf path, good enough to tell enums from free text
    node = schema
    for part in [p for p in re.split(r"\.|(?=\[\])", path) if p]:
        if part == "[]":
            node = node.get("items", {})
        else:
            node = (node.get("properties") or {}).get(part, {})
    return node


def test_ascii_mode_sentences_are_valid_ascii_and_within_max_bytes():
    from systems.backends.grammar import max_bytes

    limits = GrammarLimits(max_string_chars=20, max_items=3, ascii_strings=True)
    for name, schema in [("demo", DEMO_SCHEMA), *task_schemas()[:6]]:
        bounded = {**bounded_schema(schema, limits), "x-grammar": {"ascii_strings": True}}
        bound = max_bytes(build_grammar(bounded))
        assert bound < 3000, name
        for text in sentences(bounded, 40):
            assert text.isascii() and len(text.encode()) <= bound, (name, text)
            assert validator_for(schema).is_valid(parse_strict(text)), (name, text)


def test_max_bytes_is_the_longest_sentence():
    from systems.backends.grammar import max_bytes

    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "maxLength": 3}, "b": {"enum": ["xy", "é"]}},
        "required": ["a", "b"],
    }
    assert max_bytes(build_grammar(schema)) == len('{"a": "' + "\\u0041" * 3 + '", "b": "xy"}')
    ascii_schema = {**schema, "x-grammar": {"ascii_strings": True}}  # short escapes, é as \u00e9
    assert max_bytes(build_grammar(ascii_schema)) == len('{"a": "' + '\\"' * 3 + '", "b": "\\u00e9"}')
    byte_schema = {**schema, "x-grammar": {"byte_strings": True}}  # maxLength counts bytes
    assert max_bytes(build_grammar(byte_schema)) == len('{"a": "abc", "b": "xy"}')


def test_demo_schema_formats_patterns_and_bounds():
    records = assert_all_valid(DEMO_SCHEMA, n=100)
    assert all(re.fullmatch(r"[A-Z0-9]{2}[0-9]{1,4}", r["flight_number"]) for r in records)
    assert all(1 <= r["passengers"] <= 9 for r in records)
    assert all(r["price"] > 0 for r in records)


EDGE_SCHEMAS = [
    {
        "type": "object",
        "properties": {"a": {"type": "integer", "minimum": -40, "maximum": 7}},
        "required": ["a"],
    },
    {
        "type": "object",
        "properties": {"x": {"type": "number", "minimum": 2.5, "maximum": 10}},
        "required": ["x"],
    },
    {"type": "object", "properties": {"x": {"type": "number", "exclusiveMaximum": 3}}, "required": ["x"]},
    {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
        "minProperties": 1,
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "o": {"type": "object", "properties": {"p": {"type": "boolean"}, "q": {"type": "null"}}}
        },
    },
    {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}], "items": False, "minItems": 2},
    {
        "type": "array",
        "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        "minItems": 2,
        "maxItems": 5,
    },
    {
        "type": "object",
        "properties": {"v": {"type": ["string", "null"]}, "w": {"const": {"k": [1, "two"]}}},
        "required": ["v", "w"],
    },
    {
        "type": "object",
        "properties": {
            "d": {"type": "string", "format": "date-time"},
            "u": {"type": "string", "format": "uuid"},
            "e": {"type": "string", "format": "email"},
            "t": {"type": "string", "format": "time"},
        },
        "required": ["d", "u", "e", "t"],
    },
    {
        "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/pt"}, "b": {"type": "array", "items": {"$ref": "#/$defs/pt"}}},
        "required": ["a"],
    },
    {
        "type": "object",
        "properties": {
            "s": {"type": "string", "pattern": r"^(ab|c\d)+[^a-z\"]{0,3}\.x?$"},
            "q": {"type": "string", "pattern": r'say "hi"\\'},
        },
        "required": ["s", "q"],
    },
    {
        "type": "object",
        "properties": {"n": {"oneOf": [{"type": "integer"}, {"type": "string", "maxLength": 4}]}},
        "required": ["n"],
    },
    {
        "type": "object",
        "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 5}},
        "required": ["a"],
        "allOf": [{"properties": {"b": {"type": "integer"}}, "required": ["b"]}],
    },
]


@pytest.mark.parametrize("schema", EDGE_SCHEMAS, ids=range(len(EDGE_SCHEMAS)))
def test_edge_schemas_only_yield_valid_json(schema):
    assert_all_valid(schema, n=100)


@pytest.mark.parametrize(
    "lo,hi",
    [
        (0, 0),
        (0, 9),
        (1, 9),
        (-9, -1),
        (-3, 3),
        (7, 130),
        (19, 1000),
        (-120, -17),
        (0, 99),
        (99, 101),
        (-1000, 1001),
    ],
)
def test_int_range_spells_exactly_the_integers_in_range(lo, hi):
    assert _language(int_range(lo, hi)) == {str(v) for v in range(lo, hi + 1)}


def _language(node) -> set[str]:
    """Every sentence of a finite, reference-free node (exhaustive; for small grammars only)."""
    if isinstance(node, Lit):
        return {node.text}
    if isinstance(node, Chars):
        assert not node.negated
        return {chr(c) for a, b in node.ranges for c in range(a, b + 1)}
    if isinstance(node, Seq):
        out = {""}
        for item in node.items:
            out = {a + b for a in out for b in _language(item)}
        return out
    if isinstance(node, Alt):
        return set().union(*(_language(o) for o in node.options))
    if isinstance(node, Rep):
        inner, out, layer = _language(node.node), set(), {""}
        for k in range(node.hi + 1):
            if k >= node.lo:
                out |= layer
            layer = {a + b for a in layer for b in inner}
        return out
    raise TypeError(node)


@pytest.mark.parametrize(
    "schema,keyword",
    [
        ({"type": "object", "properties": {"a": {"not": {"minLength": 2}}}}, "#/properties/a/not"),
        ({"type": "string", "format": "ipv4"}, "ipv4"),
        ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
        ({"type": "number", "multipleOf": 0.5}, "multipleOf at #/multipleOf"),
        ({"type": "integer", "multipleOf": 3}, "multipleOf"),  # 10^12 multiples: bound it first
        ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf at #/oneOf"),
        ({"oneOf": [{"minLength": 1}, {"maxLength": 3}]}, "oneOf"),
        ({"$dynamicRef": "#x"}, "$dynamicRef at #/$dynamicRef"),
        ({"$recursiveRef": "#"}, "$recursiveRef at #/$recursiveRef"),
        ({"type": "string", "pattern": "a+", "maxLength": 3}, "#/pattern"),
        ({"items": [{"type": "string"}]}, "items at #/items"),
        ({"properties": {"a": {"extends": {"type": "string"}}}}, "extends at #/properties/a/extends"),
        ({"$ref": "other.json#/x"}, "$ref"),
        ({"enum": []}, "no JSON value"),
    ],
)
def test_unsupported_keywords_are_named_with_their_pointer_not_ignored(schema, keyword):
    with pytest.raises(UnsupportedSchema, match=re.escape(keyword)):
        schema_to_gbnf(schema)


def test_llama_cpp_parses_every_task_grammar():
    """llama.cpp's own grammar parser (via a grammar sampler on SmolLM2's vocabulary) accepts each GBNF.

    `LlamaGrammar.from_string` does not parse, so the check builds the sampler, which returns NULL on a
    parse error; a deliberately broken grammar shows the check can fail.
    """
    llama_cpp = pytest.importorskip("llama_cpp")
    from systems.backends.llama_cpp import resolve_gguf

    llm = llama_cpp.Llama(
        model_path=str(resolve_gguf("smollm2-135m-instruct")), vocab_only=True, verbose=False
    )
    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)

    def parses(gbnf: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    assert not parses('root ::= "a" \\- [')
    for name, schema in [("demo", DEMO_SCHEMA), *task_schemas()] + [
        (str(i), s) for i, s in enumerate(EDGE_SCHEMAS)
    ]:
        assert parses(schema_to_gbnf(schema)), name


@functools.cache
def _engine():
    pytest.importorskip("llama_cpp")
    from systems.backends.grammar.engine import GrammarEngine

    return GrammarEngine()


def _accepts(schema: dict, texts: list[str], limits: GrammarLimits | None = None) -> list[bool]:
    return _engine().accepts(schema_to_gbnf(schema, limits), texts)


DEFS = {"$defs": {"s": {"type": "string"}}}
# The issue's causes 1-6, each with texts llama.cpp's engine must reject (unsound before) and accept.
CAUSES = [
    ({"minLength": 2}, ['"f"'], ['"fo"', "3", "null", "{}"]),  # no type: string keywords still hold
    ({"format": "date"}, ['"2020-02-30"', '"x"'], ['"2020-01-31"', "true"]),
    ({"$ref": "#/$defs/s", "maxLength": 2, **DEFS}, ['"abcd"', "1"], ['"ab"']),  # $ref siblings
    (
        {
            "type": "object",
            "properties": {"a": {"type": "number", "minimum": 0}},
            "required": ["a"],
            "allOf": [{"properties": {"a": {"maximum": 10}}}],
        },
        ['{"a": -5}', '{"a": 10.5}'],
        ['{"a": 0}', '{"a": 10}', '{"a": 2.75}'],
    ),
    (  # unevaluatedProperties sees what its own subschemas evaluate, not its siblings'
        {
            "type": "object",
            "allOf": [{"properties": {"foo": {"type": "string"}}, "unevaluatedProperties": False}],
            "properties": {"bar": {"type": "string"}},
        },
        ['{"bar": "x"}', '{"foo": "x", "bar": "y"}'],
        ['{"foo": "x"}', "{}"],
    ),
    (
        {"type": "object", "allOf": [{"properties": {"foo": {}}}], "unevaluatedProperties": False},
        [],
        ['{"foo": 1}'],
    ),
    ({"type": "string", "enum": ["a", 1]}, ["1"], ['"a"']),  # enum with the other keywords
    ({"type": "string", "pattern": r"^\S$"}, ['"\u00a0"', '"\u3000"', '" "'], ['"x"', '"é"']),
    ({"type": "string", "pattern": r"^\W\D$"}, ['"a1"', '"_\u0663"'], ['"!x"']),
    ({"type": "string", "pattern": r"^\x41\u00e9$"}, ['"x41u00e9"'], ['"Aé"']),
    ({"type": "string", "pattern": "^[^\\d]$"}, ['"\u0663"', '"5"'], ['"a"']),  # ٣ is a digit to Python
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, ["null"], ["1", '"a"']),
    (  # oneOf with a discriminating const property is exclusive
        {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {"k": {"const": "a"}, "v": {"type": "integer"}},
                    "required": ["k"],
                },
                {"type": "object", "properties": {"k": {"const": "b"}}, "required": ["k"]},
            ]
        },
        ['{"k": "c"}', '{"k": "a", "v": "x"}'],
        ['{"k": "a", "v": 3}', '{"k": "b"}'],
    ),
    ({"$defs": {"x": {"$anchor": "items", "type": "integer"}}, "$ref": "#items"}, ['"a"'], ["4"]),  # 7b
    ({"type": "number", "exclusiveMinimum": 0.1, "maximum": 0.3}, ["0.1", "0.30000001"], ["0.2", "0.3"]),
    ({"type": "object", "minProperties": 1, "properties": {"a": {}, "b": {}}}, ["{}"], ['{"b": 1}']),
    (
        {"type": "object", "maxProperties": 1, "properties": {"a": {}, "b": {}}},
        ['{"a": 1, "b": 2}'],
        ['{"a": 1}'],
    ),
    (
        {"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
        ['{"a": 1}'],
        ['{"b": 1}', "{}"],
    ),
    (
        {"type": "array", "contains": {"type": "integer"}, "items": {"type": ["integer", "string"]}},
        ["[]"],
        ["[1]"],
    ),
    ({"type": "array", "uniqueItems": True}, ["[1, 1]"], ["[1]", "[]"]),
    ({"type": "string", "maxLength": 3}, ['"😀😀😀😀"'], ['"😀😀😀"']),
]


@pytest.mark.parametrize("schema,reject,accept", CAUSES, ids=range(len(CAUSES)))
def test_llama_cpp_rejects_what_the_schema_rejects(schema, reject, accept):
    from jsonschema import Draft202012Validator

    judge = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    for text in reject:
        assert not judge.is_valid(json.loads(text)), text  # the example really is invalid
    for text in accept:
        assert judge.is_valid(json.loads(text)), text
    limits = GrammarLimits(nonempty_required_strings=False)
    assert _accepts(schema, reject + accept, limits) == [False] * len(reject) + [True] * len(accept)
    assert_all_valid(schema, n=60, limits=limits)


def test_empty_enum_and_false_schemas_are_refused_not_rendered_empty():
    for schema in (
        {"enum": []},
        False,
        {"allOf": [True, False]},
        {"type": "integer", "minimum": 3, "maximum": 2},
    ):
        with pytest.raises(UnsupportedSchema, match="no JSON value"):
            schema_to_gbnf(schema)


def test_an_in_place_reference_cycle_is_refused():
    with pytest.raises(UnsupportedSchema, match="cycle"):
        schema_to_gbnf(
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
        )


def test_recursive_schemas_compile_through_named_rules():
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v"],
            }
        },
        "$ref": "#/$defs/node",
    }
    assert _accepts(tree, ['{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}', '{"kids": []}']) == [
        True,
        False,
    ]


def _decimal_language(lo, hi, frac):
    """Brute force: every spelling `I` / `I.F` (|I| < 12, F up to `frac` digits) with value in range."""
    from fractions import Fraction

    out = set()
    for i in range(12):
        spellings = [(str(i), Fraction(i))]
        for k in range(1, frac + 1):
            for f in range(10**k):
                spellings.append((f"{i}.{str(f).zfill(k)}", i + Fraction(f, 10**k)))
        for text, v in spellings:
            for sign, x in (("", v), ("-", -v)):
                if sign and v == 0 and lo.value >= 0:
                    continue  # "-0" is a valid spelling the grammar leaves out when no negatives exist
                if lo.below(x) and hi.above(x):
                    out.add(sign + text)
    return out


@pytest.mark.parametrize(
    "lo,lo_x,hi,hi_x",
    [
        ("0", False, "3", False),
        ("-1.5", False, "2.25", True),
        ("0.35", True, "1", False),
        ("-3", True, "-0.5", False),
        ("2.5", False, "2.75", False),
        ("-0.05", False, "0.05", True),
    ],
)
def test_decimal_range_spells_exactly_the_values_in_range(lo, lo_x, hi, hi_x):
    from fractions import Fraction

    from systems.backends.grammar.nodes import Bound, decimal_range

    low, high = Bound(Fraction(lo), lo_x), Bound(Fraction(hi), hi_x)
    got = _language(decimal_range(low, high, 2))
    assert got == _decimal_language(low, high, 2)


def test_negated_classes_exclude_every_unicode_member_and_positive_ones_stay_ascii():
    from systems.backends.grammar.regex import class_escape

    for letter in "dws":
        rx = re.compile(f"\\{letter}")
        outside = class_escape(letter.upper(), positive=True)
        inside = class_escape(letter, positive=True)
        assert all(b < 0x80 for _, b in inside)
        members = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and rx.match(chr(c))]
        k = 0
        for c in members:  # two-pointer sweep: no member of \d / \w / \s falls in \D / \W / \S
            while k < len(outside) and outside[k][1] < c:
                k += 1
            assert not (k < len(outside) and outside[k][0] <= c <= outside[k][1]), (letter, hex(c))
