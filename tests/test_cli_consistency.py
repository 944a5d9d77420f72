"""`bench validate`, `bench run --dry-run` and `bench run` make the same checks, from one function.

Each bad suite below must be refused by all three with the same error lines (file:line: key: message),
and a real run must refuse it before it writes anything. The `file` system (generations read from disk)
lets the good-suite run go end to end with no model.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.cli import main
from bench.tasks import load_task

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")


def good_suite(gen: Path) -> str:
    return f"""\
name: consistency
seeds: 2
samples: 3
tasks:
  - {{name: demo/booking, n_references: 12, n_holdout: 8}}
systems:
  ext: {{type: file, params: {{path: "{gen.as_posix()}/{{task_dir}}/{{seed}}.jsonl"}}}}
  ext2: {{type: file, params: {{path: "{gen.as_posix()}/{{task_dir}}/{{seed}}.jsonl"}}}}
metrics: [parse_rate, schema_valid]
expect:
  - ext.parse_rate > 0.5
"""


def write_generations(gen: Path) -> None:
    spec = load_task("demo/booking", n_references=12, n_holdout=8)
    d = gen / "demo__booking"
    d.mkdir(parents=True, exist_ok=True)
    for seed in (0, 1):
        rows = [{"record": dict(spec.holdout[seed])}, {"record": dict(spec.holdout[seed + 2])}, {"text": "{"}]
        (d / f"{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


# (old, new) replacements of the good suite that make it invalid
BAD = {
    "unknown-type": ("{type: file, params", "{type: fiel, params"),
    "unknown-preset": ("ext2: {type: file,", "ext2: {models: {generator: smolm2}, type: file,"),
    "role-typo": ("ext2: {type: file,", "ext2: {models: {generater: smollm2-135m-instruct}, type: file,"),
    "unknown-metric": ("schema_valid]", "schema_vlaid]"),
    "twice-listed-task": (
        "  - {name: demo/booking, n_references: 12, n_holdout: 8}\n",
        "  - {name: demo/booking, n_references: 12, n_holdout: 8}\n  - {name: demo/booking, n_references: 4}\n",
    ),
    "unknown-superni": ("demo/booking", "superni/task_nope"),
    "escaping-name": ("name: consistency", 'name: "../../escaped"'),
    "huge-seeds": ("seeds: 2", "seeds: 1000000000000"),
    "long-system-name": ("ext2:", "e" * 300 + ":"),
    "bad-expectation": ("ext.parse_rate > 0.5", "ext.parse_rate >> 0.5"),
    "four-at-once": ("samples: 3\n", "sampels: 3\nprofile: embeded\n"),
}


def error_lines(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


@pytest.fixture
def gen(tmp_path: Path) -> Path:
    g = tmp_path / "gen"
    write_generations(g)
    return g


@pytest.mark.parametrize("case", sorted(BAD))
def test_validate_dry_run_and_run_refuse_alike(tmp_path, gen, capsys, case):
    old, new = BAD[case]
    text = good_suite(gen)
    assert old in text
    suite = tmp_path / "s.yaml"
    suite.write_text(text.replace(old, new, 1))
    assert main(["validate", str(suite)]) == 2
    v = error_lines(capsys)
    assert v and all("s.yaml:" in ln for ln in v), v
    assert main(["run", str(suite), "--dry-run"]) == 2
    d = error_lines(capsys)
    out = tmp_path / "run"
    assert main(["run", str(suite), "--out", str(out), "--workers", "0", "--no-progress"]) == 2
    r = error_lines(capsys)
    assert v == d == r
    assert not out.exists()  # refused before anything was written


def test_good_suite_passes_all_three(tmp_path, gen, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_NO_HTML", "1")
    suite = tmp_path / "s.yaml"
    suite.write_text(good_suite(gen))
    assert main(["validate", str(suite)]) == 0
    assert main(["run", str(suite), "--dry-run"]) == 0
    assert main(["run", str(suite), "--out", str(tmp_path / "run"), "--workers", "0", "--no-progress"]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out


def test_dry_run_rejects_an_unknown_system_selection_like_run(tmp_path, gen, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(good_suite(gen))
    assert main(["run", str(suite), "--dry-run", "--systems", "arr"]) == 2
    d = error_lines(capsys)
    assert main(["run", str(suite), "--systems", "arr", "--out", str(tmp_path / "r"), "--workers", "0"]) == 2
    assert d == error_lines(capsys) and "'arr'" in d[0] and "--systems" in d[0]


def test_dry_run_shows_only_the_selected_systems(tmp_path, gen, capsys):
    suite = tmp_path / "s.yaml"
    suite.write_text(good_suite(gen))
    assert main(["run", str(suite), "--dry-run", "--systems", "ext2"]) == 0
    rows = [ln.split()[0] for ln in capsys.readouterr().out.splitlines() if ln.startswith("ext")]
    assert rows and set(rows) == {"ext2"}


def test_a_registered_check_runs_in_validate_dry_run_and_run(tmp_path, gen, capsys):
    """The preflight plugs in as one more check; all three commands then report its problems."""
    from bench.checks import CHECKS, Problem, register_check

    def no_ext2(ctx):
        if "ext2" in ctx.suite.systems:
            yield ctx.problem(("systems", "ext2"), "ext2 is not allowed on this machine")

    suite = tmp_path / "s.yaml"
    suite.write_text(good_suite(gen))
    register_check(no_ext2)
    try:
        results = []
        for argv in (
            ["validate", str(suite)],
            ["run", str(suite), "--dry-run"],
            ["run", str(suite), "--out", str(tmp_path / "r"), "--workers", "0", "--no-progress"],
        ):
            assert main(argv) == 2
            results.append(error_lines(capsys))
        assert results[0] == results[1] == results[2]
        assert results[0] == [f"error: {suite}:8: key 'systems.ext2': ext2 is not allowed on this machine"]
        assert isinstance(Problem(str(suite), 8, "systems.ext2", "x").render(), str)
    finally:
        CHECKS.remove(no_ext2)


# ------------------------------------------------------------------------------------------- bench list
def test_list_help_names_every_kind(capsys):
    with pytest.raises(SystemExit):
        main(["list", "--help"])
    out = capsys.readouterr().out
    for kind in ("systems", "metrics", "tasks", "profiles", "models", "backends"):
        assert kind in out.split("options:")[0], out


def test_list_backends_prints_descriptions(capsys):
    assert main(["list", "backends"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    names = {ln.split()[0] for ln in lines}
    assert {"llama_cpp", "hf", "openai", "llada_hf", "mdlm", "sentence_transformers"} <= names
    for ln in lines:
        assert len(ln.split(None, 1)) == 2 and len(ln.split(None, 1)[1].strip()) > 10, ln


# ------------------------------------------------------------------------------------------ report -o
def test_report_html_honours_out(tmp_path, gen, capsys, monkeypatch):
    monkeypatch.setenv("BENCH_NO_HTML", "1")
    suite = tmp_path / "s.yaml"
    suite.write_text(good_suite(gen))
    run_dir = tmp_path / "run"
    assert main(["run", str(suite), "--out", str(run_dir), "--workers", "0", "--no-progress"]) == 0
    target = tmp_path / "elsewhere" / "mine.html"
    target.parent.mkdir()
    assert main(["report", str(run_dir), "--format", "html", "-o", str(target)]) == 0
    html = target.read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html") and "ext2" in html
    assert not (run_dir / "report.html").exists()
    assert str(target) in capsys.readouterr().out
