"""`bench check` end to end: the real runner, the `file` system and real MultiWOZ data, run twice.

An unchanged rerun must pass the gate; the same suite over generations with a planted regression (half
of the JSON truncated) must fail it on the structure metrics.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from bench.cli import main

DATA = Path(
    os.environ.setdefault("BENCH_DATA_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
)
pytestmark = pytest.mark.skipif(
    not (DATA / "multiwoz_2.2" / "db" / "train_db.json").exists(), reason="no data dir"
)

SUITE = """
name: check-rerun
profile: embedded
seeds: 3
samples: 8
tasks:
  - {{name: multiwoz/train, n_references: 32, n_holdout: 32}}
systems:
  gen: {{type: file, params: {{path: "{gen}/{{task_dir}}/{{seed}}.jsonl"}}}}
metrics: [parse_rate, schema_valid, tsr, field_overlap, diversity, novelty, entropy]
"""


def _write_generations(root: Path, *, truncate: int) -> None:
    """8 train records per seed, drawn from the real database with seeded edits (times and prices), the
    first `truncate` of them cut in half (invalid JSON)."""
    trains = json.loads((DATA / "multiwoz_2.2" / "db" / "train_db.json").read_text(encoding="utf-8"))
    for seed in range(3):
        rng = random.Random(1000 + seed)
        lines = []
        for i, rec in enumerate(rng.sample(trains, 8)):
            rec = dict(rec)
            rec["leaveAt"] = f"{rng.randrange(5, 23):02d}:{rng.randrange(0, 60):02d}"
            rec["price"] = f"{rng.randrange(4, 40)}.{rng.randrange(0, 100):02d} pounds"
            text = json.dumps(rec)
            lines.append(json.dumps({"text": text[: len(text) // 2] if i < truncate else text}))
        path = root / "multiwoz__train" / f"{seed}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _run(tmp_path: Path, name: str, truncate: int) -> Path:
    from bench.runner import RunOptions, run_suite

    gen = tmp_path / f"gen-{name}"
    _write_generations(gen, truncate=truncate)
    suite = tmp_path / f"{name}.yaml"
    suite.write_text(SUITE.format(gen=gen.as_posix()), encoding="utf-8")
    opts = RunOptions(
        out=str(tmp_path / name),
        progress=False,
        use_cache=False,
        executor="inline",
        workers=0,
        data_dir=str(DATA),
    )
    result = run_suite(suite, None, opts)
    assert not result.failed_cells, [o.error for o in result.failed_cells]
    return Path(result.run_dir)


def test_unchanged_rerun_passes_and_planted_regression_fails(tmp_path, capsys):
    first = _run(tmp_path, "first", truncate=1)
    baseline = tmp_path / "baseline.json"
    assert main(["baseline", str(first), "-o", str(baseline)]) == 0

    rerun = _run(tmp_path, "rerun", truncate=1)
    assert main(["check", str(rerun), "--baseline", str(baseline), "-v"]) == 0
    out = capsys.readouterr().out
    assert "0 failed" in out
    # wall-clock metrics move with the machine's load, not the code: skipped unless --timing
    timing = [line for line in out.splitlines() if "/seconds " in line or "/records_per_s " in line]
    assert timing and all(line.startswith("skip") for line in timing), timing

    regressed = _run(tmp_path, "regressed", truncate=4)
    assert main(["check", str(regressed), "--baseline", str(baseline)]) == 1
    out = capsys.readouterr().out
    failed = {line.split()[1] for line in out.splitlines() if line.startswith("FAIL")}
    # the planted regression truncates records: parse rate and schema validity fall (tsr, which now also
    # runs the code-checked rubric, need not move past its tolerance on these records)
    assert {"gen/multiwoz/train/parse_rate", "gen/multiwoz/train/schema_valid"} <= failed, out
    first_rate = json.loads((first / "cells/gen/multiwoz__train/seed-0/metrics.json").read_text())[
        "parse_rate"
    ]
    assert first_rate == pytest.approx(7 / 8)
