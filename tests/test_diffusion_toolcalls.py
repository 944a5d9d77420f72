"""Diffusion systems on BFCL tool calls: per-item prompts, call skeletons, and a DLM trained on references.

`llada` must prompt each sample with its own item (request and function signatures); `llada-skeleton`
must build each sample's skeleton from its item's docs (names as enum slots over the item's functions,
one slot per documented argument, every required one present); the embedded DLM must train on the
(question, answer) pairs of the reference items only, never on a scored item. The end-to-end test trains
a tiny DLM (seconds) and scores both systems' outputs with the tool-call metrics.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from pathlib import Path

import pytest
from tiny_dlm import TINY_DLM

from bench.tasks.loading import load_task
from systems.skeleton import Leaf, Obj, SkeletonPlan, leaves
from systems.skeleton_calls import ToolSkeletons, call_counts, optional_share
from systems.tool_prompt import item_prompt, request_text

DATA = Path(os.environ.get("BENCH_DATA_DIR", "/nonexistent"))
pytestmark = pytest.mark.skipif(not (DATA / "bfcl").is_dir(), reason="needs BENCH_DATA_DIR with bfcl/")
TINY = TINY_DLM | {"vocab_size": 600, "max_prompt_tokens": 96}


@pytest.fixture(scope="module")
def multiple():
    return load_task("bfcl/multiple", n_references=None, n_holdout=40)


def test_reference_items_are_the_references_questions_and_never_a_scored_one(multiple):
    refs = multiple.meta["reference_items"]
    assert len(refs) == len(multiple.references) and all(it is not None for it in refs)
    for item, record in zip(refs, multiple.references, strict=True):
        assert item.meta["record"] == record
    scored = {it.id for it in multiple.items}
    assert scored and not scored & {it.id for it in refs}


def test_irrelevance_references_carry_no_question():
    spec = load_task("bfcl/irrelevance", n_references=None, n_holdout=None)
    assert all(it is None for it in spec.meta["reference_items"])


def test_the_dlm_prompt_holds_the_request_and_every_signature(multiple):
    item = multiple.items[0]
    prompt = item_prompt(item.meta)
    assert request_text(item.meta["question"]) in prompt
    for fn in item.meta["functions"]:
        assert fn["name"] + "(" in prompt
        for k in fn["parameters"]["required"]:
            assert k in prompt
    assert prompt.rindex("Functions:") > prompt.index("Request:")  # a left cut drops the request first


def _plan(spec):
    return SkeletonPlan(spec.schema, spec.references, lambda s: max(1, len(s) // 3))


def test_call_skeletons_follow_the_items_docs(multiple):
    skel = ToolSkeletons(multiple, _plan(multiple))
    assert call_counts(multiple) == [1] * len(multiple.references)
    assert 0.0 < optional_share(multiple) <= 1.0
    rng = random.Random(0)
    for item in multiple.items[:10]:
        functions = item.meta["functions"]
        names = [f["name"] for f in functions]
        (slot_leaf,) = leaves(skel.names_tree(names, 1))
        assert slot_leaf.slot.kind == "enum" and set(slot_leaf.slot.enum) == set(names)
        tree = skel.arguments_tree(functions, [names[-1]], rng)
        call = dict(dict(tree.items)["calls"].items[0].items)
        assert call["name"].value == names[-1]
        args = dict(call["arguments"].items)
        doc = functions[-1]["parameters"]
        assert set(doc["required"]) <= set(args) <= set(doc["properties"])
        for k, node in args.items():
            t = doc["properties"][k]["type"]
            if isinstance(node, Leaf) and doc["properties"][k].get("enum"):
                assert set(node.slot.enum) == set(doc["properties"][k]["enum"])
            elif isinstance(node, Leaf):
                expected = {"integer": "integer", "float": "number", "boolean": "boolean"}.get(t, "string")
                assert node.slot.kind == expected, (k, t)
            elif t == "dict":
                assert isinstance(node, Obj) or node.value == {}


def test_tiny_dlm_trains_on_references_and_both_systems_answer_each_item(multiple):
    from bench.context import BenchContext
    from bench.profiles import apply_overrides, resolve_profile
    from metrics.registry import TOOLCALL_METRICS
    from metrics.scoring import score_cell
    from systems.llada import LLaDASkeletonSystem, LLaDASystem

    dlm = {"backend": "mdlm", "model": "embedded-mdlm", "per_task": True, "params": TINY}
    ctx = BenchContext(
        apply_overrides(resolve_profile("embedded"), {"dlm": dlm}, None), Path(tempfile.mkdtemp())
    )
    prompts = LLaDASystem({}).prompts(multiple, 3, 0)
    for i, p in enumerate(prompts):
        assert p.startswith(item_prompt(multiple.items[i].meta)) and "Example:" not in p
    for system in (LLaDASystem({}), LLaDASkeletonSystem({})):
        result = system.generate(multiple, 6, 0, ctx)
        assert [s.meta["item_id"] for s in result.samples] == [it.id for it in multiple.items[:6]]
        score = score_cell(result.samples, multiple, TOOLCALL_METRICS)
        assert all(r["failure"] is None or isinstance(r["failure"], str) for r in score.rows)
        if isinstance(system, LLaDASkeletonSystem):  # parses by construction; names from the item's docs
            for sample, item in zip(result.samples, multiple.items, strict=False):
                record = json.loads(sample.text)
                names = {f["name"] for f in item.meta["functions"]}
                assert len(record["calls"]) == 1 and record["calls"][0]["name"] in names
            assert score.values["failure_invalid_syntax"] == 0.0
            assert result.trace[0]["names_pass_rows"] == 6


def test_training_batches_pair_reference_questions_with_their_answers(multiple):
    from systems.backends.mdlm.conditioning import window_text
    from systems.backends.mdlm.train import TrainConfig, item_prompts, make_batch, prepare

    prompts = item_prompts(multiple)
    assert prompts == [item_prompt(it.meta) for it in multiple.meta["reference_items"]]
    cfg = TrainConfig(vocab_size=600, max_prompt_tokens=400, batch_size=4, skeleton_fraction=0.0)
    prep = prepare(multiple, cfg)
    batch = make_batch(prep, multiple, cfg, random.Random(3))
    ids, attn = batch.ids, batch.attn
    tok = prep.tok
    for row in range(ids.shape[0]):
        text = tok.decode(
            [int(t) for t, a in zip(ids[row, : cfg.max_prompt_tokens], attn[row], strict=False) if a][:-1]
        )
        answer = tok.decode([int(t) for t in ids[row, cfg.max_prompt_tokens :] if int(t) != tok.eos_id])
        # the token window is the prompt after its instruction line (conditioning.window_text)
        j = next(j for j, p in enumerate(prompts) if text.startswith(window_text(p)))
        assert json.loads(answer) == multiple.references[j]  # ... paired with that reference's answer


def test_an_item_whose_skeleton_cannot_fit_fails_alone(multiple):
    """A response window too short for some items' documented arguments: those samples are harness
    failures naming the item, and every other sample of the same batch is still filled and scored
    (before, one oversized item turned the whole cell into backend errors)."""
    from bench.context import BenchContext
    from bench.profiles import apply_overrides, resolve_profile
    from bench.types import SampleStatus
    from systems.llada import LLaDASkeletonSystem

    # which calls an item gets depends on the tiny model's first pass (the function names it writes),
    # so the window that splits the batch is searched for, shortest first
    for window in (40, 48, 56, 64, 80):
        params = TINY | {"max_response_tokens": window}
        dlm = {"backend": "mdlm", "model": "embedded-mdlm", "per_task": True, "params": params}
        ctx = BenchContext(
            apply_overrides(resolve_profile("embedded"), {"dlm": dlm}, None), Path(tempfile.mkdtemp())
        )
        result = LLaDASkeletonSystem({}).generate(multiple, 12, 0, ctx)
        failed = [s for s in result.samples if s.status == SampleStatus.BACKEND_ERROR]
        filled = [s for s in result.samples if s.status != SampleStatus.BACKEND_ERROR]
        if failed and filled:
            break
    assert failed and filled, "some window must leave some items fitting and some not"
    assert result.trace[0]["too_long"] == [s.index for s in failed]
    for s in failed:
        assert s.meta["item_id"] == multiple.items[s.index].id and "does not fit" in (s.error or "")
    for s in filled:
        assert json.loads(s.text)["calls"], "a fitting item is filled as before"
