"""`ast_accuracy` agrees with bfcl-eval's AST checker on outputs the real SmolLM2-135M (llama.cpp, the
embedded profile's model) writes for BFCL questions, unconstrained (`ar`) and grammar-constrained
(`ar-grammar`, the grammar built from the item's function docs). Whatever the model writes is
classified; a decodable turn is checked by both checkers and they must agree on every sample."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from bench.tasks.bfcl import BFCL_FAMILY
from bench.types import Sample, TaskSpec
from metrics.registry import TOOLCALL_METRICS
from metrics.scoring import score_cell
from metrics.toolcalls import FAILURE_CLASSES, check_calls, decode_calls
from tests.bfcl_reference import bfcl_checker

pytest.importorskip("llama_cpp")
CHECK = bfcl_checker()
DATA = Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent"))
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHECK is None or not (DATA / "bfcl").is_dir(), reason="needs bfcl-eval and data"),
]
PER_CATEGORY = {"simple_python": 2, "multiple": 1, "parallel": 1, "parallel_multiple": 1, "irrelevance": 1}


def _spec() -> TaskSpec:
    items = []
    for category, n in PER_CATEGORY.items():
        items += list(BFCL_FAMILY.read(category, DATA, {}).items[:n])
    return TaskSpec(
        name="bfcl/mixed", instruction="", schema={}, references=(), holdout=(), items=tuple(items)
    )


def _generate(system, spec: TaskSpec) -> list[Sample]:
    from systems.backends.llama_cpp import LlamaCppBackend

    backend = LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct", "params": {"n_threads": 1}})
    requests, _ = system.build_requests(spec, len(spec.items), seed=7)
    completions = backend.generate(requests)
    return [Sample(i, c.text, finish_reason=c.finish_reason) for i, c in enumerate(completions)]


def test_checkers_agree_on_smollm2_outputs():
    from systems.ar import ARSystem
    from systems.ar_grammar import ARGrammarSystem

    spec = _spec()
    decoded = 0
    for system in (
        ARSystem({"k_shots": 0, "max_tokens": 96, "temperature": 0.7}),
        ARGrammarSystem({"k_shots": 0, "max_tokens": 160, "temperature": 0.7}),
    ):
        samples = _generate(system, spec)
        score = score_cell(samples, spec, TOOLCALL_METRICS)
        for sample, row in zip(samples, score.rows, strict=True):
            item = spec.items[sample.index]
            assert row["item_id"] == item.id
            assert row["failure"] is None or row["failure"] in FAILURE_CLASSES
            calls = decode_calls(row["record"])
            category = item.meta["category"]
            if calls is None or "irrelevance" in category:
                continue
            decoded += 1
            ours = check_calls(calls, item.meta["functions"], item.meta["ground_truth"], category) is None
            theirs = CHECK(item.meta["functions"], copy.deepcopy(calls), item.meta["ground_truth"], category)
            assert ours == theirs == row["ast_valid"], (item.id, sample.text)
    assert decoded >= 5  # the grammar-constrained run alone decodes every relevant item
