"""The JSON Schema -> GBNF converter accepts only schema-valid, bounded JSON (checked by walking the grammar).

The walker below draws random sentences straight from the grammar tree that is rendered to GBNF, so
every test is a statement about the grammar itself: each sentence must parse strictly and validate
(Draft 2020-12 with the format checker) against the schema it came from.
"""

from __future__ import annotations

import functools
import json
import os
import random
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
    Ref,
    Rep,
    Seq,
    UnsupportedSchema,
    bounded_schema,
    build_grammar,
    int_range,
    schema_to_gbnf,
)

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))
DEMO_SCHEMA = json.loads((Path(__file__).parents[1] / "bench/data/demo/booking.schema.json").read_text())
# characters the walker tries for negated classes: ASCII, accents, CJK, emoji, and JSON's specials
POOL = [chr(c) for c in range(0x20, 0x7F)] + ["é", "ß", "中", "😀", "\n", "\t", "\x00", "\x7f"]


def sample(rules: dict, node, rng: random.Random, depth: int = 0) -> str:
    """One random sentence of the grammar (unbounded repeats draw at most 3 more)."""
    if depth > 60:
        raise RecursionError("grammar too deep for the walker")
    if isinstance(node, Lit):
        return node.text
    if isinstance(node, Ref):
        return sample(rules, rules[node.name], rng, depth + 1)
    if isinstance(node, Seq):
        return "".join(sample(rules, i, rng, depth + 1) for i in node.items)
    if isinstance(node, Alt):
        return sample(rules, rng.choice(node.options), rng, depth + 1)
    if isinstance(node, Rep):
        hi = node.hi if node.hi is not None else node.lo + 3
        k = rng.choice([node.lo, hi, rng.randint(node.lo, hi)])
        return "".join(sample(rules, node.node, rng, depth + 1) for _ in range(k))
    if isinstance(node, Chars):
        if node.negated:
            return rng.choice(_outside(node))
        a, b = rng.choice(node.ranges)
        return chr(rng.randint(a, b))
    raise TypeError(node)


@functools.cache
def _outside(node: Chars) -> list[str]:
    return [c for c in POOL if not any(a <= ord(c) <= b for a, b in node.ranges)]


def sentences(schema: dict, n: int, seed: int = 0, limits: GrammarLimits | None = None) -> list[str]:
    g = build_grammar(schema, limits)
    rng = random.Random(seed)
    return [sample(g.rules, g.rules["root"], rng) for _ in range(n)]


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
    ascii_schema = {**schema, "x-grammar": {"ascii_strings": True}}
    assert max_bytes(build_grammar(ascii_schema)) == len('{"a": "abc", "b": "xy"}')


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
        ({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, "uniqueItems"),
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "not"),
        ({"type": "string", "format": "ipv4"}, "ipv4"),
        ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
        ({"type": "integer", "multipleOf": 3}, "multipleOf"),
        ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties"),
    ],
)
def test_unsupported_keywords_are_named_not_ignored(schema, keyword):
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
