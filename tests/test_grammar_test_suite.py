"""The official JSON-Schema-Test-Suite (draft 2020-12) through the grammar compiler, judged by llama.cpp.

Every schema either compiles or is refused with `UnsupportedSchema`; nothing crashes. No text that
llama.cpp's grammar engine accepts is rejected by `jsonschema` (the suite's invalid instances and random
sentences drawn from each grammar), and the per-keyword coverage table in docs/systems-ar.md is the one
`benchmarks/grammar/coverage.py` computes now.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks.grammar import coverage

SUITE = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")) / "json_schema_test_suite"


def test_the_suite_compiles_soundly_without_crashes_and_the_docs_table_is_current():
    pytest.importorskip("llama_cpp")
    if not SUITE.is_dir():
        pytest.skip(f"{SUITE} absent")
    results = coverage.run(SUITE, draws=20, seed=0)
    s = coverage.summary(results)
    crashes = [(r.file, r.description, r.crash) for r in results if r.crash]
    unsound = [(r.file, r.description, r.unsound_examples[:2]) for r in results if r.unsound_examples]
    assert not crashes
    assert not unsound
    assert s["unsound_instances"] == s["unsound_sentences"] == 0
    assert s["drawn_sentences"] > 4000  # the sentence probe really ran
    assert s["compiled"] >= 300 and s["invalid_instances_of_compiled"] > 400
    # every refusal names a keyword and a JSON pointer
    for r in results:
        if r.refusal:
            assert "#" in r.refusal, r.refusal
    assert coverage.table(results) in coverage.DOCS.read_text(), (
        "re-run benchmarks/grammar/coverage.py --write-docs"
    )
