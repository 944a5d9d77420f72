"""Malformed suites get one short error naming file, line and key, with a suggestion, and no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import SuiteError
from bench.suite import load_suite

GOOD = """\
name: t
seeds: 2
samples: 2
tasks:
  - {name: demo/booking, n_references: 8, n_holdout: 8}
systems:
  ar: {type: ar, params: {temperature: 0.7}}
metrics: [parse_rate, schema_valid, tsr]
expect:
  - ar.parse_rate > 0.3
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "suite.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def error_of(tmp_path: Path, text: str) -> str:
    with pytest.raises(SuiteError) as info:
        load_suite(write(tmp_path, text))
    return str(info.value)


def test_good_suite_loads(tmp_path):
    sf = load_suite(write(tmp_path, GOOD))
    assert sf.suite.seed_list() == [0, 1]
    assert sf.suite.tasks[0].n_references == 8
    assert sf.suite.expectations()[0].left.metric == "parse_rate"


def test_bad_yaml_names_line(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("samples: 2", "samples: [2"))
    assert "invalid YAML" in msg and "suite.yaml:" in msg


def test_wrong_type_names_key_and_line(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("samples: 2", "samples: many"))
    assert "suite.yaml:3:" in msg and "'samples'" in msg


def test_unknown_system_type_suggests(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("{type: ar,", "{type: arr,"))
    assert "suite.yaml:7:" in msg and "systems.ar.type" in msg and "did you mean 'ar'" in msg


def test_unknown_metric_suggests(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("schema_valid,", "schema_vlaid,"))
    assert "suite.yaml:8:" in msg and "metrics[1]" in msg and "'schema_valid'" in msg


def test_unknown_task_suggests(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("demo/booking", "dmo/booking"))
    assert "suite.yaml:5:" in msg and "tasks[0].name" in msg and "did you mean" in msg


def test_bad_system_param_names_the_params_key(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("{temperature: 0.7}", "{temprature: 0.7}"))
    assert "suite.yaml:7:" in msg and "systems.ar.params" in msg and "temprature" in msg


def test_unknown_key_suggests(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("samples: 2", "sampels: 2"))
    assert "suite.yaml:3:" in msg and "unknown key 'sampels'" in msg and "'samples'" in msg


def test_bad_expectation(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("ar.parse_rate > 0.3", "ar.parse_rate >> 0.3"))
    assert "suite.yaml:10:" in msg and "expect[0]" in msg and "cannot parse expectation" in msg


def test_expectation_with_unknown_system(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("ar.parse_rate > 0.3", "llada.parse_rate > 0.3"))
    assert "expect[0]" in msg and "unknown system 'llada'" in msg


def test_not_a_mapping(tmp_path):
    msg = error_of(tmp_path, "- just\n- a list\n")
    assert "suite.yaml:1:" in msg and "mapping" in msg


def test_cli_validate_prints_no_traceback(tmp_path, capsys):
    p = write(tmp_path, GOOD.replace("{type: ar,", "{type: lada,"))
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err and err.count("\n") == 1


def test_cli_validate_subprocess_exit_code(tmp_path):
    p = write(tmp_path, GOOD.replace("seeds: 2", "seeds: -1"))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "validate", str(p)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "'seeds'" in proc.stderr


def test_cli_validate_ok(tmp_path, capsys):
    assert main(["validate", str(write(tmp_path, GOOD))]) == 0
    assert "ok (1 systems x 1 tasks x 2 seeds = 2 cells" in capsys.readouterr().out
