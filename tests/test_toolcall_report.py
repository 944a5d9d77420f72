"""The tool-call report (reports/toolcalls.py) on run directories written through the real store.

The numbers are chosen so every figure has a hand computation: seconds per item is usage seconds over the
cell's samples, the speed ratio AR s/item over DLM s/item, matched accuracy a mean difference within 0.05
and a paired t-test at p >= 0.05, the headline a geometric mean over matched tasks only.
"""

from __future__ import annotations

import math

from reports.fixtures import write_run
from reports.toolcalls import cell_rows, headline, render_markdown, speed_ratios, system_types, write

SEEDS = [0, 1, 2]
TYPES = {"systems": {"dlm": {"type": "llada-skeleton"}, "ar": {"type": "ar"}}}


def _run(tmp_path, dlm_acc, ar_acc):
    values = {
        ("dlm", "bfcl/simple_python"): {"ast_accuracy": dlm_acc[0]},
        ("ar", "bfcl/simple_python"): {"ast_accuracy": ar_acc[0]},
        ("dlm", "bfcl/multiple"): {"ast_accuracy": dlm_acc[1]},
        ("ar", "bfcl/multiple"): {"ast_accuracy": ar_acc[1]},
    }
    samples = {(s, t, k): [{"text": "{}"}] * 4 for (s, t) in values for k in SEEDS}
    # 4 samples per cell: DLM 2 s (0.5 s/item), AR 8 s on simple_python (2 s/item), 4 s on multiple (1 s/item)
    usage = {}
    for k in SEEDS:
        usage[("dlm", "bfcl/simple_python", k)] = {"seconds": 2.0, "nfe": 48, "tokens_out": 40}
        usage[("dlm", "bfcl/multiple", k)] = {"seconds": 2.0, "nfe": 48, "tokens_out": 40}
        usage[("ar", "bfcl/simple_python", k)] = {"seconds": 8.0, "tokens_out": 80}
        usage[("ar", "bfcl/multiple", k)] = {"seconds": 4.0, "tokens_out": 80}
    return write_run(
        tmp_path / "run", values, seeds=SEEDS, samples=samples, usage=usage, manifest={"suite": TYPES}
    )


def test_seconds_per_item_and_ratios_from_usage(tmp_path):
    run = _run(tmp_path, ([0.5, 0.51, 0.49], [0.3, 0.3, 0.3]), ([0.5, 0.5, 0.5], [0.9, 0.8, 0.85]))
    rows = cell_rows(run)
    assert {(r.system, r.task, r.seconds_per_item) for r in rows if r.seed == 0} == {
        ("dlm", "bfcl/simple_python", 0.5),
        ("dlm", "bfcl/multiple", 0.5),
        ("ar", "bfcl/simple_python", 2.0),
        ("ar", "bfcl/multiple", 1.0),
    }
    assert next(r.nfe_per_item for r in rows if r.system == "dlm") == 12.0
    ratios = {r.task: r for r in speed_ratios(rows, system_types(run))}
    assert ratios["bfcl/simple_python"].ratio == 4.0 and ratios["bfcl/simple_python"].matched
    assert ratios["bfcl/multiple"].ratio == 2.0 and not ratios["bfcl/multiple"].matched  # 0.3 vs 0.85
    g, k, n = headline(list(ratios.values()), "dlm", "ar")
    assert (g, k, n) == (4.0, 1, 2)  # only the matched task counts
    text = render_markdown(run)
    assert "dlm vs ar: 4.00x (geometric mean over the 1 of 2 tasks at matched accuracy)" in text


def test_no_matched_task_gives_no_headline(tmp_path):
    run = _run(tmp_path, ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), ([0.6, 0.7, 0.5], [0.9, 0.8, 0.85]))
    g, k, n = headline(speed_ratios(cell_rows(run), system_types(run)), "dlm", "ar")
    assert math.isnan(g) and (k, n) == (0, 2)
    assert "no task at matched accuracy (of 2); no headline ratio" in render_markdown(run)
    files = write(run)
    assert files[0].name == "toolcalls.md" and any(p.suffix == ".png" for p in files)


def test_two_systems_that_solve_nothing_are_not_matched(tmp_path):
    run = _run(tmp_path, ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), ([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]))
    assert not any(r.matched for r in speed_ratios(cell_rows(run), system_types(run)))


def test_separate_ar_and_dlm_runs_read_as_one(tmp_path):
    """AR and DLM run apart: the report of both runs equals the report of one run holding both."""
    one = _run(tmp_path, ([0.5, 0.51, 0.49], [0.3, 0.3, 0.3]), ([0.5, 0.5, 0.5], [0.9, 0.8, 0.85]))
    parts = {}
    for system in ("dlm", "ar"):
        values = {(system, t): {"ast_accuracy": v} for t, v in
                  {"bfcl/simple_python": [0.5, 0.51, 0.49] if system == "dlm" else [0.5] * 3,
                   "bfcl/multiple": [0.3] * 3 if system == "dlm" else [0.9, 0.8, 0.85]}.items()}  # fmt: skip
        samples = {(s, t, k): [{"text": "{}"}] * 4 for (s, t) in values for k in SEEDS}
        usage = {
            (system, t, k): (
                {"seconds": 2.0, "nfe": 48, "tokens_out": 40}
                if system == "dlm"
                else {"seconds": sec, "tokens_out": 80}
            )
            for t, sec in (("bfcl/simple_python", 8.0), ("bfcl/multiple", 4.0))
            for k in SEEDS
        }
        manifest = {"suite": {"systems": {system: TYPES["systems"][system]}}}
        parts[system] = write_run(
            tmp_path / system, values, seeds=SEEDS, samples=samples, usage=usage, manifest=manifest
        )
    both = [parts["ar"], parts["dlm"]]
    key = lambda r: (r.system, r.task, r.seed)  # noqa: E731
    assert sorted(map(key, cell_rows(both))) == sorted(map(key, cell_rows(one)))
    assert [(r.task, r.ratio, r.matched) for r in speed_ratios(cell_rows(both), system_types(both))] == [
        (r.task, r.ratio, r.matched) for r in speed_ratios(cell_rows(one), system_types(one))
    ]
    assert "dlm vs ar: 4.00x" in render_markdown(both)
    out = tmp_path / "combined"
    files = write(both, out)
    assert files[0] == out / "toolcalls.md" and (out / "plots").is_dir()


def test_overlapping_runs_are_an_error_naming_both(tmp_path):
    import pytest

    from bench.errors import BenchError

    a = _run(tmp_path / "a", ([0.5] * 3, [0.3] * 3), ([0.5] * 3, [0.9] * 3))
    b = _run(tmp_path / "b", ([0.5] * 3, [0.3] * 3), ([0.5] * 3, [0.9] * 3))
    with pytest.raises(BenchError, match=r"is in both .*a.* and .*b"):
        cell_rows([a, b])
    from reports.toolcalls import main

    assert main([str(a), str(b)]) == 2


def test_a_side_that_generated_nothing_is_never_matched(tmp_path):
    """Equal accuracy, but the DLM side made no model call (no output token): the ratio is shown, not
    matched, so it cannot become a headline (the skeleton's zero-call answer on irrelevance)."""
    values = {("dlm", "bfcl/irrelevance"): {"irrelevance_accuracy": [1.0] * 3},
              ("ar", "bfcl/irrelevance"): {"irrelevance_accuracy": [1.0] * 3}}  # fmt: skip
    samples = {(s, t, k): [{"text": "{}"}] * 4 for (s, t) in values for k in SEEDS}
    usage = {("dlm", "bfcl/irrelevance", k): {"seconds": 1e-4, "tokens_out": 0} for k in SEEDS}
    usage |= {("ar", "bfcl/irrelevance", k): {"seconds": 8.0, "tokens_out": 80} for k in SEEDS}
    run = write_run(
        tmp_path / "run", values, seeds=SEEDS, samples=samples, usage=usage, manifest={"suite": TYPES}
    )
    (r,) = speed_ratios(cell_rows(run), system_types(run))
    assert abs(r.ratio - 8.0 / 1e-4) < 1e-6 * r.ratio and not r.matched
