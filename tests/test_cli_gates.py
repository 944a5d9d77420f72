"""`bench check` and `bench compare` as gates: failed cells fail, malformed baselines and runs with no
shared seed are clear errors (issue 11, items 11 and 14)."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from reports.fixtures import write_run


def _vals(shift: float = 0.0) -> dict:
    return {("ar", "demo/booking"): {"tsr": [0.5 + shift, 0.6 + shift, 0.55 + shift, 0.58 + shift]}}


@pytest.fixture()
def baseline(tmp_path):
    run = write_run(tmp_path / "base", _vals())
    path = tmp_path / "baseline.json"
    assert main(["baseline", str(run), "-o", str(path)]) == 0
    return path


def test_check_fails_when_a_cell_failed(tmp_path, baseline, capsys):
    run = write_run(tmp_path / "cur", _vals(), failed={("ar", "demo/booking", 3): "worker process died"})
    capsys.readouterr()
    assert main(["check", str(run), "--baseline", str(baseline)]) == 1
    out = capsys.readouterr().out
    assert "FAIL ar/demo/booking/cells" in out
    assert "seed 3" in out and "worker process died" in out
    junit = tmp_path / "j.xml"
    assert main(["check", str(run), "--baseline", str(baseline), "--junit", str(junit)]) == 1
    assert 'failures="1"' in junit.read_text()


def test_check_still_passes_an_unchanged_run(tmp_path, baseline):
    run = write_run(tmp_path / "cur", _vals())
    assert main(["check", str(run), "--baseline", str(baseline)]) == 0


BAD_BASELINES = {
    "missing task": (lambda e: e.pop("task"), "entries.0.task"),
    "n not an int": (lambda e: e.update(n="ten"), "entries.0.n"),
    "mean a list": (lambda e: e.update(mean=[1]), "entries.0.mean"),
    "entry a number": (None, "entries.0"),
}


@pytest.mark.parametrize("case", sorted(BAD_BASELINES))
def test_malformed_baseline_is_a_clear_error(tmp_path, baseline, capsys, case):
    edit, where = BAD_BASELINES[case]
    data = json.loads(baseline.read_text())
    if edit is None:
        data["entries"][0] = 42
    else:
        edit(data["entries"][0])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    run = write_run(tmp_path / "cur", _vals())
    capsys.readouterr()
    assert main(["check", str(run), "--baseline", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and where in err


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"format": "aod-bench-baseline", "version": "x", "entries": []}',
        '{"format": "aod-bench-baseline", "version": 1, "entries": {"a": 1}}',
    ],
)
def test_baseline_of_the_wrong_shape_is_a_clear_error(tmp_path, capsys, text):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    run = write_run(tmp_path / "cur", _vals())
    assert main(["check", str(run), "--baseline", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err


def test_compare_with_no_shared_seed_says_so_and_fails(tmp_path, capsys):
    a = write_run(tmp_path / "a", _vals(), seeds=[0, 1, 2, 3])
    b = write_run(tmp_path / "b", _vals(0.1), seeds=[4, 5, 6, 7])
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "no shared seed" in err and "0, 1, 2, 3" in err and "4, 5, 6, 7" in err


def test_compare_with_shared_seeds_still_works(tmp_path, capsys):
    a = write_run(tmp_path / "a", _vals(), seeds=[0, 1, 2, 3])
    b = write_run(tmp_path / "b", _vals(0.1), seeds=[0, 1, 2, 3])
    assert main(["compare", str(a), str(b)]) == 0
    assert "tsr" in capsys.readouterr().out
