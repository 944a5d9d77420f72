"""`llada-skeleton` on JSONSchemaBench: skeleton and shared infiller from the schema alone (systems.item_skeleton).

A real (tiny) embedded DLM is trained on records drawn from the compiler's grammars and fills the skeletons
of real schemas; the samples name their schema and declaration, parse, and are scored by the benchmark's
metrics against an independent count.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("torch")

from bench.tasks.loading import load_task  # noqa: E402
from bench.types import TaskSpec  # noqa: E402
from metrics.scoring import score_cell  # noqa: E402
from metrics.structure import validator_for  # noqa: E402
from systems.item_skeleton import draw_records, training_task  # noqa: E402

DATA_DIR = Path(os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets"))
needs_data = pytest.mark.skipif(not (DATA_DIR / "jsonschemabench").is_dir(), reason="no JSONSchemaBench data")
TINY = {
    "d_model": 48,
    "n_layers": 2,
    "n_heads": 2,
    "d_ff": 96,
    "train_steps": 30,
    "note_pool": 40,
    "example_pool": 8,
    "batch_size": 8,
    "vocab_size": 400,
}


def test_drawn_records_are_valid_and_a_refused_schema_draws_none():
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 3}, "tag": {"enum": ["a", "b"]}},
        "required": ["id"],
        "self": {"vendor": "com.acme"},  # an annotation: compiled around
    }
    drawn = draw_records(schema, 12, seed=0, max_tokens=192)
    assert drawn.reason is None and len(drawn.records) >= 10
    assert all(validator_for(schema).is_valid(r) for r in drawn.records)
    assert draw_records(schema, 12, seed=0, max_tokens=192).records == drawn.records  # seeded
    refused = draw_records({"type": "string", "format": "ipv4"}, 12, seed=0, max_tokens=192)
    assert not refused.records and "ipv4" in (refused.reason or "")


class Ctx:
    """A run context whose `dlm` role is the embedded DLM, trained on the task it is handed."""

    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self.tasks: list[TaskSpec] = []
        self._backends: dict[str, object] = {}

    def backend(self, role: str, task: TaskSpec | None = None) -> object:
        from systems.backends.mdlm.backend import EmbeddedMDLMBackend

        assert role == "dlm" and task is not None
        self.tasks.append(task)
        if task.fingerprint not in self._backends:
            env = SimpleNamespace(cache_dir=self.cache_dir, task=task, seed=0)
            self._backends[task.fingerprint] = EmbeddedMDLMBackend.from_spec({"params": TINY}, env)
        return self._backends[task.fingerprint]


@needs_data
@pytest.mark.slow  # a tiny model trains (~10 s) and two splits are compiled
def test_llada_skeleton_answers_real_schemas_with_one_shared_infiller(tmp_path):
    from systems.llada import LLaDASkeletonSystem

    system = LLaDASkeletonSystem({"steps": 6, "train_schemas": 1, "draws": 8})
    ctx = Ctx(tmp_path)
    for split in ("Glaiveai2K", "Snowplow"):
        spec = load_task(f"jsonschemabench/{split}", n_references=None, n_holdout=None, options={"limit": 2})
        result = system.generate(spec, 2, 0, ctx)
        assert [s.meta["schema_id"] for s in result.samples] == [it.id for it in spec.items]
        valid = 0
        for s, item in zip(result.samples, spec.items, strict=True):
            assert isinstance(s.meta["declared"], bool)
            if not s.meta["declared"]:
                assert s.text == "" and s.meta["refused"]
                continue
            record = json.loads(s.text)  # the skeleton fixes the structure: it always parses
            valid += validator_for(item.schema).is_valid(record)
            assert s.meta["tokens_out"] >= 0 and s.meta["seconds"] >= 0  # 0: a skeleton without slots
        declared = sum(s.meta["declared"] for s in result.samples)
        score = score_cell(result.samples, spec, ["declared_coverage", "empirical_coverage", "compliance"])
        assert score.values["declared_coverage"] == pytest.approx(declared / 2)
        assert score.values["empirical_coverage"] == pytest.approx(valid / 2)
        if declared:
            assert score.values["compliance"] == pytest.approx(valid / declared)
    # one infiller for both cells, trained on draws of the first schema of every split
    assert len({t.fingerprint for t in ctx.tasks}) == 1
    train = ctx.tasks[0]
    assert train.name == "jsonschemabench/drawn" and 0 < len(train.references) <= 10 * 8
    again = training_task(str(DATA_DIR), 1, 8, 192)
    assert again.fingerprint == train.fingerprint


def test_the_plan_reads_enums_behind_refs_and_all_of():
    from systems.item_skeleton import plan_schema
    from systems.skeleton import SkeletonPlan

    schema = {
        "$defs": {"color": {"type": "string", "enum": ["red", "blue"]}},
        "type": "object",
        "allOf": [{"properties": {"mode": {"const": "fast"}}, "required": ["mode"]}],
        "properties": {"color": {"$ref": "#/$defs/color"}, "flag": True},
        "required": ["color"],
    }
    flat = plan_schema(schema)
    assert flat["properties"]["color"]["enum"] == ["red", "blue"]
    assert flat["properties"]["mode"]["enum"] == ["fast"] and flat["required"] == ["color", "mode"]
    assert flat["properties"]["flag"] == {}
    drawn = draw_records(schema, 8, seed=1, max_tokens=192)
    plan = SkeletonPlan(flat, drawn.records, len)
    assert plan.slot("color", "string", flat["properties"]["color"]).enum == ("red", "blue")
    assert plan.slot("mode", "string", flat["properties"]["mode"]).enum == ("fast",)
    assert plan_schema({"$ref": "#"}) == {}  # a self-reference ends at the depth limit, not in a loop
