"""`ar-grammar` with the embedded model (SmolLM2 via llama.cpp) yields only schema-valid records, on every
task family, through the real runner and metrics."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.errors import BenchError
from bench.types import TaskSpec
from systems.ar_grammar import ARGrammarSystem

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))

SUITE = """\
name: ar-grammar-families
profile: embedded
seeds: [0]
samples: 1
tasks:
  - {name: demo/booking, n_references: 12, n_holdout: 8}
  - {name: multiwoz/hotel, n_references: 12, n_holdout: 8}
  - {name: truthfulqa, n_references: 12, n_holdout: 8}
  - {name: self_instruct, n_references: 12, n_holdout: 8}
  - {name: superni/task1192_food_flavor_profile, n_references: 10, n_holdout: 10}
systems:
  ar-grammar: {type: ar-grammar, params: {k_shots: 1, max_string_chars: 80, max_items: 3}}
metrics: [parse_rate, schema_valid, tsr]
expect:
  - ar-grammar.schema_valid == 1.0
"""


def spec_with(schema: dict) -> TaskSpec:
    return TaskSpec("t", "Write a record.", schema, references=({"a": "x"},), holdout=())


def test_requests_carry_the_bounded_schema_and_the_presets_decoding():
    system = ARGrammarSystem({"max_string_chars": 9, "max_items": 2})
    spec = spec_with(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "string"}}},
            "required": ["a"],
        }
    )
    [req], _ = system.build_requests(spec, 1, 0, {"temperature": 0.2, "top_k": 40})
    schema = req.params.json_schema
    assert schema["properties"]["a"] == {"type": "string", "maxLength": 9, "minLength": 1}
    assert schema["properties"]["b"]["maxItems"] == 2
    assert schema["x-grammar"]["byte_strings"] is True  # maxLength counts bytes: max_bytes is exact
    # the longest record: {"a": 9 chars, "b": [2 x 9 chars]} in compact JSON with optional spaces
    longest = len('{"a": "123456789", "b": ["123456789", "123456789"]}')
    assert (req.params.temperature, req.params.top_k, req.params.max_tokens) == (0.2, 40, longest + 1)


def test_string_caps_shrink_until_every_task_record_fits_the_budget():
    if not DATA_DIR.is_dir():
        pytest.skip(f"data dir {DATA_DIR} absent")
    from bench.tasks.loading import list_tasks, load_task
    from systems.backends.grammar import build_grammar, max_bytes

    system = ARGrammarSystem({"max_tokens": 1024})
    for name in list_tasks(DATA_DIR):
        spec = load_task(name, n_references=None, n_holdout=None)
        if spec.items:  # per-item tasks (BFCL, JSONSchemaBench) compile one grammar per item: own tests
            continue
        params = system.sampling(spec)
        assert max_bytes(build_grammar(params.json_schema)) + 1 == params.max_tokens <= 1024, name
        kept, total = system.plan(spec).references_fit
        assert kept >= total // 4, name  # caps from the references: most real records still fit


def test_an_unsupported_schema_fails_the_cell_with_the_keyword_named():
    system = ARGrammarSystem({})
    spec = spec_with({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.5}}})
    with pytest.raises(BenchError, match="multipleOf"):
        system.generate(spec, 1, 0, ctx=None)  # fails before any backend is asked for


@pytest.mark.slow
def test_schema_valid_is_one_on_every_task_family(tmp_path, monkeypatch):
    if not DATA_DIR.is_dir():
        pytest.skip(f"data dir {DATA_DIR} absent")
    pytest.importorskip("llama_cpp")
    from bench.runner import RunOptions, run_suite
    from bench.store import RunStore
    from systems.backends import llama_cpp as llama_backend
    from systems.backends.grammar import llama_grammar

    if "from_json_schema" in Path(llama_backend.__file__).read_text():
        # until llama_cpp.py compiles schemas with our converter (same language, ~5x faster sampling)
        monkeypatch.setattr(
            llama_backend.LlamaCppBackend, "_grammar", lambda self, schema: llama_grammar(schema)
        )
    path = tmp_path / "suite.yaml"
    path.write_text(SUITE)
    result = run_suite(
        path, None, RunOptions(out=str(tmp_path / "run"), executor="inline", use_cache=False, progress=False)
    )
    assert not result.failed_cells, [(o.key, o.error) for o in result.failed_cells]
    cells = list(RunStore(result.run_dir).iter_cells())
    assert {c.key.task.split("/")[0] for c in cells} == {
        "demo",
        "multiwoz",
        "truthfulqa",
        "self_instruct",
        "superni",
    }
    for cell in cells:
        assert cell.metrics["schema_valid"] == 1.0, (cell.key, cell.metrics)
        assert cell.metrics["parse_rate"] == 1.0
    assert result.ok
