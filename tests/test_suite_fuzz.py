"""A bounded hypothesis fuzzer over suite files: 0 tracebacks, 0 hangs, and nothing that `bench validate`
accepts is then refused by `bench run --dry-run` or by the run itself.

Suites are built from pieces that are valid, misspelled or hostile (names with NUL, lone surrogates, path
escapes or 300 characters; huge and negative seeds; unknown tasks; twice-listed tasks; misspelled model
roles and presets; alias bombs, recursive aliases, deep nesting, 5000-digit integers, YAML dates).
Each hostile piece is invalid on its own, so the generator knows the answer: a suite with one must be
refused by `validate` (no invalid suite accepted), and one without must be accepted (no false alarm).
Accepted suites made only of `file` systems are run for real (no model needed); the others go through
the run's own planning (`prepare_suite` + `plan_jobs`), which is everything a run does before a model
loads. 200 examples take about 10 s of CPU (`FUZZ_EXAMPLES` to change).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.tasks import load_task

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "200"))
HANG_S = 30  # one example (validate + dry run + run) taking longer than this counts as a hang

GEN = Path(tempfile.mkdtemp(prefix="fuzz-gen-"))


def _write_generations() -> None:
    spec = load_task("demo/booking", n_references=8, n_holdout=8)
    d = GEN / "demo__booking"
    d.mkdir(parents=True, exist_ok=True)
    for seed in range(3):
        rows = [{"record": dict(r)} for r in spec.holdout[:2]] + [{"text": "{not json"}]
        (d / f"{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


_write_generations()
FILE_PATH = f"{GEN.as_posix()}/{{task_dir}}/{{seed}}.jsonl"

q = json.dumps  # a JSON string literal is a valid YAML double-quoted scalar (escapes included)

# Each part of a suite is drawn valid or hostile. Every HOSTILE value is invalid on its own, and every
# VALID combination is a suite a run accepts; that is the oracle: a suite with a hostile part must be
# refused by `validate`, and one without must be accepted (and then accepted by the dry run and the run).
# A handful of parts at most are hostile in one suite, so that about half the suites are valid.
VALID = {
    "name": st.sampled_from(["fz", "fz-1", "a.b", "ok name"]),
    "seeds": st.one_of(st.integers(1, 3), st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True)),
    "samples": st.integers(1, 3),
    "task": st.sampled_from(
        [
            {"name": "demo/booking", "n_references": 8, "n_holdout": 8},
            {"name": "demo/booking"},
            "demo/booking",  # a task may be a plain name
            {"name": "multiwoz/hotel", "n_references": 4, "n_holdout": 4, "split_seed": 3},
            {
                "name": "superni/task1192_food_flavor_profile",
                "n_references": 4,
                "options": {"all_outputs": True},
            },
        ]
    ),
    "system": st.one_of(
        st.fixed_dictionaries(
            {"type": st.just("file"), "params": st.just({"path": FILE_PATH})},
            optional={
                "models": st.dictionaries(
                    st.sampled_from(["generator", "judge"]), st.just("smollm2-135m-instruct"), max_size=1
                ),
                "description": st.just("d"),
            },
        ),
        st.fixed_dictionaries(
            {"type": st.sampled_from(["ar", "llada"])},
            optional={"params": st.sampled_from([{}, {"temperature": 0.5}])},
        ),
    ),
    "metrics": st.lists(st.sampled_from(["parse_rate", "schema_valid", "tsr"]), max_size=3, unique=True),
}
HOSTILE = {
    "name": st.sampled_from(
        ["../../escaped", "/tmp/abs", "x/y", "..", ".h", "n" * 300, "t\0", "t\udc80", ""]
    ),
    "seeds": st.one_of(
        st.integers(-3, 0),
        st.sampled_from([10**12, -(10**30), 10**99, [0, 0], [-1], [], [2**32]]),
        st.just("many"),
    ),
    "samples": st.sampled_from([0, -4, 10**9, "x", 1.5]),
    "task": st.one_of(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["dmo/booking", "superni/task_nope", "superni", "nomatch/*"])}
        ),
        st.sampled_from(
            [
                {"name": "demo/booking", "n_references": 0},
                {"name": "demo/booking", "n_references": 10**40},
                {"name": "demo/booking", "split_seed": -1},
                {"name": "demo/booking", "options": {"bogus": 1}},
                {"name": "demo/booking", "nmae": "x"},
                {"nmae": "demo/booking"},
                7,
            ]
        ),
    ),
    "system": st.sampled_from(
        [
            {"type": "fiel"},
            {"type": "file", "params": {"pth": "x"}},
            {"type": "file"},
            {"type": "ar", "params": {"temprature": 1}},
            {"type": "ar", "params": {"max_tokens": -5}},
            {"type": "ar", "typ": "x"},
            {"type": "ar", "models": {"generater": "smollm2-135m-instruct"}},
            {"type": "ar", "models": {"generator": "smolm2"}},
            {"type": "ar", "models": {"generator": {"backend": "lamacpp", "model": "x"}}},
            {"type": "ar", "models": {"embeder": "minilm-l6-v2"}},
            {"type": "ar", "models": {"generator": 7}},
            "ar",
        ]
    ),
    "system_name": st.sampled_from(["e" * 300, "bad name", "x\0", "s\udc80", ""]),
    "metrics": st.sampled_from([["schema_vlaid"], "parse_rate", [1]]),
    "expect": st.sampled_from([["ext.parse_rate >> 1"], ["nope.tsr > 0"], ["ext.bleu > 0"], "ext.tsr > 0"]),
    "yaml": st.sampled_from(
        [
            "bomb",
            "recursive",
            "deep",
            "bigint",
            "date",
            "unknown_key",
            "not_mapping",
            "bad_yaml",
            "nan",
            "dup_task",
            "dup_pattern",
        ]
    ),
}
PARTS = ["name", "seeds", "samples", "task", "system", "system_name", "metrics", "expect", "yaml"]


def bomb() -> str:
    lines = ["models:", "  b0: &b0 {backend: llama_cpp, model: x, params: {k: [x, x, x, x, x, x, x, x, x]}}"]
    for i in range(1, 10):
        refs = ", ".join([f"*b{i - 1}"] * 9)
        lines.append(f"  b{i}: &b{i} {{backend: llama_cpp, model: x, params: {{k: [{refs}]}}}}")
    return "\n".join(lines) + "\n"


def _task_name(t: object) -> object:
    return t if isinstance(t, str) else t["name"]  # type: ignore[index]


@st.composite
def suites(draw) -> tuple[str, bool]:
    """(suite text, whether it holds a hostile part and so must be refused)."""
    bad = set(draw(st.lists(st.sampled_from(PARTS), max_size=draw(st.sampled_from([0, 0, 1, 1, 2, 3])))))

    def part(name: str):
        return draw(HOSTILE[name]) if name in bad else draw(VALID[name])

    lines = [f"name: {q(part('name'))}"]
    seeds = part("seeds")
    lines.append(f"seeds: {seeds if isinstance(seeds, int) else q(seeds)}")
    lines.append(f"samples: {q(part('samples'))}")
    tasks = [draw(VALID["task"])] + ([part("task")] if "task" in bad or draw(st.booleans()) else [])
    if "task" not in bad:
        tasks = list({_task_name(t): t for t in tasks}.values())  # valid suites list a task once
    lines.append("tasks:")
    lines += [f"  - {q(t)}" for t in tasks]
    systems = [("ext", draw(VALID["system"]))]
    if "system" in bad:
        systems.append(("ext2", part("system")))
    if "system_name" in bad:
        systems.append((draw(HOSTILE["system_name"]), draw(VALID["system"])))
    lines.append("systems:")
    lines += [f"  {q(n)}: {q(c)}" for n, c in systems]
    metrics = part("metrics")
    lines.append(f"metrics: {q(metrics)}")
    if "expect" in bad:
        expect = draw(HOSTILE["expect"])
    else:  # valid expectations name a computed metric, or one the runner derives from usage
        computed = (metrics if isinstance(metrics, list) and "metrics" not in bad else []) + ["seconds"]
        expect = draw(st.lists(st.sampled_from([f"ext.{m} >= 0" for m in computed]), max_size=2))
    lines.append(f"expect: {q(expect)}")
    text = "\n".join(lines) + "\n"
    kind = draw(HOSTILE["yaml"]) if "yaml" in bad else None
    if kind == "bomb":
        text += bomb()
    elif kind == "recursive":
        text += "models:\n  r: &r {backend: llama_cpp, model: x, params: {self: *r}}\n"
    elif kind == "deep":
        text += "models:\n  d: {backend: llama_cpp, model: x, params: {k: " + "[" * 1200 + "]" * 1200 + "}}\n"
    elif kind == "bigint":
        text = text.replace("samples: ", "samples: " + "7" * 5000 + " #", 1)
    elif kind == "date":
        text += "description: 2001-12-14\n"
    elif kind == "unknown_key":
        text += "sampels: 3\n"
    elif kind == "not_mapping":
        text = "- " + text.replace("\n", "\n  ")
    elif kind == "bad_yaml":
        text += "timeout_s: [unclosed\n"
    elif kind == "nan":
        text += "timeout_s: .nan\n"
    elif kind == "dup_task":  # the same task twice with different options (issue 11, item 2)
        text = text.replace(
            "tasks:\n", "tasks:\n  - {name: demo/booking, n_references: 2}\n  - {name: demo/booking}\n", 1
        )
    elif kind == "dup_pattern":  # a pattern that expands to a task listed explicitly
        text = text.replace("tasks:\n", "tasks:\n  - {name: multiwoz/hotel}\n  - {name: multiwoz/*}\n", 1)
    return text, bool(bad)


def cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    text = err.getvalue()
    assert "Traceback" not in text, text
    return rc, text


class Hang(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001
    raise Hang(f"one fuzzed suite took more than {HANG_S} s")


@pytest.mark.slow  # ~10 s of CPU for 200 examples; 40-60 s of wall time on a loaded 2-core machine
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples in CI every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(case=suites())
def test_fuzzed_suites(case: tuple[str, bool]) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        _check_one(*case)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _check_one(text: str, hostile: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suite.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        rc, err = cli(["validate", str(path)])
        assert rc in (0, 2), (rc, err)
        # the oracle: every hostile part is invalid on its own, every valid combination is runnable
        assert rc == (2 if hostile else 0), ("accepted an invalid suite" if hostile else err, text)
        if rc == 2:
            event("refused by validate")
            assert err.startswith("error: "), err
            lines = err.strip().splitlines()
            assert all(ln.startswith("error: ") for ln in lines), err
            err.encode("utf-8")  # printable: no lone surrogate reaches the terminal
            return
        # accepted: the dry run and the run must accept it too
        rc_dry, err_dry = cli(["run", str(path), "--dry-run"])
        assert rc_dry == 0, (text, err_dry)
        from bench.checks import prepare_suite
        from bench.runner import RunOptions, plan_jobs

        sf = prepare_suite(path)
        cheap = {"parse_rate", "schema_valid", "tsr"}  # metrics that load no model
        if (
            all(cfg.type == "file" for cfg in sf.suite.systems.values())
            and set(sf.suite.metric_list()) <= cheap
            and len(sf.suite.seed_list()) * len(sf.suite.tasks) <= 6
        ):
            saved = os.environ.get("BENCH_NO_HTML")
            os.environ["BENCH_NO_HTML"] = "1"  # the report page is not what this test is about
            try:
                rc_run, err_run = cli(
                    ["run", str(path), "--out", str(Path(tmp) / "run"), "--workers", "0"]
                    + ["--no-progress", "--no-cache"]
                )
            finally:
                if saved is None:
                    os.environ.pop("BENCH_NO_HTML", None)
                else:
                    os.environ["BENCH_NO_HTML"] = saved
            assert rc_run in (0, 1), (text, err_run)
            event("accepted, then run for real")  # 1 = an expectation or a cell failed: a result
        else:
            jobs, _, _ = plan_jobs(sf, Path(tmp) / "run", RunOptions(use_cache=False, progress=False))
            assert jobs
            event("accepted, then planned by the runner")
