"""Keywords that cannot constrain an instance under Draft 2020-12 are ignored; the others are enforced.

Draft 2020-12 Core section 6.5: an implementation SHOULD treat keywords it does not support as annotations,
and the judge (jsonschema's Draft 2020-12 validator) does. So vendor extensions (Kubernetes `_format`,
`x-kubernetes-*`, Snowplow `self`), draft-04 `id` and typos cost no soundness when ignored, while every keyword
the judge applies stays enforced or refused, and `dependencies` (draft-04 to 07) is enforced in its old meaning.
Acceptance is decided by llama.cpp's own grammar engine; verdicts by the judge.
"""

from __future__ import annotations

import functools
import json
import os
import random
import sys
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from metrics.structure import validator_for
from systems.backends.grammar import UnsupportedSchema, build_grammar, schema_to_gbnf
from systems.backends.grammar.compiler import HANDLED, REFUSED, is_annotation
from systems.backends.grammar.sample import sentences

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))


@functools.cache
def _engine():
    pytest.importorskip("llama_cpp")
    from systems.backends.grammar.engine import GrammarEngine

    return GrammarEngine()


def _judge(schema: dict, text: str) -> bool:
    return validator_for(schema).is_valid(json.loads(text))


def test_no_keyword_the_judge_applies_is_an_annotation():
    applied = set(Draft202012Validator.VALIDATORS) | {"then", "else", "minContains", "maxContains"}
    assert not [k for k in applied if is_annotation(k)]
    assert applied <= HANDLED | set(REFUSED)  # each is compiled or refused by name
    for k in ("self", "_format", "x-kubernetes-group-version-kind", "id", "minlength", "nullable"):
        assert is_annotation(k), k
    assert not is_annotation("dependencies") and not is_annotation("$recursiveRef")


@pytest.mark.parametrize(
    "annotated",
    [
        {"self": {"vendor": "com.acme", "name": "e", "format": "jsonschema", "version": "1-0-0"}},
        {"_format": "int-or-string", "x-kubernetes-int-or-string": True, "_uniqueItems": True},
        {"id": "http://example.com/root.json", "minlength": 40, "preferredOrder": ["a"]},
    ],
)
def test_annotations_leave_the_grammar_unchanged(annotated):
    base = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 4}}, "required": ["a"]}
    with_notes = {**annotated, **base, "properties": {"a": {**base["properties"]["a"], **annotated}}}
    assert schema_to_gbnf(with_notes) == schema_to_gbnf(base)


def test_an_annotation_typo_is_ignored_like_the_judge_ignores_it():
    schema = {"type": "string", "minlength": 3, "maxLength": 5}  # `minlength`: not a keyword
    ok, short, long_ = _engine().accepts(schema_to_gbnf(schema), ['"abcd"', '"a"', '"abcdef"'])
    assert ok and short and not long_
    assert _judge(schema, '"a"')  # the judge agrees that "a" is valid


DEPS = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
    "required": ["a"],
    "dependencies": {"a": ["b"], "c": {"required": ["a"]}},
}
DEP_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
    "required": ["a"],
    "dependencies": {"a": {"properties": {"b": {"const": "y"}}, "required": ["b"]}},
}


@pytest.mark.parametrize(
    "schema,texts,expected",
    [
        # the key list: `a` requires `b`; the optional `c` has a dependent schema, so it is left out
        (DEPS, ['{"a": 1}', '{"a": 1, "b": "x"}', '{"a": 1, "b": "x", "c": true}'], [False, True, False]),
        # the schema form on a required key: its subschema holds
        (DEP_SCHEMA, ['{"a": 1}', '{"a": 1, "b": "x"}', '{"a": 1, "b": "y"}'], [False, False, True]),
    ],
)
def test_dependencies_are_enforced_in_their_draft_07_meaning(schema, texts, expected):
    assert _engine().accepts(schema_to_gbnf(schema), texts) == expected
    for text in sentences(build_grammar(schema), 30):
        assert _judge(schema, text)  # a subset of the 2020-12 language, where `dependencies` is inert
        record = json.loads(text)
        assert "b" in record and "c" not in record


def test_a_dependent_schema_beside_unevaluated_properties_is_refused():
    schema = {**DEP_SCHEMA, "unevaluatedProperties": False}
    with pytest.raises(UnsupportedSchema, match="dependencies at #/dependencies/a"):
        schema_to_gbnf(schema)


def test_anchors_inside_annotations_are_not_references_targets():
    # the judge's reference resolution does not look inside `x-defs` (not a schema keyword), so neither
    # does the compiler: resolving there would accept texts the judge cannot even validate
    schema = {"$ref": "#s", "x-defs": {"s": {"$anchor": "s", "type": "string"}}}
    with pytest.raises(UnsupportedSchema, match="no such anchor"):
        schema_to_gbnf(schema)
    found = {"$ref": "#s", "$defs": {"s": {"$anchor": "s", "type": "string"}}}
    assert _engine().accepts(schema_to_gbnf(found), ['"x"', "1"]) == [True, False]


def test_a_reference_beside_a_nested_draft_04_id_is_refused():
    schema = {"definitions": {"s": {"id": "#str", "type": "string"}}, "$ref": "#/definitions/s"}
    with pytest.raises(UnsupportedSchema, match="id at #/definitions/s"):
        schema_to_gbnf(schema)


@pytest.mark.parametrize("split", ["Snowplow", "Kubernetes"])
def test_real_schemas_with_vendor_annotations_compile_soundly(split):
    """Snowplow and Kubernetes schemas (the splits that carry `self`, `_format`, `x-kubernetes-*`): most
    compile now, and random sentences of every compiled grammar validate against the original schema."""
    from bench.tasks.loading import load_task
    from systems.ar_grammar import ARGrammarSystem
    from systems.item_grammar import compile_item

    if not (DATA_DIR / "jsonschemabench" / split).is_dir():
        pytest.skip("no JSONSchemaBench data")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    spec = load_task(f"jsonschemabench/{split}", n_references=None, n_holdout=None, options={"limit": 30})
    system = ARGrammarSystem({"temperature": 0.0, "k_shots": 0, "max_tokens": 192})
    compiled = 0
    rng = random.Random(0)
    for i in range(len(spec.items)):
        item = spec.for_sample(i)
        outcome = compile_item(system, item, None, "ours", llama=False)
        if outcome.params is None:
            continue
        compiled += 1
        grammar = build_grammar(outcome.params.json_schema)
        for text in sentences(grammar, 3, seed=rng.randrange(1 << 30)):
            assert _judge(item.schema, text), (item.id, text[:200])
    assert compiled >= 28  # before: 0 of 30 (Snowplow), 15 of 30 (Kubernetes)
