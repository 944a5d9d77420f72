"""A bounded hypothesis fuzzer over suite files: 0 tracebacks, 0 hangs, and nothing that `bench validate`
accepts is then refused by `bench run --dry-run` or by the run itself.

Suites are built from pieces that are valid, misspelled or hostile (names with NUL, lone surrogates, path
escapes or 300 characters; huge and negative seeds; unknown tasks; twice-listed tasks; misspelled model
roles and presets; alias bombs, recursive aliases, deep nesting, 5000-digit integers, YAML dates).
Accepted suites made only of `file` systems are run for real (no model needed); the others go through
the run's own planning (`prepare_suite` + `plan_jobs`), which is everything a run does before a model
loads. Runs in about 20-40 s on a loaded 2-core machine with 200 examples (`FUZZ_EXAMPLES` to change).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
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

names = st.sampled_from(
    ["fz", "fz-1", "a.b", "../../escaped", "/tmp/abs", "x/y", "..", "n" * 300, "t\0", "t\udc80", "", "ok name"]
)
system_names = st.sampled_from(["ext", "ext2", "a-b_c", "e" * 300, "bad name", "x\0", "s\udc80", "dup"])
seeds = st.one_of(
    st.integers(-3, 4),
    st.sampled_from([10**12, -(10**30), 10**100]),
    st.lists(st.integers(-2, 5), max_size=4),
    st.just("many"),
)
task_names = st.sampled_from(
    [
        "demo/booking",
        "demo/booking",
        "dmo/booking",
        "superni/task_nope",
        "superni",
        "multiwoz/hotel",
        "superni/task1192_food_flavor_profile",
        "multiwoz/*",
        "nomatch/*",
    ]
)
task_entries = st.fixed_dictionaries(
    {"name": task_names},
    optional={
        "n_references": st.sampled_from([1, 4, 8, 0, -1, 10**40]),
        "n_holdout": st.sampled_from([2, 8, 0]),
        "split_seed": st.sampled_from([0, 1, -1, 10**30]),
        "options": st.sampled_from([{}, {"bogus": 1}, {"all_outputs": True}]),
        "nmae": st.just("x"),
    },
)
presets = st.sampled_from(["smollm2-135m-instruct", "smolm2", "minilm-l6-v2", {"backend": "lamacpp", "model": "x"}])
roles = st.sampled_from(["generator", "generater", "dlm", "judge", "embeder"])
system_cfgs = st.one_of(
    st.fixed_dictionaries(
        {"type": st.just("file"), "params": st.sampled_from([{"path": FILE_PATH}, {"pth": "x"}, {}])},
        optional={"models": st.dictionaries(roles, presets, max_size=2), "description": st.just("d")},
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["ar", "llada", "fiel", "aod"])},
        optional={
            "params": st.sampled_from([{}, {"temperature": 0.5}, {"temprature": 1}, {"max_tokens": -5}]),
            "models": st.dictionaries(roles, presets, max_size=2),
            "typ": st.just("x"),
        },
    ),
)
metric_lists = st.lists(st.sampled_from(["parse_rate", "schema_valid", "tsr", "schema_vlaid"]), max_size=3)
expects = st.lists(
    st.sampled_from(["ext.parse_rate > 0.1", "ext.parse_rate >> 1", "nope.tsr > 0", "ext.bleu > 0", "ext.seconds > 0"]),
    max_size=2,
)
hostile = st.sampled_from(
    [
        None,
        None,
        None,
        "bomb",
        "recursive",
        "deep",
        "bigint",
        "date",
        "unknown_key",
        "not_mapping",
        "bad_yaml",
        "nan",
    ]
)


def bomb() -> str:
    lines = ["models:", "  b0: &b0 {backend: llama_cpp, model: x, params: {k: [x, x, x, x, x, x, x, x, x]}}"]
    for i in range(1, 10):
        refs = ", ".join([f"*b{i - 1}"] * 9)
        lines.append(f"  b{i}: &b{i} {{backend: llama_cpp, model: x, params: {{k: [{refs}]}}}}")
    return "\n".join(lines) + "\n"


@st.composite
def suites(draw) -> str:
    lines = [f"name: {q(draw(names))}"]
    s = draw(seeds)
    lines.append(f"seeds: {q(s) if not isinstance(s, int) or abs(s) < 10**15 else s}")
    lines.append(f"samples: {draw(st.sampled_from([1, 2, 3, 0, -4]))}")
    tasks = draw(st.lists(task_entries, min_size=1, max_size=3))
    lines.append("tasks:")
    lines += [f"  - {q(t)}" for t in tasks]
    systems = draw(st.lists(st.tuples(system_names, system_cfgs), min_size=1, max_size=3))
    lines.append("systems:")
    lines += [f"  {q(n)}: {q(c)}" for n, c in systems]
    if draw(st.booleans()):
        lines.append(f"metrics: {q(draw(metric_lists))}")
    lines.append(f"expect: {q(draw(expects))}")
    text = "\n".join(lines) + "\n"
    kind = draw(hostile)
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
        text += "expect: [unclosed\n"
    elif kind == "nan":
        text += "timeout_s: .nan\n"
    return text


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


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same examples in CI every time
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(text=suites())
def test_fuzzed_suites(text: str) -> None:
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        _check_one(text)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _check_one(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "suite.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        rc, err = cli(["validate", str(path)])
        assert rc in (0, 2), (rc, err)
        if rc == 2:
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
        if all(cfg.type == "file" for cfg in sf.suite.systems.values()) and len(sf.suite.seed_list()) <= 3:
            os.environ["BENCH_NO_HTML"] = "1"
            rc_run, err_run = cli(
                ["run", str(path), "--out", str(Path(tmp) / "run"), "--workers", "0", "--no-progress", "--no-cache"]
            )
            assert rc_run in (0, 1), (text, err_run)  # 1 = an expectation or a cell failed: a result
        else:
            jobs, _, _ = plan_jobs(sf, Path(tmp) / "run", RunOptions(use_cache=False, progress=False))
            assert jobs
