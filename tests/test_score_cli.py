"""`bench score` and `bench rescore` end to end on real dataset files (model-free metrics, no model load)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from bench.cli import main
from bench.store import CellKey, RunStore, read_json, read_jsonl
from bench.types import Sample
from metrics.registry import MODEL_FREE_METRICS
from metrics.scoring import score_cell

DATA = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))
needs_data = pytest.mark.skipif(not (DATA / "multiwoz_2.2").is_dir(), reason="dataset directory absent")
FREE = ",".join(MODEL_FREE_METRICS)


def _write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@needs_data
def test_score_task_from_records_and_raw_text_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.tasks import load_task

    spec = load_task("multiwoz/hotel", n_references=None, n_holdout=None, split_seed=0)
    new = dict(spec.holdout[0], name="a brand new guesthouse")
    rows = [
        {"record": spec.references[0]},  # copy of a reference: parsed, valid, fails tsr
        {"record": new},  # valid, passes
        {"text": "Here you go:\n```json\n" + json.dumps(new) + "\n```"},  # duplicate of the previous
        {"text": '{"name": "cut off', "finish_reason": "length"},
        {"record": {"name": 1}},  # schema violation
    ]
    samples = _write_jsonl(tmp_path / "s.jsonl", rows)
    rc = main(["score", str(samples), "--task", "multiwoz/hotel", "--metrics", FREE, "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["parse_rate"] == pytest.approx(4 / 5)
    assert out["schema_valid"] == pytest.approx(3 / 5)
    assert out["tsr"] == pytest.approx(1 / 5)
    assert out["truncation_rate"] == pytest.approx(1 / 5)
    assert out["tsr_judge"] is None  # NaN is printed as null
    direct = score_cell(
        [
            Sample(i, json.dumps(r["record"]) if "record" in r else r["text"], r.get("finish_reason"))
            for i, r in enumerate(rows)
        ],
        spec,
        MODEL_FREE_METRICS,
    ).values
    for k, v in direct.items():
        assert (out[k] is None and math.isnan(v)) or out[k] == pytest.approx(v), k


def test_score_with_explicit_schema_and_references(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps({"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}}})
    )
    # trigrams of the sample: (what is the) (is the capital) (the capital of) (capital of spain): 1 of 4 new
    refs = _write_jsonl(tmp_path / "refs.jsonl", [{"q": "what is the capital of france"}])
    samples = _write_jsonl(
        tmp_path / "s.jsonl", [{"text": '{"q": "what is the capital of spain"}'}, {"text": '{"q": NaN}'}]
    )
    rc = main(
        [
            "score",
            str(samples),
            "--schema",
            str(schema),
            "--references",
            str(refs),
            "--metrics",
            "parse_rate,novelty,field_overlap",
            "--per-sample",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["metrics"] == {"parse_rate": 0.5, "novelty": pytest.approx(1 / 4), "field_overlap": 0.0}
    assert [r["status"] for r in out["samples"]] == ["ok", "invalid_json"]
    assert "NaN" in out["samples"][1]["error"]


def test_score_reports_user_errors_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = _write_jsonl(tmp_path / "s.jsonl", [{"text": "{}"}])
    assert main(["score", str(samples), "--metrics", "parse_rate"]) == 2
    assert "exactly one of --task" in capsys.readouterr().err
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object"}')
    assert main(["score", str(samples), "--schema", str(schema), "--metrics", "parse_rat"]) == 2
    assert "did you mean 'parse_rate'" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "x"}\nnot json\n')
    assert main(["score", str(bad), "--schema", str(schema), "--metrics", "parse_rate"]) == 2
    assert "bad.jsonl:2" in capsys.readouterr().err
    schema.write_text('{"type": "objekt"}')
    assert main(["score", str(samples), "--schema", str(schema), "--metrics", "schema_valid"]) == 2
    assert "invalid JSON Schema" in capsys.readouterr().err


@needs_data
def test_rescore_recomputes_every_cell_from_stored_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.tasks import load_task

    task = {"name": "multiwoz/hotel", "n_references": None, "n_holdout": None, "split_seed": 0}
    spec = load_task("multiwoz/hotel", n_references=None, n_holdout=None, split_seed=0)
    store = RunStore(tmp_path / "run")
    store.write_manifest(
        {
            "suite": {"tasks": [task], "metrics": ["parse_rate", "tsr", "distinct_2"]},
            "profile": "embedded",
            "roles": {},
            "data_dir": str(DATA),
        }
    )
    texts = [json.dumps(spec.holdout[0]), "oops", json.dumps(dict(spec.holdout[1], name="x y z"))]
    for seed in (0, 1):
        key = CellKey("ar", "multiwoz/hotel", seed)
        samples = [Sample(i, t) for i, t in enumerate(texts[: 2 + seed])]
        store.write_cell(
            key,
            record={"hash": "h", "status": "ok"},
            samples=samples,
            metrics={"parse_rate": 0.123, "seconds": 9.5},
        )
    store.write_cell(CellKey("ar", "multiwoz/hotel", 2), record={"hash": "h", "status": "failed"})
    assert main(["rescore", str(tmp_path / "run"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"ar/multiwoz/hotel/seed-0", "ar/multiwoz/hotel/seed-1"}
    m0 = read_json(store.cell_dir(CellKey("ar", "multiwoz/hotel", 0)) / "metrics.json")
    assert m0["parse_rate"] == 0.5 and m0["tsr"] == 0.5 and m0["seconds"] == 9.5  # efficiency kept
    m1 = read_json(store.cell_dir(CellKey("ar", "multiwoz/hotel", 1)) / "metrics.json")
    assert m1["parse_rate"] == pytest.approx(2 / 3)
    rows = read_jsonl(store.cell_dir(CellKey("ar", "multiwoz/hotel", 1)) / "samples.jsonl")
    assert [r["scored"]["status"] for r in rows] == ["ok", "invalid_json", "ok"]
    cell = read_json(store.cell_dir(CellKey("ar", "multiwoz/hotel", 0)) / "cell.json")
    assert cell["scoring"]["metric_versions"]["tsr"] == 2 and cell["rescored"]  # tsr 2: family code checks
