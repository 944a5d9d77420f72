"""JSONSchemaBench as a task family: the loader on the real files, the benchmark's metrics against an
independent computation on hand-made samples, refused schemas scored as samples (declared=False), and a
small real-model run through the runner."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench.errors import BenchError
from bench.registry import UnknownNameError
from bench.tasks.jsonschemabench import INSTRUCTION
from bench.tasks.loading import load_task
from bench.types import Sample, SampleStatus, TaskItem, TaskSpec
from metrics.registry import DEFAULT_METRICS, MODEL_FREE_METRICS
from metrics.scoring import score_cell

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))
JSB = DATA_DIR / "jsonschemabench"
SPLITS = [
    "Github_easy",
    "Github_hard",
    "Github_medium",
    "Github_trivial",
    "Github_ultra",
    "Glaiveai2K",
    "JsonSchemaStore",
    "Kubernetes",
    "Snowplow",
    "WashingtonPost",
]
needs_data = pytest.mark.skipif(not JSB.is_dir(), reason=f"{JSB} absent")
JSB_METRICS = [
    "declared_coverage",
    "empirical_coverage",
    "compliance",
    "compile_seconds",
    "ttft_seconds",
    "tpot_seconds",
    "tokens_per_s",
]


# ------------------------------------------------------------------------------------------- loader
@needs_data
def test_every_split_loads_one_item_per_schema_file_in_file_name_order():
    for split in SPLITS:
        spec = load_task(f"jsonschemabench/{split}", n_references=None, n_holdout=None)
        files = sorted((JSB / split).glob("*.json"))
        assert len(spec.items) == len(files) == 100, split
        assert [i.id for i in spec.items] == [f.name for f in files]
        assert spec.references == () and spec.holdout == ()
        for item, f in zip(spec.items[:5], files[:5], strict=True):
            assert item.schema == json.loads(f.read_text(encoding="utf-8"))
            assert item.instruction == INSTRUCTION
            assert item.meta["schema_id"] == f.name and item.meta["split"] == split


@needs_data
def test_limit_keeps_the_first_schemas_and_names_them_per_sample():
    spec = load_task("jsonschemabench/Github_hard", n_references=None, n_holdout=None, options={"limit": 3})
    names = sorted(p.name for p in (JSB / "Github_hard").glob("*.json"))[:3]
    assert [i.id for i in spec.items] == names
    assert (
        spec.for_sample(1).meta["item_id"] == names[1] and spec.for_sample(1).schema == spec.items[1].schema
    )
    assert len(spec.meta["source_files"]) == 3
    other = load_task("jsonschemabench/Github_hard", n_references=None, n_holdout=None, options={"limit": 4})
    assert other.fingerprint != spec.fingerprint


@needs_data
def test_bad_options_and_unknown_splits_are_clear_errors():
    with pytest.raises(BenchError, match="limit"):
        load_task("jsonschemabench/Github_hard", n_references=None, n_holdout=None, options={"limit": 0})
    with pytest.raises(BenchError, match="unknown option"):
        load_task("jsonschemabench/Github_hard", n_references=None, n_holdout=None, options={"n": 1})
    with pytest.raises(UnknownNameError, match="Github_hard"):
        load_task("jsonschemabench/Github_hrd", n_references=None, n_holdout=None)


# ------------------------------------------------------------------------------------------ metrics
INT = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
DATE = {"type": "object", "properties": {"d": {"type": "string", "format": "date"}}, "required": ["d"]}
SPEC = TaskSpec(
    "jsonschemabench/hand",
    INSTRUCTION,
    {},
    (),
    (),
    items=(TaskItem("a.json", INT, INSTRUCTION), TaskItem("b.json", DATE, INSTRUCTION)),
)


def hand_samples() -> list[Sample]:
    """Six samples: a/b alternate. Declared, with times; #3 refused; #5 a harness failure."""

    def meta(i: int, declared: bool, compile_s: float, secs: float, toks: int) -> dict:
        return {
            "schema_id": "ab"[i % 2] + ".json",
            "declared": declared,
            "compile_seconds": compile_s,
            "seconds": secs,
            "tokens_out": toks,
        }

    return [
        Sample(0, '{"x": 1}', "stop", meta=meta(0, True, 0.2, 1.0, 10)),  # valid
        Sample(1, '{"d": "2020-02-30"}', "stop", meta=meta(1, True, 0.4, 2.0, 10)),  # format fails
        Sample(2, '{"x": "1"}', "stop", meta=meta(2, True, 0.2, 3.0, 20)),  # type fails
        Sample(3, "", "unsupported", meta=meta(3, False, 0.4, 0.0, 0)),  # refused
        Sample(4, '{"x": 7}', "stop", meta=meta(4, True, 0.2, 1.0, 5)),  # valid
        Sample(5, "", "error", error="boom", status=SampleStatus.BACKEND_ERROR, meta={"schema_id": "b.json"}),
    ]


def test_metrics_match_an_independent_count():
    samples = hand_samples()
    score = score_cell(samples, SPEC, JSB_METRICS)
    v = score.values
    # scored: samples 0-4 (5 is a harness failure); declared: 0,1,2,4; valid: 0,4
    assert v["declared_coverage"] == pytest.approx(4 / 5)
    assert v["empirical_coverage"] == pytest.approx(2 / 5)
    assert v["compliance"] == pytest.approx(2 / 4)
    assert v["compile_seconds"] == pytest.approx((0.2 + 0.4) / 2)  # one time per schema
    assert np.isnan(v["ttft_seconds"])
    assert "stream" in score.info["jsonschemabench"]["ttft_seconds"]["reason"]
    assert v["tpot_seconds"] == pytest.approx(np.mean([1 / 10, 2 / 10, 3 / 20, 1 / 5]))
    assert v["tokens_per_s"] == pytest.approx((10 + 10 + 20 + 5) / (1 + 2 + 3 + 1))
    assert score.info["jsonschemabench"]["harness_failures"] == 1


def test_bootstrap_interval_is_the_seeded_percentile_interval():
    score = score_cell(hand_samples()[:5], SPEC, ["empirical_coverage", "compliance"])
    info = score.info["jsonschemabench"]["empirical_coverage"]
    assert info["resamples"] == 100
    valid = np.array([1, 0, 0, 0, 1], dtype=float)
    rng = np.random.default_rng(info["seed"])
    means = [valid[rng.integers(0, 5, 5)].mean() for _ in range(100)]
    assert info["ci95"] == pytest.approx([np.percentile(means, 2.5), np.percentile(means, 97.5)])
    lo, hi = score.info["jsonschemabench"]["compliance"]["ci95"]
    assert 0.0 <= lo <= score.values["compliance"] <= hi <= 1.0


def test_jsonschemabench_metrics_are_opt_in():
    for name in JSB_METRICS:
        assert name not in DEFAULT_METRICS and name not in MODEL_FREE_METRICS


# ------------------------------------------------------------------------- refused schemas (engines)
def test_a_schema_our_compiler_refuses_is_a_declared_false_sample_not_a_failed_cell():
    from systems.ar_grammar import ARGrammarSystem
    from systems.item_grammar import compile_item

    refused = {"type": "integer", "not": {"minimum": 3}}  # `not` beyond a type list: refused
    spec = TaskSpec("t", INSTRUCTION, {}, (), (), items=(TaskItem("u.json", refused, INSTRUCTION),))
    c = compile_item(ARGrammarSystem({}), spec.for_sample(0), None, "ours", llama=False)
    assert c.params is None and "not" in (c.reason or "")
    ok = compile_item(ARGrammarSystem({}), SPEC.for_sample(0), None, "ours", llama=False)
    assert ok.params is not None and ok.params.json_schema is not None and ok.seconds >= 0


def test_unconstrained_ar_declares_every_schema_and_names_it():
    from systems.item_grammar import item_meta

    assert item_meta(SPEC, 3) == {"item_id": "b.json", "schema_id": "b.json", "declared": True}
    plain = TaskSpec("t", "i", {"type": "object"}, (), ())
    assert item_meta(plain, 0) == {}


# ------------------------------------------------------------------------------- real model (slow)
SUITE = """\
name: jsb-small
profile: embedded
seeds: [0]
samples: 2
tasks:
  - {name: jsonschemabench/mini}
systems:
  ours: {type: ar-grammar, params: {temperature: 0.0, k_shots: 0, max_tokens: 48}}
  peer: {type: ar-grammar, params: {temperature: 0.0, k_shots: 0, max_tokens: 48, grammar: llama_cpp}}
metrics: [declared_coverage, empirical_coverage, compliance, compile_seconds, tpot_seconds]
"""


@pytest.mark.slow
@needs_data
def test_a_real_run_scores_declared_and_refused_schemas(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from bench.runner import RunOptions, run_suite
    from bench.store import RunStore

    mini = tmp_path / "data" / "jsonschemabench" / "mini"
    mini.mkdir(parents=True)
    first = sorted((JSB / "Glaiveai2K").glob("*.json"))[0]
    shutil.copy(first, mini / "a.json")
    (mini / "b.json").write_text(json.dumps({"type": "integer", "not": {"minimum": 3}}))
    monkeypatch.setenv("BENCH_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_suite(
        tmp_path / "suite.yaml",
        None,
        RunOptions(out=str(tmp_path / "run"), executor="inline", use_cache=False, progress=False),
    )
    assert not result.failed_cells, [(o.key, o.error) for o in result.failed_cells]
    cells = {c.key.system: c for c in RunStore(result.run_dir).iter_cells()}
    ours = cells["ours"]
    samples = [json.loads(line) for line in (Path(ours.path) / "samples.jsonl").read_text().splitlines()]
    assert [s["meta"]["schema_id"] for s in samples] == ["a.json", "b.json"]
    assert [s["meta"]["declared"] for s in samples] == [True, False]
    assert samples[1]["text"] == "" and "not" in samples[1]["meta"]["refused"]
    assert ours.metrics["declared_coverage"] == 0.5
    # our grammar admits only schema-valid texts: a declared sample is valid or was cut by the token
    # budget (unbounded numbers can outrun 48 tokens), never a complete invalid record
    assert samples[0]["scored"]["status"] in ("ok", "truncated")
    assert ours.metrics["compliance"] == (1.0 if samples[0]["scored"]["status"] == "ok" else 0.0)
    assert ours.metrics["compile_seconds"] > 0
    peer = cells["peer"]
    assert all(
        s["meta"]["grammar"] == "llama_cpp"
        for s in map(json.loads, (Path(peer.path) / "samples.jsonl").read_text().splitlines())
    )
    assert 0.0 <= peer.metrics["declared_coverage"] <= 1.0


def test_ar_grammar_requests_skip_refused_items_so_a_dry_run_can_size_them():
    from systems.ar_grammar import ARGrammarSystem

    refused = {"type": "integer", "not": {"minimum": 3}}  # `not` beyond a type list: refused
    spec = TaskSpec(
        "t",
        INSTRUCTION,
        {},
        (),
        (),
        items=(TaskItem("a.json", INT, INSTRUCTION), TaskItem("u.json", refused, INSTRUCTION)),
    )
    requests, shots = ARGrammarSystem({"max_tokens": 64}).build_requests(spec, 2, 0)
    assert [r.sample_index for r in requests] == [0] and shots == [[]]
    assert requests[0].params.json_schema is not None and INSTRUCTION in requests[0].messages[-1][1]


def test_gbnf_that_llama_cpp_cannot_parse_is_caught_before_sampling():
    """llama-cpp-python parses a grammar only when sampling starts and crashes on a bad one (seen on a
    JSONSchemaBench schema through its own converter), so compile_item checks the parse first."""
    pytest.importorskip("llama_cpp")
    from systems.backends.llama_cpp import LlamaCppBackend
    from systems.item_grammar import gbnf_parses, llama_vocab

    vocab = llama_vocab(LlamaCppBackend.from_spec({"model": "smollm2-135m-instruct"}))
    assert gbnf_parses(vocab, 'root ::= "a" [0-9]*')
    assert not gbnf_parses(vocab, 'root ::= [\\.]+ "x')


def test_an_instance_need_not_be_an_object_when_the_schema_allows_it():
    """WashingtonPost's wp_101 allows a string at the root: a valid string is compliant, and a string is
    still invalid where the schema wants an object (schema validation decides, not extraction)."""
    string_root = {"type": ["object", "string"], "properties": {"x": {"type": "integer"}}}
    any_item = {"any_instance": True}
    spec = TaskSpec(
        "jsonschemabench/roots",
        INSTRUCTION,
        {},
        (),
        (),
        items=(
            TaskItem("s.json", string_root, INSTRUCTION, meta=any_item),
            TaskItem("o.json", INT, INSTRUCTION, meta=any_item),
        ),
    )
    meta = {"declared": True}
    samples = [
        Sample(0, '```json\n"a headline"\n```', "stop", meta={**meta, "schema_id": "s.json"}),  # valid string
        Sample(1, '"a headline"', "stop", meta={**meta, "schema_id": "o.json"}),  # parses, not an object
        Sample(2, "false", "stop", meta={**meta, "schema_id": "s.json"}),  # parses, wrong type
        Sample(3, "just prose", "stop", meta={**meta, "schema_id": "o.json"}),  # nothing parses
    ]
    score = score_cell(samples, spec, ["parse_rate", "schema_valid", "compliance"])
    assert score.values["parse_rate"] == pytest.approx(3 / 4)
    assert score.values["compliance"] == pytest.approx(1 / 4)
    # tasks without the flag keep the record rule: a bare string is not a record
    plain = TaskSpec("t", INSTRUCTION, string_root, (), ())
    assert score_cell(samples[:1], plain, ["parse_rate"]).values["parse_rate"] == 0.0


@needs_data
def test_jsonschemabench_items_take_any_instance():
    spec = load_task("jsonschemabench/Github_hard", n_references=None, n_holdout=None, options={"limit": 1})
    assert spec.items[0].meta["any_instance"] is True
