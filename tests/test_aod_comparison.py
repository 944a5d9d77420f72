"""benchmarks.aod.comparison: Holm's adjustment by its definition, and the tables from a written run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from benchmarks.aod.comparison import holm, metric_table, paired_rows
from reports.fixtures import write_run


def _holm_by_definition(p: list[float]) -> list[float]:
    """Holm (1979): reject H_(1..k) while p_(j) <= alpha / (m - j + 1); the adjusted p-value of H_(k) is
    the smallest alpha at which it is rejected, searched over a fine grid of alphas."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out = [1.0] * m
    for alpha in np.linspace(0.0, 1.0, 100_001):
        for j, i in enumerate(order):
            if p[i] > alpha / (m - j):
                break
            out[i] = min(out[i], alpha)
    return out


@pytest.mark.parametrize(
    "p", [[0.01, 0.04, 0.03, 0.005], [0.2, 0.2, 0.001], [0.5], [0.03, 0.9, 0.011, 0.02, 0.4]]
)
def test_holm_matches_its_definition(p):
    assert holm(p) == pytest.approx(_holm_by_definition(p), abs=2e-5)


def test_holm_leaves_nan_out_of_the_family():
    adjusted = holm([0.01, math.nan, 0.02])
    assert (
        adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.02)
    )


def test_tables_from_a_run(tmp_path):
    rng = np.random.default_rng(5)
    base = rng.normal(0.4, 0.1, 10)
    systems = {"llada": base, "aod": base + 0.05, "aod-norl": base + rng.normal(0, 0.01, 10)}
    run = write_run(tmp_path / "r", {(s, "multiwoz/train"): {"tsr": v.tolist()} for s, v in systems.items()})
    means = {r["system"]: r for r in metric_table(run, ("tsr",))}
    assert means["aod"]["mean"] == pytest.approx(systems["aod"].mean())
    assert means["aod"]["std"] == pytest.approx(systems["aod"].std(ddof=1))
    rows = paired_rows(run, "llada", ("tsr",))
    pairs = {(r["against"], r["system"]) for r in rows}
    assert pairs == {("llada", "aod"), ("llada", "aod-norl"), ("aod-norl", "aod")}
    raw = [r["p_ttest"] for r in rows]
    assert [r["p_ttest_holm"] for r in rows] == pytest.approx(holm(raw))
    assert all(r["p_ttest_holm"] >= r["p_ttest"] for r in rows)
    (aod,) = [r for r in rows if (r["against"], r["system"]) == ("llada", "aod")]
    assert aod["diff"] == pytest.approx(0.05) and aod["n_shared"] == 10


def test_check_failure_shares_count_records_not_checks(tmp_path):
    from benchmarks.aod.comparison import check_failures, search_summary

    fail = {"text": "{}", "scored": {"tsr_failures": ["check:duration_matches", "check:departure_differs"]}}
    half = {"text": "{}", "scored": {"tsr_failures": ["check:duration_matches", "copy_of_reference"]}}
    clean = {"text": "{}", "scored": {"tsr_failures": []}}
    samples = {("llada", "multiwoz/train", 0): [fail, half], ("llada", "multiwoz/train", 1): [clean, fail]}
    samples |= {("aod", "multiwoz/train", k): v for (_, _, k), v in samples.items()}
    values = {(s, "multiwoz/train"): {"tsr": [0.0, 0.5]} for s in ("llada", "aod")}
    run = write_run(tmp_path / "r", values, seeds=[0, 1], samples=samples)
    (row,) = [r for r in check_failures(run) if r["system"] == "llada"]
    assert row["records"] == 4
    assert row["failing"] == {"duration_matches": 0.75, "departure_differs": 0.5}  # not copy_of_reference
    same = {r["system"]: r["same_as_reference"] for r in search_summary(run, "llada")}
    assert same == {"llada": None, "aod": 2}  # aod's records are llada's, byte for byte, on both seeds


def test_edit_kinds_from_traces(tmp_path):
    """Counts per edit kind from candidate events; `unchanged` is an exactly zero paired difference."""
    import json

    from bench.store import RunStore
    from benchmarks.aod.comparison import edit_kinds

    run = write_run(tmp_path / "r", {("aod", "multiwoz/train"): {"tsr": [0.0]}}, seeds=[0])
    events = [
        {"event": "aod_iteration", "role": "incumbent", "edit_kind": None},
        {"event": "aod_iteration", "role": "candidate", "edit_kind": "rewrite_instruction",
         "paired_difference": 0.0, "accepted": False},
        {"event": "aod_iteration", "role": "candidate", "edit_kind": "rewrite_instruction",
         "paired_difference": 0.02, "accepted": False},
        {"event": "aod_iteration", "role": "candidate", "edit_kind": "set_hint",
         "paired_difference": 0.1, "accepted": True},
    ]  # fmt: skip
    (cell,) = list(RunStore(run).iter_cells())
    (cell.path / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rows = {r["kind"]: r for r in edit_kinds(run)}
    assert rows["rewrite_instruction"]["n"] == 2 and rows["rewrite_instruction"]["unchanged"] == 0.5
    assert rows["rewrite_instruction"]["mean_difference"] == pytest.approx(0.01)
    assert rows["set_hint"]["kept"] == 1 and rows["set_hint"]["unchanged"] == 0.0


def test_two_runs_read_as_one_and_an_overlap_is_refused(tmp_path):
    """Re-running the systems a change touched next to an earlier run of the others: the tables of the
    two runs together equal the tables of one run with every system; a cell in both is an error."""
    from bench.errors import BenchError

    rng = np.random.default_rng(9)
    base = rng.normal(0.4, 0.1, 10)
    systems = {"llada": base, "aod": base + 0.05, "promptbreeder": base + rng.normal(0, 0.02, 10)}
    values = {(s, "multiwoz/train"): {"tsr": v.tolist()} for s, v in systems.items()}
    whole = write_run(tmp_path / "whole", values)
    first = write_run(tmp_path / "a", {k: v for k, v in values.items() if k[0] != "promptbreeder"})
    second = write_run(tmp_path / "b", {k: v for k, v in values.items() if k[0] == "promptbreeder"})
    assert paired_rows([first, second], "llada", ("tsr",)) == paired_rows(whole, "llada", ("tsr",))
    assert metric_table([first, second], ("tsr",)) == metric_table(whole, ("tsr",))
    with pytest.raises(BenchError, match=r"cell \S+/multiwoz/train/seed-0 is in both .*/a and .*/whole"):
        paired_rows([first, whole], "llada", ("tsr",))
    # DIR=systems takes only those systems from a run: the stale cells of the others stay out
    picked = [first, Path(f"{whole}=promptbreeder")]
    assert paired_rows(picked, "llada", ("tsr",)) == paired_rows(whole, "llada", ("tsr",))


def test_policy_divergence_compares_the_two_policies_round_by_round(tmp_path):
    """Same kinds until the learned policy's draws cross over; identical records counted from samples;
    the learned policy's final probabilities averaged over seeds."""
    import json

    from bench.store import RunStore
    from benchmarks.aod.comparison import policy_divergence, render_markdown

    values = {(s, "multiwoz/train"): {"tsr": [0.0, 0.5]} for s in ("aod", "aod-norl")}
    same = [{"text": '{"a": 1}'}]
    samples = {("aod", "multiwoz/train", 0): same, ("aod-norl", "multiwoz/train", 0): same}
    samples |= {("aod", "multiwoz/train", 1): same, ("aod-norl", "multiwoz/train", 1): [{"text": "{}"}]}
    run = write_run(tmp_path / "r", values, seeds=[0, 1], samples=samples)

    def cand(kind: str, probs: dict[str, float] | None = None) -> dict:
        ev = {"event": "aod_iteration", "role": "candidate", "edit_kind": kind}
        return ev | ({"policy": {"probs": probs}} if probs else {})

    learned = {
        0: [cand("set_hint", {"set_hint": 0.5, "add_note": 0.5}), cand("add_note", {"set_hint": 0.7, "add_note": 0.3})],
        1: [cand("set_hint", {"set_hint": 0.4, "add_note": 0.6}), cand("set_hint", {"set_hint": 0.2, "add_note": 0.8})],
    }  # fmt: skip
    frozen_update = {"policy": {"frozen": True, "probs": {"set_hint": 0.5, "add_note": 0.5}}}
    frozen = {k: [cand("set_hint") | frozen_update, cand("set_hint") | frozen_update] for k in (0, 1)}
    incumbent = {"event": "aod_iteration", "role": "incumbent", "edit_kind": None}
    for cell in RunStore(run).iter_cells():
        events = (learned if cell.key.system == "aod" else frozen)[int(cell.key.seed)]
        (cell.path / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in [incumbent, *events]))
    (row,) = policy_divergence(run)  # aod-norl's frozen updates do not count as a learned policy
    assert row["system"] == "aod" and row["seeds"] == 2 and row["rounds"] == 4
    assert row["same_kind"] == pytest.approx(3 / 4)
    assert row["first_difference"] == [1, None]
    assert row["identical_records"] == 1
    assert row["final_probs"] == pytest.approx({"add_note": (0.3 + 0.8) / 2, "set_hint": (0.7 + 0.2) / 2})
    text = render_markdown([], [], [], ("tsr",), divergence=[row])
    assert "| aod | multiwoz/train | 2 | 4 | 0.75 | 1, – | 1 | add_note 0.55, set_hint 0.45 |" in text


def test_incumbent_curve_averages_each_round_over_seeds(tmp_path):
    """The incumbent's fresh-batch reward and tsr per round, mean over seeds, candidates ignored; the
    Markdown shows round 1, every sixth round and the last."""
    import json

    from bench.store import RunStore
    from benchmarks.aod.comparison import incumbent_curve, render_markdown

    values = {(s, "multiwoz/train"): {"tsr": [0.0, 0.5]} for s in ("aod", "aod-norl", "llada")}
    run = write_run(tmp_path / "r", values, seeds=[0, 1])
    for cell in RunStore(run).iter_cells():
        if cell.key.system == "llada":
            continue  # no search, no trace events
        shift = {"aod": 0.1, "aod-norl": 0.0}[cell.key.system] + 0.01 * int(cell.key.seed)
        events = []
        for rnd in range(1, 8):
            reward, tsr = 0.5 + shift + 0.01 * rnd, min(1.0, 0.1 * rnd)
            events += [
                {"event": "aod_iteration", "role": "incumbent", "round": rnd, "reward": reward,
                 "metrics": {"tsr": tsr}},
                {"event": "aod_iteration", "role": "candidate", "round": rnd, "reward": 9.0,
                 "metrics": {"tsr": 9.0}},
            ]  # fmt: skip
        (cell.path / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    rows = {(r["system"], r["round"]): r for r in incumbent_curve(run)}
    assert {s for s, _ in rows} == {"aod", "aod-norl"}  # llada has no incumbent events
    assert {r["system"] for r in incumbent_curve(run, systems=("aod",))} == {"aod"}
    assert rows[("aod", 3)]["reward"] == pytest.approx(0.5 + 0.1 + 0.005 + 0.03)
    assert rows[("aod-norl", 7)]["tsr"] == pytest.approx(0.7) and rows[("aod-norl", 7)]["seeds"] == 2
    text = render_markdown([], [], [], ("tsr",), curve=list(rows.values()))
    shown = [line.split(" | ")[1] for line in text.splitlines() if line.startswith("| multiwoz/train |")]
    assert shown == ["1", "6", "7"]
    assert "| multiwoz/train | 6 | 0.665 / 0.600 | 0.565 / 0.600 |" in text


def test_every_learned_policy_variant_is_tested_against_the_frozen_policy(tmp_path):
    """A system whose traces show a learned policy (here `aod` under another name) gets a paired test
    against `aod-norl`; systems without traces do not."""
    import json

    from bench.store import RunStore
    from benchmarks.aod.comparison import learned_policy_systems

    rng = np.random.default_rng(2)
    base = rng.normal(0.4, 0.1, 10)
    systems = {"llada": base, "aod-norl": base + 0.1, "aod-realized": base + 0.2}
    run = write_run(tmp_path / "r", {(s, "multiwoz/train"): {"tsr": v.tolist()} for s, v in systems.items()})
    update = {"event": "aod_iteration", "role": "candidate", "edit_kind": "add_note"}
    for cell in RunStore(run).iter_cells():
        if cell.key.system == "aod-realized":
            ev = update | {"policy": {"probs": {"add_note": 0.6, "set_hint": 0.4}}}
        elif cell.key.system == "aod-norl":
            ev = update | {"policy": {"frozen": True, "probs": {"add_note": 0.5, "set_hint": 0.5}}}
        else:
            continue
        (cell.path / "trace.jsonl").write_text(json.dumps(ev) + "\n")
    assert learned_policy_systems(run) == ["aod-realized"]
    rows = paired_rows(run, "llada", ("tsr",))
    pairs = {(r["against"], r["system"]): r for r in rows}
    assert set(pairs) == {("llada", "aod-norl"), ("llada", "aod-realized"), ("aod-norl", "aod-realized")}
    assert pairs[("aod-norl", "aod-realized")]["diff"] == pytest.approx(0.1)
    # With aod-norl as the reference the learned-policy pair is one of the reference's pairs: listed once,
    # so Holm's family is the two distinct tests.
    against_norl = paired_rows(run, "aod-norl", ("tsr",))
    keys = [(r["against"], r["system"]) for r in against_norl]
    assert sorted(keys) == [("aod-norl", "aod-realized"), ("aod-norl", "llada")]
    assert [r["p_ttest_holm"] for r in against_norl] == pytest.approx(
        holm([r["p_ttest"] for r in against_norl])
    )


def _trace(cell_path: Path, events: list[dict]) -> None:
    import json

    (cell_path / "trace.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def test_a_policy_with_a_prior_counts_as_learned_even_when_frozen(tmp_path):
    from bench.store import RunStore
    from benchmarks.aod.comparison import learned_policy_systems

    values = {(s, "multiwoz/train"): {"tsr": [0.1, 0.2]} for s in ("aod-norl", "aod-prior")}
    run = write_run(tmp_path / "r", values, seeds=[0, 1])
    frozen = {"event": "aod_iteration", "role": "candidate", "edit_kind": "add_note",
              "policy": {"frozen": True, "probs": {"add_note": 0.5, "set_hint": 0.5}}}  # fmt: skip
    for cell in RunStore(run).iter_cells():
        prior = {"add_note": 0.8, "set_hint": 0.2} if cell.key.system == "aod-prior" else None
        _trace(cell.path, [{"event": "aod_start", "policy_prior": prior}, frozen])
    assert learned_policy_systems(run) == ["aod-prior"]


def test_policy_prior_reads_one_systems_rounds_in_the_given_seeds(tmp_path, capsys):
    """Per kind: every candidate round of `--system` in those seeds (other seeds and systems left out),
    and the printed prior is `boltzmann_prior` of exactly those differences."""
    import json

    from bench.store import RunStore
    from benchmarks.aod.policy_prior import kind_differences, main, parse_seeds
    from systems.optimizers.edits import EDIT_KINDS
    from systems.optimizers.policy import boltzmann_prior

    assert parse_seeds("0-2,6") == [0, 1, 2, 6] and parse_seeds("5") == [5]
    with pytest.raises(ValueError, match="backwards"):
        parse_seeds("4-1")
    values = {(s, "multiwoz/train"): {"tsr": [0.0, 0.0, 0.0]} for s in ("aod-norl", "aod")}
    run = write_run(tmp_path / "r", values, seeds=[0, 1, 2])

    def cand(kind: str, d: float, kept: bool = False) -> dict:
        return {"event": "aod_iteration", "role": "candidate", "edit_kind": kind,
                "paired_difference": d, "accepted": kept}  # fmt: skip

    rounds = {
        0: [cand("add_note", 0.1, True), cand("set_hint", -0.2), cand("add_note", 0.0)],
        1: [cand("set_hint", -0.1), cand("add_note", 0.2), cand("rewrite_instruction", 0.0)],
        2: [cand("add_note", 9.0), cand("set_hint", 9.0)],  # not asked for
    }
    for cell in RunStore(run).iter_cells():
        seed = int(cell.key.seed)
        _trace(cell.path, rounds[seed] if cell.key.system == "aod-norl" else [cand("add_note", -9.0)])
    diffs, kept, found = kind_differences([run], "aod-norl", "multiwoz/train", [0, 1, 7])
    assert found == [0, 1]
    assert diffs == {"add_note": [0.1, 0.0, 0.2], "set_hint": [-0.2, -0.1], "rewrite_instruction": [0.0]}
    assert kept == {"add_note": 1, "set_hint": 0, "rewrite_instruction": 0}
    out = tmp_path / "prior.json"
    assert main([str(run), "--task", "multiwoz/train", "--seeds", "0-1", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["prior"] == pytest.approx(boltzmann_prior(diffs, EDIT_KINDS))
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("policy_prior: {")]
    assert line and all(k in line[0] for k in EDIT_KINDS)
    with pytest.raises(SystemExit):  # a seed without a finished cell is an error, not a smaller prior
        main([str(run), "--task", "multiwoz/train", "--seeds", "0-3"])


def test_policy_prior_line_keeps_a_tiny_weight_positive():
    """The printed `policy_prior:` line is what a suite pastes. A kind far below the others (7.8e-6, as
    `remove_hint` at mean D -0.24 on the default build) must stay positive in it, or the system refuses
    the suite; four decimals printed it as 0.0000, and `1e-05` would have been read as a string."""
    import yaml

    from benchmarks.aod.policy_prior import prior_line
    from systems.optimizers.edits import EDIT_KINDS
    from systems.optimizers.policy import check_prior

    prior = {k: 0.0023 for k in EDIT_KINDS} | {
        "vary_together": 0.9887,
        "remove_hint": 7.81e-6,
        "add_note": 1e-5,
    }
    pasted = yaml.safe_load(prior_line(prior))["policy_prior"]  # 1e-05 alone would load as a string
    check_prior(pasted, EDIT_KINDS)
    assert pasted == pytest.approx(prior, rel=1e-3)


def test_pool_rows_replays_each_distinct_kept_pool_as_a_llada_system(tmp_path, capsys):
    """`kept_pools`: only kept `vary_together` edits, each distinct row set once, only over the first
    pool's fields; `pool_suite` loads as a suite with one llada system per row set on the base suite's
    DLM and seeds; `analyze` prints each row set's mean and Friedman's test, whose statistic is scipy's."""
    import yaml
    from scipy.stats import friedmanchisquare

    from bench.store import RunStore
    from bench.suite import load_suite
    from benchmarks.aod.pool_rows import kept_pools, main, pool_suite, row_set_table

    duration = ["arriveBy", "duration", "leaveAt"]
    rows_a, rows_b = [["10:00", "60 minutes", "09:00"]], [["12:30", "30 minutes", "12:00"]]

    def pool(fields: list[str], rows: list, kept: bool = True) -> dict:
        return {"event": "aod_iteration", "role": "candidate", "edit_kind": "vary_together",
                "accepted": kept, "edit": {"kind": "vary_together", "fields": fields, "rows": rows}}  # fmt: skip

    values = {(s, "multiwoz/train"): {"tsr": [0.0, 0.0]} for s in ("aod-norl", "aod-prior")}
    run = write_run(tmp_path / "r", values, seeds=[0, 1])
    traces = {
        ("aod-norl", 0): [pool(duration, rows_b, kept=False), pool(duration, rows_a)],
        ("aod-norl", 1): [pool(["departure", "destination"], [["Ely", "Cambridge"]]), pool(duration, rows_b)],
        ("aod-prior", 0): [pool(duration, rows_a)],  # the same rows as aod-norl seed 0: listed once
        ("aod-prior", 1): [],
    }
    for cell in RunStore(run).iter_cells():
        _trace(cell.path, traces[(cell.key.system, int(cell.key.seed))])
    pools = kept_pools(run, "multiwoz/train")
    assert [(p["rows"], p["source"]) for p in pools] == [
        (rows_a, "aod-norl/seed-0"),
        (rows_b, "aod-norl/seed-1"),
    ]

    base = yaml.safe_load(Path("suites/aod_rl_prior_transfer.yaml").read_text())
    suite = pool_suite(base, pools, "mdlm-1800-threshold", "multiwoz/train")
    path = tmp_path / "pool_rows.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    loaded = load_suite(path).suite  # every check a run makes
    assert sorted(loaded.systems) == ["rows-0", "rows-1"] and loaded.seed_list() == list(range(10))
    assert suite["systems"]["rows-1"]["params"]["joint_pools"] == [{"fields": duration, "rows": rows_b}]
    with pytest.raises(ValueError, match="no joint pool"):
        pool_suite(base, [], "mdlm-1800-threshold", "multiwoz/train")

    scores = {"rows-0": [0.5, 0.25, 0.0], "rows-1": [0.5, 0.5, 0.125], "rows-2": [0.75, 0.5, 0.25]}
    replay = write_run(
        tmp_path / "p", {(s, "multiwoz/train"): {"tsr": v} for s, v in scores.items()}, seeds=[0, 1, 2]
    )
    systems, seeds, matrix = row_set_table(replay, "multiwoz/train", "tsr")
    assert systems == ["rows-0", "rows-1", "rows-2"] and seeds == [0, 1, 2]
    assert matrix == [[0.5, 0.5, 0.75], [0.25, 0.5, 0.5], [0.0, 0.125, 0.25]]
    assert main(["analyze", str(replay)]) == 0
    stat, p = friedmanchisquare(*scores.values())
    assert f"Friedman chi2 {stat:.2f}, p {p:.3g}" in capsys.readouterr().out


def test_replay_rebuilds_each_kept_prompt_and_tests_the_replayed_values(tmp_path, capsys):
    """`replay suite`: the prompt a cell kept comes from its final event's `prompt_params`, or is rebuilt
    from the kept edits (checked against the trace's text: a tampered trace is refused); the best
    rejected candidates after the first kept edit come with their incumbents. `analyze`: the paired test
    of two systems is scipy's `ttest_rel` over source seeds, and a system against the plain reference is
    a one-sample t-test of the differences."""
    import json

    from scipy.stats import ttest_1samp, ttest_rel

    from bench.store import RunStore
    from bench.suite import load_suite
    from bench.tasks import load_task
    from benchmarks.aod.replay import analyze, main, replay_plan
    from systems.optimizers.base import make_generator, steer_params, template_text
    from systems.optimizers.edits import PromptEdit, apply_edit

    spec = load_task("demo/booking", n_references=16, n_holdout=16)
    start = make_generator("llada", {}).initial_prompt(spec)
    note = PromptEdit("add_note", text="Vary the day of travel.")
    hint = PromptEdit("set_hint", field="day", value="sunday")
    other = PromptEdit("add_note", text="Use real station names.")

    def round_(i: int, prompt, edit: PromptEdit, kept: bool, diff: float) -> dict:
        return {"event": "aod_iteration", "role": "candidate", "round": i, "edit": edit.to_json(),
                "edit_kind": edit.kind, "accepted": kept, "paired_difference": diff, "p_randomized": 0.5,
                "prompt": template_text(apply_edit(prompt, edit))}  # fmt: skip

    noted = apply_edit(start, note)
    trace = [
        round_(1, start, hint, False, 0.9),  # before the first kept edit: not a candidate to replay
        round_(2, start, note, True, 0.2),
        round_(3, noted, hint, False, 0.1),
        round_(4, noted, other, False, 0.3),
        {"event": "final", "generator": "llada", "prompt": template_text(noted)},
    ]
    values = {(s, "demo/booking"): {"tsr": [0.0, 0.0]} for s in ("llada", "aod-norl")}
    suite = {"systems": {"llada": {"type": "llada", "models": {"dlm": "m"}},
                         "aod-norl": {"type": "aod-norl", "models": {"dlm": "m"}, "params": {"budget": 8}}},
             "tasks": [{"name": "demo/booking", "n_references": 16, "n_holdout": 16}],
             "models": {"m": {"backend": "mdlm", "per_task": True}, "unused": {"backend": "mdlm"}},
             "metrics": ["tsr", "tsr_judge", "diversity"], "profile": "embedded"}  # fmt: skip
    run = write_run(tmp_path / "r", values, seeds=[0, 1], manifest={"suite": suite})
    for cell in RunStore(run).iter_cells():
        if cell.key.system == "aod-norl":
            seed = int(cell.key.seed)
            events = (
                trace if seed == 0 else [*trace[:-1], {**trace[-1], "prompt_params": {"instruction": "x"}}]
            )
            _trace(cell.path, events)

    _, _, systems, rows = replay_plan(run, candidates=1)
    assert systems["aod-norl-s0"]["params"] == steer_params(noted)  # rebuilt
    assert systems["aod-norl-s1"]["params"] == {"instruction": "x"}  # recorded
    assert systems["llada"] == {"type": "llada", "models": {"dlm": "m"}}
    assert [(r["seed"], r["round"], r["kind"]) for r in rows] == [(0, 4, "add_note"), (1, 4, "add_note")]
    assert systems[rows[0]["incumbent"]]["params"] == steer_params(noted)
    assert systems[rows[0]["candidate"]]["params"] == steer_params(apply_edit(noted, other))

    out = tmp_path / "replay.yaml"
    assert main(["suite", str(run), "--out", str(out), "--seeds", "7,8", "--samples", "16"]) == 0
    loaded = load_suite(out).suite  # every check a run makes
    assert (
        loaded.seed_list() == [7, 8] and sorted(loaded.models) == ["m"] and "tsr_judge" not in loaded.metrics
    )

    tampered = [{**trace[2], "prompt": "something else"}, trace[-1]]
    (
        next(c for c in RunStore(run).iter_cells() if c.key.system == "aod-norl").path / "trace.jsonl"
    ).write_text("".join(json.dumps(e) + "\n" for e in tampered))
    with pytest.raises(ValueError, match="does not rebuild"):
        replay_plan(run)

    a, b, ref = [0.5, 0.25, 0.75, 0.5], [0.75, 0.25, 1.0, 0.5], [0.125, 0.25, 0.25, 0.125]
    replayed = {"llada": ref} | {f"aod-norl-s{i}": [a[i]] * 4 for i in range(4)}
    replayed |= {f"aod-prior-s{i}": [b[i] - 0.125, b[i] + 0.125, b[i], b[i]] for i in range(4)}
    rep = write_run(
        tmp_path / "p",
        {(s, "demo/booking"): {"tsr": v} for s, v in replayed.items()},
        seeds=[7, 8, 9, 10],
        manifest={"suite": {"systems": {s: ({} if s == "llada" else {"params": {}}) for s in replayed}}},
    )
    result = analyze(rep, run, "tsr")
    tests = {(t["a"], t["b"]): t for t in result["tests"]}
    assert tests[("aod-norl", "aod-prior")]["p_ttest"] == pytest.approx(ttest_rel(b, a).pvalue)
    assert tests[("aod-norl", "aod-prior")]["mean_diff"] == pytest.approx(0.125)
    assert tests[("llada", "aod-norl")]["p_ttest"] == pytest.approx(ttest_1samp(a, sum(ref) / 4).pvalue)
    assert result["references"]["llada"] == pytest.approx(0.1875)
    norl = next(r for r in result["systems"] if r["system"] == "aod-norl")
    assert norl["replayed"] == a and norl["own"][:2] == [0.0, 0.0] and all(map(math.isnan, norl["own"][2:]))

    from scipy.stats import spearmanr

    from benchmarks.aod.replay import candidate_summary

    diffs, gains = [0.3, 0.1, 0.2, 0.05, 0.4], [-0.1, 0.06, 0.0, -0.2, 0.01]
    summary = candidate_summary(
        [{"paired_difference": d, "replayed_gain": g} for d, g in zip(diffs, gains, strict=True)]
    )
    assert summary["n"] == 5 and summary["mean_gain"] == pytest.approx(np.mean(gains))
    assert summary["median_gain"] == pytest.approx(np.median(gains))
    assert (summary["above_0.05"], summary["below_-0.05"]) == (1, 2)
    assert summary["spearman"] == pytest.approx(spearmanr(diffs, gains).statistic)
    assert candidate_summary([{"paired_difference": 0.1, "replayed_gain": None}]) is None


def test_kept_pool_cells_and_copied_values_from_a_run(tmp_path, capsys, monkeypatch):
    """`kept_pool_cells`: only cells whose `final` event holds a joint pool count, with shares of those
    cells' records recounted by hand; plain `llada` (no `final` event) is left out. `copied_values`: per
    field, the share of parsed records whose value is some reference's; `main` loads the references as
    the run's manifest names them and prints both tables."""
    from bench.tasks import load_task
    from benchmarks.aod.kept_pools import copied_values, final_joint_pools, kept_pool_cells, main

    spec = load_task("multiwoz/train", n_references=8, n_holdout=4)
    real = spec.references[0]["trainID"]  # a reference's ID, as `main` will load them
    pool = {"fields": ["leaveAt", "arriveBy"], "rows": [["09:00", "10:00"]]}

    def final(pools: list) -> dict:
        return {"event": "final", "prompt_params": {"notes": [], "hints": {}, "joint_pools": pools}}

    ok = {"text": "{}", "scored": {"record": {"trainID": real, "price": "1 pounds"}, "tsr": True}}
    bad = {"text": "{}", "scored": {"record": {"trainID": "TR9"}, "tsr": False,
                                    "tsr_failures": ["check:duration_matches", "copy_of_reference"],
                                    "schema_errors": ["price is required"]}}  # fmt: skip
    cut = {"text": '{"trainID": "TR', "scored": {"record": None, "tsr": False}}
    samples = {
        ("aod", "multiwoz/train", 0): [ok, bad, cut, ok],  # kept the pool
        ("aod", "multiwoz/train", 1): [bad, bad, bad, bad],  # did not: left out of the shares
        ("llada", "multiwoz/train", 0): [ok, ok, ok, ok],
        ("llada", "multiwoz/train", 1): [cut, ok, ok, ok],
    }
    traces = {("aod", "multiwoz/train", 0): [final([pool])], ("aod", "multiwoz/train", 1): [final([])]}
    values = {(s, "multiwoz/train"): {"tsr": [0.5, 0.0]} for s in ("aod", "llada")}
    manifest = {"suite": {"tasks": [{"name": "multiwoz/train", "n_references": 8, "n_holdout": 4}]}}
    run = write_run(tmp_path / "r", values, seeds=[0, 1], samples=samples, traces=traces, manifest=manifest)

    (row,) = kept_pool_cells(run)
    assert (row["system"], row["cells"], row["kept"], row["records"]) == ("aod", 2, 1, 4)
    assert row["tsr"] == 2 / 4 and row["unparsed"] == 1 / 4 and row["invalid"] == 1 / 4
    assert row["failing"] == {"duration_matches": 1 / 4}  # a check, not the copy reason
    cells = {c.name: c for c in (run / "cells" / "aod" / "multiwoz__train").iterdir()}
    assert final_joint_pools(cells["seed-0"]) == [["leaveAt", "arriveBy"]]

    refs = {"multiwoz/train": [{"trainID": real, "price": "2 pounds"}, {"trainID": "TR5"}]}
    got = {r["system"]: r["copied"] for r in copied_values(run, refs, ["trainID", "price", "day"])}
    # aod: parsed records ok, bad, ok, bad x4 -> IDs real TR9 real TR9 TR9 TR9 TR9; prices "1 pounds" twice
    assert got["aod"] == {"trainID": 2 / 7, "price": 0.0, "day": None}
    assert got["llada"] == {"trainID": 1.0, "price": 0.0, "day": None}

    monkeypatch.chdir(tmp_path)  # --md and --json land here
    assert main([str(run), "--fields", "trainID,price", "--md", "t.md", "--json", "t.json"]) == 0
    printed = capsys.readouterr().out
    assert "| aod | multiwoz/train | 1 of 2 | 0.500 |" in printed and Path("t.md").read_text() == printed
    data = json.loads(Path("t.json").read_text())
    assert {r["system"]: r["copied"]["trainID"] for r in data["copied_values"]} == {
        "aod": 2 / 7,
        "llada": 1.0,
    }
    assert data["kept_pools"][0]["kept"] == 1
