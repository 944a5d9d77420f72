"""Quality bars of the embedded diffusion LM at the paper's T = 12 (slow: trains real models on real data).

* `llada` reaches parse_rate >= 0.8 on multiwoz/train with the default-size model;
* `llada-skeleton` reaches schema_valid >= 0.95 on every task family (MultiWOZ uses the default model;
  the other families a smaller one, since validity there comes from the skeleton, not the model size);
* the generator is steerable by its prompt: a `field: value` hint makes most records carry the value, a
  natural-language note in a phrasing no training prompt used lifts the share of records satisfying it
  by at least 0.5, and listing the fields does not lower schema validity against a bare prompt (5 seeds
  each);
* threshold decoding cuts NFE at least 2x against one-token-per-step decoding at parse_rate within 0.05.

Trained models are cached per session (set BENCH_TEST_DLM_CACHE to keep them across sessions).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from bench.types import TaskSpec  # noqa: E402

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(os.environ["BENCH_DATA_DIR"]).exists(), reason="BENCH_DATA_DIR absent"),
]

SMALL = {
    "d_model": 64,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 192,
    "train_steps": 150,
    "batch_size": 16,
    "note_pool": 400,
    "example_pool": 32,
}
FAMILIES = ["multiwoz/train", "truthfulqa", "self_instruct", "superni/task1192_food_flavor_profile"]
_MODELS: dict[tuple[str, str], tuple[TaskSpec, Any]] = {}


class Ctx:
    """The slice of RunContext the diffusion systems use: one backend for the `dlm` role."""

    profile_name = "embedded"

    def __init__(self, backend: Any, cache_dir: Path) -> None:
        self._backend = backend
        self.cache_dir = str(cache_dir)

    def backend(self, role: str, task: TaskSpec | None = None) -> Any:
        assert role == "dlm"
        return self._backend


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    env = os.environ.get("BENCH_TEST_DLM_CACHE")
    return Path(env) if env else tmp_path_factory.mktemp("dlm-cache")


DEFAULT = {"threads": 2}
"""The default model, trained with both cores (a thread count other than 1 is part of the cache key:
it changes the weights; docs/systems-diffusion.md, "Trained weights depend on the thread count")."""


def model(task: str, cache: Path, params: dict | None = None) -> tuple[TaskSpec, Any, Ctx]:
    from bench.tasks import load_task
    from systems.backends.mdlm import EmbeddedMDLMBackend

    key = (task, repr(sorted((params or {}).items())))
    if key not in _MODELS:
        spec = load_task(task, n_references=None, n_holdout=None)
        be = EmbeddedMDLMBackend.from_spec(
            {"params": params or DEFAULT}, SimpleNamespace(cache_dir=cache, task=spec, seed=0)
        )
        _MODELS[key] = (spec, be)
    spec, be = _MODELS[key]
    return spec, be, Ctx(be, cache)


def score(samples: list, spec: TaskSpec, name: str) -> float:
    from metrics.scoring import score_cell

    return score_cell(samples, spec, [name], None).values[name]


def test_llada_parse_rate_on_multiwoz_train_at_t12(cache_dir: Path) -> None:
    from systems.llada import LLaDASystem

    spec, be, ctx = model("multiwoz/train", cache_dir)
    res = LLaDASystem({"steps": 12}).generate(spec, 32, 0, ctx)
    assert [s.index for s in res.samples] == list(range(32))
    assert res.usage.nfe == 32 * 12 and res.usage.generator_calls == 32 and res.usage.seconds > 0
    assert score(res.samples, spec, "parse_rate") >= 0.8


@pytest.mark.parametrize("task", FAMILIES)
def test_skeleton_schema_valid_on_every_family(task: str, cache_dir: Path) -> None:
    from systems.llada import LLaDASkeletonSystem

    spec, be, ctx = model(task, cache_dir, None if task == "multiwoz/train" else SMALL)
    res = LLaDASkeletonSystem({"steps": 12}).generate(spec, 32, 0, ctx)
    assert score(res.samples, spec, "schema_valid") >= 0.95
    assert res.trace[0]["event"] == "skeleton_infill" and res.usage.nfe > 0


@pytest.mark.parametrize("field", ["day", "leaveAt", "price"])  # an enum, a time, a number with a unit
def test_field_value_hint_steers_most_records(field: str, cache_dir: Path) -> None:
    """Over 5 seeds, `field: value` makes most of 16 records write the value in the field's slot; without
    it few do.

    The slot is read from the text (`"field": "value"`, tolerating a lost colon or a stray space next to
    the key), not from a parsed record, because whether the record around a hinted value stays valid JSON
    depends on the build: trained on another CPU (an AMD EPYC VM, 2026-12-03) the default model writes
    the hinted time in every record but breaks the key's punctuation (`"leaveAt " "07:09"`), so its
    hinted `leaveAt` records parse in 1 of 5 seeds, against every seed on the build the docs measured.
    Steering is what this test pins; docs/systems-diffusion.md reports both builds' parse rates.
    Measured per-field rates are in docs/systems-diffusion.md (`python -m benchmarks.diffusion.steering`).
    """
    import re

    from metrics.extract import extract_record
    from systems.llada import LLaDASystem

    spec, be, ctx = model("multiwoz/train", cache_dir)
    values = sorted({r[field] for r in spec.references})
    hinted, plain, parsed = [], [], []
    for seed in range(5):
        value = values[(seed * 37) % len(values)]
        slot = re.compile(rf'"{re.escape(field)}\s*"?\s*:?\s*"{re.escape(value)}"')
        for hints, out in (({field: value}, hinted), ({}, plain)):
            res = LLaDASystem({"hints": hints, "k_shots": 0}).generate(spec, 16, seed, ctx)
            out.append(sum(bool(slot.search(s.text)) for s in res.samples) / 16)
            if hints:
                recs = [extract_record(s.text).record for s in res.samples]
                # where a record parses, the slot reading agrees with the parsed value
                for s, r in zip(res.samples, recs, strict=True):
                    if isinstance(r, dict):
                        assert (r.get(field) == value) == bool(slot.search(s.text)), s.text
                parsed.append(sum(isinstance(r, dict) for r in recs) / 16)
    assert min(hinted) > 0.5, (hinted, parsed)
    assert sum(hinted) / 5 > sum(plain) / 5 + 0.3, (hinted, plain)


@pytest.mark.parametrize("kind", ["value"])
def test_note_in_a_held_out_phrasing_steers(kind: str, cache_dir: Path) -> None:
    """Over 5 seeds x 16 records, a note of `kind` drawn in a held-out phrasing (the last two of its
    templates, never in training) lifts the share of records satisfying it, checked in code, by >= 0.5.

    The same protocol as `python -m benchmarks.diffusion.steering` (its table, every kind, is in
    docs/systems-diffusion.md)."""
    from benchmarks.diffusion.steering import note_rates
    from systems.diffusion_notes import NoteSpace

    spec, be, ctx = model("multiwoz/train", cache_dir)
    [row], parse = note_rates(spec, ctx, NoteSpace(spec), [kind], 16, 5, {}, held_out=True)
    assert parse >= 0.9
    assert row["lift"] >= 0.5, [(r["note"], r["with"], r["without"]) for r in row["seeds"]]


def test_field_list_is_at_least_as_valid_as_a_bare_prompt(cache_dir: Path) -> None:
    from systems.llada import LLaDASystem

    spec, be, ctx = model("multiwoz/train", cache_dir)
    with_fields = [
        score(LLaDASystem({"k_shots": 0}).generate(spec, 16, s, ctx).samples, spec, "schema_valid")
        for s in range(5)
    ]
    bare = [
        score(
            LLaDASystem({"k_shots": 0, "with_fields": False}).generate(spec, 16, s, ctx).samples,
            spec,
            "schema_valid",
        )
        for s in range(5)
    ]
    assert sum(with_fields) >= sum(bare), (with_fields, bare)


def test_threshold_decoding_cuts_nfe_at_equal_parse_rate(cache_dir: Path) -> None:
    from benchmarks.diffusion.decoding import run_decoding_benchmark, threshold_claim

    spec, be, _ = model("multiwoz/train", cache_dir)
    rows = run_decoding_benchmark(be, spec, n=16, seed=0, only=("(1 token/step)", "threshold 0.9"))
    assert len(rows) == 2
    claim = threshold_claim(rows)
    assert claim["holds"], claim
