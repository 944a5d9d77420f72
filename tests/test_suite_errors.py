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
    assert "suite.yaml:3: key 'sampels': unknown key" in msg and "did you mean 'samples'" in msg


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


# ------------------------------------------------------------------ every error in one pass (issue 15)
FOUR_TYPOS = """\
name: t
seeds: 2
sampels: 2
tasks:
  - {name: demo/booking, n_references: 8, n_holdout: 8}
systems:
  ar: {type: arr, params: {temperature: 0.7}}
  ar2: {type: ar, params: {temprature: 0.7}, models: {generator: smollm2-135m-typo}}
metrics: [parse_rate, schema_vlaid, tsr]
expect:
  - ar2.parse_rate > 0.3
"""


def problems_of(tmp_path: Path, text: str):
    from bench.checks import SuiteProblems, validate_suite

    with pytest.raises(SuiteProblems) as info:
        validate_suite(write(tmp_path, text))
    return info.value.problems


def test_every_error_is_reported_in_one_pass_with_file_line_and_key(tmp_path):
    probs = problems_of(tmp_path, FOUR_TYPOS)
    by_key = {p.key: p for p in probs}
    assert {"sampels", "systems.ar.type", "systems.ar2.params", "systems.ar2.models.generator", "metrics[1]"} <= set(
        by_key
    ), [p.render() for p in probs]
    assert by_key["sampels"].line == 3 and "did you mean 'samples'" in by_key["sampels"].message
    assert by_key["systems.ar.type"].line == 7 and "did you mean 'ar'" in by_key["systems.ar.type"].message
    assert by_key["systems.ar2.params"].line == 8 and "temprature" in by_key["systems.ar2.params"].message
    assert "unknown model preset" in by_key["systems.ar2.models.generator"].message
    assert by_key["metrics[1]"].line == 9 and "'schema_valid'" in by_key["metrics[1]"].message
    assert all(p.file == str(write(tmp_path, FOUR_TYPOS)) for p in probs)


def test_cli_validate_prints_every_error(tmp_path, capsys):
    assert main(["validate", str(write(tmp_path, FOUR_TYPOS))]) == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert len(lines) >= 5 and "Traceback" not in err
    for key in ("'sampels'", "systems.ar.type", "systems.ar2.params", "metrics[1]"):
        assert any(key in ln and "suite.yaml:" in ln for ln in lines), (key, err)


def test_schema_and_cross_errors_together_without_false_alarms(tmp_path):
    # `seeds` is bad (schema) and the metric is unknown (registry): both reported; the expectation on a
    # system whose entry failed the schema is not reported as an unknown system.
    text = GOOD.replace("seeds: 2", "seeds: many").replace("{type: ar, params", "{type: ar, typ: x, params")
    text = text.replace("schema_valid,", "schema_vlaid,")
    keys = {p.key for p in problems_of(tmp_path, text)}
    assert "seeds" in keys and "metrics[1]" in keys and "systems.ar.typ" in keys
    assert not any(k.startswith("expect") for k in keys), keys


def test_unknown_model_preset_fails_validate(tmp_path):
    text = GOOD.replace("{type: ar, params: {temperature: 0.7}}", "{type: ar, models: {generator: smolm2}}")
    (p,) = problems_of(tmp_path, text)
    assert p.key == "systems.ar.models.generator" and p.line == 7 and "unknown model preset 'smolm2'" in p.message


def test_misspelled_model_role_is_rejected_with_suggestion(tmp_path):
    text = GOOD.replace("{type: ar, params: {temperature: 0.7}}", "{type: ar, models: {generater: smollm2-135m-instruct}}")
    (p,) = problems_of(tmp_path, text)
    assert p.key == "systems.ar.models.generater" and "unknown role 'generater'" in p.message
    assert "did you mean 'generator'" in p.message


def test_inline_model_with_unknown_backend(tmp_path):
    text = GOOD.replace(
        "{type: ar, params: {temperature: 0.7}}", "{type: ar, models: {generator: {backend: lamacpp, model: x}}}"
    )
    (p,) = problems_of(tmp_path, text)
    assert "unknown backend 'lamacpp'" in p.message and "'llama_cpp'" in p.message


def test_task_listed_twice_names_both_lines(tmp_path):
    text = GOOD.replace(
        "  - {name: demo/booking, n_references: 8, n_holdout: 8}\n",
        "  - {name: demo/booking, n_references: 16}\n  - {name: demo/booking, n_references: 4}\n",
    )
    (p,) = problems_of(tmp_path, text)
    assert p.key == "tasks[1].name" and p.line == 6 and "line 5" in p.message and "tasks[0]" in p.message


# ------------------------------------------------------------------ hostile suites (issue 11, items 5, 6, 13)
BOMB = """\
name: bomb
tasks: [demo/booking]
systems:
  ar: {type: ar, params: {}}
models:
  a0: &a0 {backend: llama_cpp, model: x, params: {k: [x, x, x, x, x, x, x, x, x, x]}}
""" + "".join(
    f"  a{i}: &a{i} {{backend: llama_cpp, model: x, params: {{k: [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, "
    f"*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]}}}}\n"
    for i in range(1, 11)
)


def test_alias_bomb_is_refused_at_load_time(tmp_path):
    (p,) = problems_of(tmp_path, BOMB)
    assert "alias" in p.message and ("expand" in p.message or "aliases" in p.message)


def test_recursive_alias_is_refused(tmp_path):
    (p,) = problems_of(tmp_path, GOOD.replace("{temperature: 0.7}", "&p {x: *p}"))
    assert "recursive alias" in p.message and p.line == 7


def test_deep_nesting_is_refused_without_recursion_error(tmp_path):
    deep = "[" * 1000 + "]" * 1000
    (p,) = problems_of(tmp_path, GOOD.replace("{temperature: 0.7}", "{x: " + deep + "}"))
    assert "nested" in p.message and p.line == 7


def test_integer_over_4300_digits(tmp_path):
    (p,) = problems_of(tmp_path, GOOD.replace("samples: 2", "samples: " + "9" * 5000))
    assert p.line == 3 and "digits" in p.message


@pytest.mark.parametrize(
    "old,new,key",
    [
        ("ar: {type", "a" * 300 + ": {type", "systems." + "a" * 300),
        ("ar: {type", '"a\\0b": {type', None),
        ("name: t", 'name: "t\\udc80"', "name"),
        ("name: t", 'name: "t\\0"', "name"),
        ("seeds: 2", "seeds: -1000000000000000000000000000000", "seeds"),
        ("seeds: 2", "seeds: 1000000000000", "seeds"),
        ("seeds: 2", "seeds: [0, -5]", "seeds[1]"),
        ("demo/booking", "superni/task_that_does_not_exist", "tasks[0].name"),
        ("{temperature: 0.7}", "{temperature: 0.7, when: 2001-12-14}", "systems.ar.params.when"),
        ("{temperature: 0.7}", "{temperature: .nan}", "systems.ar.params.temperature"),
    ],
)
def test_hostile_values_fail_validation_cleanly(tmp_path, old, new, key):
    assert old in GOOD
    probs = problems_of(tmp_path, GOOD.replace(old, new))
    assert probs, new
    if key is not None:
        assert any(p.key == key for p in probs), [p.render() for p in probs]
    for p in probs:  # every message renders as plain printable UTF-8 (no NUL, no lone surrogate)
        p.render().encode("utf-8")
        assert "\0" not in p.render()


@pytest.mark.parametrize("name", ["../../escaped", "/tmp/abs", "a/b", "..", ".hidden"])
def test_suite_name_cannot_leave_runs_dir(tmp_path, name):
    (p,) = problems_of(tmp_path, GOOD.replace("name: t", f'name: "{name}"'))
    assert p.key == "name" and p.line == 1


def test_default_run_dir_stays_under_runs(tmp_path):
    from bench.runner import default_run_dir

    sf = load_suite(write(tmp_path, GOOD))
    sf.suite.name = "../../escaped"  # even if a name slipped past validation
    d = default_run_dir(sf.suite)
    assert d.parent == Path("runs") and ".." not in d.parts
