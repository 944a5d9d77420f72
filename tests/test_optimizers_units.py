"""The optimizers' model-free parts: judge parsing, edit parsing/bounds/fallback, policy, reward,
evaluation view, evaluator sentences. Each checked against hand-written inputs or hand computations."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import re
from pathlib import Path

import pytest

from bench.tasks import load_task
from bench.types import Sample, TaskSpec
from systems.optimizers.base import Budget, evaluation_view
from systems.optimizers.edits import (
    EditBounds,
    PromptEdit,
    applicable_kinds,
    apply_edit,
    check_edit,
    edit_from_reply,
    hint_fields,
    parse_edit,
    template_edit,
)
from systems.optimizers.evaluator import NaturalLanguageEvaluator
from systems.optimizers.evolution import Unit, read_instruction
from systems.optimizers.evoprompt import roulette, template_crossover
from systems.optimizers.judge import parse_yes_no
from systems.optimizers.policy import EditPolicy, boltzmann_prior
from systems.optimizers.reward import WEIGHTS, reward, subrewards
from systems.skeleton_prompt import DiffusionPrompt

DATA = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets"))


@pytest.fixture(scope="module")
def booking() -> TaskSpec:
    return load_task("demo/booking", n_references=16, n_holdout=16)


# ------------------------------------------------------------------------------------------- judge
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", True),
        ("yes.", True),
        ("No, the arrival", False),
        ("NO", False),
        ("The answer is yes, the cities differ.", True),
        ("No. Yes would be wrong.", False),
        ("It is not plausible.", False),
        ("That isn't a real name", False),
        ("Correct, it matches.", True),
        ("I'm not sure about that.", None),
        ("I don't know", None),
        ("", None),
        ("   \n ", None),
        ('{"departure_city": "Paris"}', None),
        ("Nobody knows; yesterday", None),  # 'no'/'yes' only as whole words
    ],
)
def test_judge_parser_reads_hand_written_replies(text: str, expected: bool | None) -> None:
    assert parse_yes_no(text) is expected


# ------------------------------------------------------------------------------------------- edits
def test_parse_edit_reads_prefixed_and_bare_replies(booking: TaskSpec) -> None:
    p = DiffusionPrompt(instruction=booking.instruction)
    e = parse_edit("add_note", "Sure!\nNOTE: Use a different city for arrival.", booking, p)
    assert e == PromptEdit("add_note", text="Use a different city for arrival.")
    e = parse_edit("add_note", "- Always give the price in euros.", booking, p)
    assert e is not None and e.text == "Always give the price in euros."
    h = parse_edit("set_hint", "HINT: Cabin = Business", booking, p)
    assert h == PromptEdit("set_hint", field="cabin", value="business")  # enum value snapped to its spelling
    h = parse_edit("set_hint", "I choose departure city: Lisbon.", booking, p)
    assert h is None  # 'I choose departure city' is not a field name
    h = parse_edit("set_hint", "departure city: Lisbon.", booking, p)
    assert h == PromptEdit("set_hint", field="departure_city", value="Lisbon")
    assert parse_edit("set_hint", "HINT: cabin = spaceship", booking, p) is None  # not in the enum
    i = parse_edit(
        "rewrite_instruction", "INSTRUCTION: Write one realistic flight booking as JSON.", booking, p
    )
    assert i == PromptEdit("rewrite_instruction", text="Write one realistic flight booking as JSON.")


@pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")
def test_free_hint_values_must_look_like_the_references_values() -> None:
    """The four values SuperNI's optimizer had kept as `input` hints (docs/systems-aod.md) are refused,
    a new dish name is not; on MultiWOZ a time or price of the references' digit shape passes and a word
    in its place does not. Reference values always pass. Shapes are from the references by hand."""
    b = EditBounds()
    superni = load_task("superni/task1192_food_flavor_profile", n_references=10, n_holdout=10)
    assert {r["input"] for r in superni.references} >= {"Bisi bele bath", "Jeera Aloo"}  # 3 words at most
    p = DiffusionPrompt(instruction=superni.instruction)
    orig = superni.instruction
    refused = {
        "2": "has digits",
        "15": "has digits",
        "input": "is a field name",
        "The task is to classify the 20": "has digits",
        "The task is to classify them": "longer than 4 words",
        "sweet": "is a value of 'output'",
        "KefadakarKoftaKfKf": "has a word longer",
    }
    for value, why in refused.items():
        assert why in (
            check_edit(PromptEdit("set_hint", field="input", value=value), p, superni, b, orig) or ""
        )
    for value in ("Laddu Kebab", "Paneer tikka masala", "Jeera Aloo", "Aloo gobi ki sabzi"):
        assert check_edit(PromptEdit("set_hint", field="input", value=value), p, superni, b, orig) is None
    train = load_task("multiwoz/train", n_references=64, n_holdout=8)
    q = DiffusionPrompt(instruction=train.instruction)
    for field, value in [("leaveAt", "19:54"), ("price", "12.80 pounds"), ("trainID", "TR1234")]:
        assert check_edit(PromptEdit("set_hint", field=field, value=value), q, train, b, "x") is None
    for field, value in [("leaveAt", "7pm"), ("price", "cheap"), ("duration", "an hour")]:
        why = check_edit(PromptEdit("set_hint", field=field, value=value), q, train, b, "x") or ""
        assert "digit shapes" in why, (field, value)


@pytest.mark.skipif(not DATA.exists(), reason="BENCH_DATA_DIR absent")
def test_a_pool_of_words_takes_the_agents_new_values() -> None:
    """SuperNI's `input` (dish names: no digit shape) is the field the data cannot invent for, so the
    reply schema asks the agent for values there, and only there (MultiWOZ's free fields all have a
    digit shape, and its schema stays one `field` enum). The agent's values that are references', have
    digits, or are too long are dropped; fewer than two left is refused, not padded."""
    import json

    from metrics.structure import validator_for
    from systems.backends.grammar import build_grammar, max_bytes
    from systems.optimizers.edits import agent_pool, needs_agent_values, parse_structured, reply_schema

    b = EditBounds()
    superni = load_task("superni/task1192_food_flavor_profile", n_references=10, n_holdout=10)
    p = DiffusionPrompt(instruction=superni.instruction)
    assert needs_agent_values(superni, "input") and not needs_agent_values(superni, "output")  # output: enum
    schema = reply_schema("vary_hint", superni, p, b, superni.instruction)
    assert schema is not None and math.isfinite(max_bytes(build_grammar(schema)))
    reply = {"field": "input", "values": ["Paneer Tikka", "Jeera Aloo", "15", "Masala Dosa", "Paneer Tikka"]}
    assert not list(validator_for(schema).iter_errors(reply))
    assert list(validator_for(schema).iter_errors({"field": "input"}))  # values are required for words
    assert not list(validator_for(schema).iter_errors({"field": "output"}))
    edit = parse_structured("vary_hint", json.dumps(reply), superni, p, -1, random.Random(0), b)
    assert edit is not None and edit.values == ("Paneer Tikka", "Masala Dosa")
    assert check_edit(edit, p, superni, b, "x") is None
    copies = {"field": "input", "values": ["Jeera Aloo", "Kofta", "The task is to classify them"]}
    edit = parse_structured("vary_hint", json.dumps(copies), superni, p, -1, random.Random(0), b)
    assert edit is not None and edit.values == ()
    assert check_edit(edit, p, superni, b, "x") == f"a pool needs 2 to {b.max_pool} distinct values"
    assert agent_pool(superni, "input", "not a list", b) == []
    rng = random.Random(0)  # a fallback is the template's pool: the references' own names, still allowed
    info = edit_from_reply("vary_hint", json.dumps(copies), superni, p, -1, rng, [], None, b, "x")[1]
    assert info["edit_source"] == "fallback" and info["values_source"] == "rule"
    info = edit_from_reply("vary_hint", json.dumps(reply), superni, p, -1, rng, [], None, b, "x")[1]
    assert info["edit_source"] == "agent" and info["values_source"] == "agent"
    off = dataclasses.replace(b, agent_values=False)  # as before 2026-12-05: the references' own names
    assert "anyOf" not in (reply_schema("vary_hint", superni, p, off, "x") or {})
    edit = parse_structured("vary_hint", json.dumps(reply), superni, p, -1, random.Random(0), off)
    assert edit is not None and set(edit.values) == {r["input"] for r in superni.references} & set(
        edit.values
    )
    assert len(edit.values) >= 2 and check_edit(edit, p, superni, off, "x") is None
    train = load_task("multiwoz/train", n_references=64, n_holdout=8)
    q = DiffusionPrompt(instruction=train.instruction)
    assert not any(needs_agent_values(train, f) for f in ("leaveAt", "price", "trainID", "duration", "day"))
    assert set(reply_schema("vary_hint", train, q, b, "x") or {}) == {
        "type",
        "properties",
        "required",
        "additionalProperties",
    }


def test_bounds_reject_long_notes_unknown_fields_and_extreme_instructions(booking: TaskSpec) -> None:
    b = EditBounds()
    p = DiffusionPrompt(instruction=booking.instruction, notes=["a b c"], hints=[("cabin", "economy")])
    orig = booking.instruction
    assert check_edit(PromptEdit("add_note", text="word " * 50), p, booking, b, orig)
    assert check_edit(PromptEdit("add_note", text="hi"), p, booking, b, orig)
    assert check_edit(PromptEdit("add_note", text="a b c"), p, booking, b, orig) == "note already present"
    assert check_edit(PromptEdit("set_hint", field="colour", value="red"), p, booking, b, orig)
    assert (
        check_edit(
            PromptEdit("set_hint", field="lead_passenger.first_name", value="Ana"), p, booking, b, orig
        )
        is None
    )
    assert check_edit(PromptEdit("rewrite_instruction", text="x " * 400), p, booking, b, orig)
    assert check_edit(PromptEdit("remove_hint", index=3), p, booking, b, orig) == "no such hint"
    assert (
        check_edit(PromptEdit("replace_note", text="Use new names please", index=0), p, booking, b, orig)
        is None
    )


def test_apply_edit_is_pure_and_replaces_a_fields_hint(booking: TaskSpec) -> None:
    p = DiffusionPrompt(instruction="x", hints=[("cabin", "economy")])
    q = apply_edit(p, PromptEdit("set_hint", field="cabin", value="first"))
    assert q.hints == [("cabin", "first")] and p.hints == [("cabin", "economy")]
    r = apply_edit(q, PromptEdit("remove_hint", index=0))
    assert r.hints == [] and q.hints == [("cabin", "first")]
    assert applicable_kinds(r, EditBounds()) == ["add_note", "set_hint", "vary_hint", "rewrite_instruction"]
    assert "remove_hint" in applicable_kinds(q, EditBounds())


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "Sure! Here is the JSON you asked for:",
        '```python\nresponse.json()\n```\n{"cabin": "economy"}',
        "No, I will not repeat the example.",
        "HINT: colour = red",
        "word " * 200,
    ],
)
@pytest.mark.parametrize("kind", ["add_note", "set_hint", "rewrite_instruction", "replace_note"])
def test_junk_optimizer_reply_falls_back_to_a_valid_template_edit(
    booking: TaskSpec, reply: str, kind: str
) -> None:
    p = DiffusionPrompt(instruction=booking.instruction, notes=["Keep values short and real."])
    b = EditBounds()
    edit, info = edit_from_reply(
        kind, reply, booking, p, 0, random.Random(0), ["Is it?"], None, b, booking.instruction
    )
    assert edit is not None
    assert check_edit(edit, p, booking, b, booking.instruction) is None
    if info["edit_source"] == "fallback":
        assert info["fallback_reason"]
    else:  # only a reply that is itself a usable edit may pass as the agent's
        assert info["edit_source"] == "agent" and kind in ("add_note", "replace_note", "rewrite_instruction")
        assert edit.text in reply
    assert edit.kind == kind or (kind == "replace_note" and edit.kind == "replace_note")


def test_template_edits_are_seeded(booking: TaskSpec) -> None:
    p = DiffusionPrompt(instruction=booking.instruction)
    a = [
        template_edit(k, p, booking, random.Random(3), [], None)
        for k in ("add_note", "set_hint", "rewrite_instruction")
    ]
    b = [
        template_edit(k, p, booking, random.Random(3), [], None)
        for k in ("add_note", "set_hint", "rewrite_instruction")
    ]
    assert a == b
    fields = hint_fields(booking)
    assert "lead_passenger.last_name" in fields and fields["cabin"] == [
        "economy",
        "premium_economy",
        "business",
        "first",
    ]


# ------------------------------------------------------------------------------------------ policy
def test_policy_update_follows_the_clipped_surrogate_gradient() -> None:
    kinds = ("a", "b", "c")
    pol = EditPolicy(kinds, lr=0.5, clip=0.2, epochs=1)
    info = pol.update("a", 0.3, p_old=1 / 3)
    # one unclipped step from uniform logits: d/dtheta_k = rho * A * (1[k=a] - 1/3), rho = 1
    assert pol.logits["a"] == pytest.approx(0.5 * 0.3 * (2 / 3))
    assert pol.logits["b"] == pytest.approx(0.5 * 0.3 * (-1 / 3))
    assert not info["clipped"] and info["advantage"] == pytest.approx(0.3)
    # a huge advantage with many epochs stops once the ratio leaves [1 - eps, 1 + eps]
    pol2 = EditPolicy(kinds, lr=0.1, clip=0.2, epochs=50)
    info2 = pol2.update("b", 1.0, p_old=1 / 3)
    ratio = pol2.probs()["b"] / (1 / 3)
    assert info2["clipped"] and 1.2 < ratio < 1.3  # stopped one small step past the clip boundary
    pol3 = EditPolicy(kinds, lr=0.1, clip=0.2, epochs=500)
    pol3.update("b", 1.0, p_old=1 / 3)
    assert pol3.logits == pol2.logits  # more epochs cannot push further once clipped
    # a negative advantage (after the baseline) lowers the action's probability
    pol4 = EditPolicy(kinds)
    pol4.update("a", 0.5, 1 / 3)
    before = pol4.probs()["c"]
    pol4.update("c", -0.5, before)
    assert pol4.probs()["c"] < before


def test_policy_reward_is_the_papers_step_reward_when_realized() -> None:
    """`realized` is R(s_t+1) - R(s_t) with the incumbent as the state: D when kept, 0 when discarded."""
    from systems.optimizers.aod import policy_reward

    assert policy_reward("paired", -0.3, False) == -0.3 and policy_reward("paired", 0.2, True) == 0.2
    assert policy_reward("realized", -0.3, False) == 0.0 and policy_reward("realized", 0.02, False) == 0.0
    assert policy_reward("realized", 0.2, True) == 0.2


def test_a_paired_reward_teaches_the_policy_to_do_nothing_and_a_realized_one_does_not() -> None:
    """The round sequence AoD's traces showed at 30 rounds: harmful edits of one kind (D < 0, discarded),
    inert edits of another (D = 0, discarded), one kept gain of a third. Under `paired` the baseline goes
    negative and the inert kind ends up the most likely; under `realized` the kept kind is."""
    from systems.optimizers.aod import policy_reward

    rounds = [("harm", -0.25, False), ("inert", 0.0, False)] * 6 + [("good", 0.15, True)]
    rounds += [("harm", -0.25, False), ("inert", 0.0, False)] * 6
    final = {}
    for rule in ("paired", "realized"):
        pol = EditPolicy(("harm", "inert", "good"))
        for kind, d, kept in rounds:
            pol.update(kind, policy_reward(rule, d, kept), pol.probs()[kind])
        final[rule] = pol.probs()
    assert max(final["paired"], key=final["paired"].get) == "inert"
    assert final["paired"]["inert"] > final["paired"]["good"]
    assert max(final["realized"], key=final["realized"].get) == "good"
    assert final["realized"]["inert"] < 1 / 3 < final["realized"]["good"]


def test_policy_sampling_is_seeded_and_respects_the_mask() -> None:
    pol = EditPolicy(("a", "b", "c"))
    draws = [pol.sample(random.Random(7), ["a", "c"])[0] for _ in range(5)]
    assert draws == [pol.sample(random.Random(7), ["a", "c"])[0] for _ in range(5)]
    rng = random.Random(1)
    assert {pol.sample(rng, ["a", "c"])[0] for _ in range(50)} == {"a", "c"}


# ------------------------------------------------------------------------------------------ reward
def test_reward_is_the_weighted_mean_of_subrewards() -> None:
    values = {
        "tsr": 0.5,
        "schema_valid": 1.0,
        "diversity": 0.8,
        "novelty": 0.6,
        "similarity": 0.9,
        "field_overlap": 0.25,
    }
    parts = subrewards(values, judge_yes=0.5)
    assert parts["originality"] == pytest.approx(0.75)
    expected = sum(WEIGHTS[k] * parts[k] for k in parts) / sum(WEIGHTS.values())
    assert reward(parts) == pytest.approx(expected)
    nothing = subrewards({k: math.nan for k in values}, None)  # nothing parsed: 0, never NaN
    assert reward(nothing) == 0.0 and "judge" not in nothing


# --------------------------------------------------------------------------- evaluation view, budget
def test_evaluation_view_uses_references_only_and_is_fixed(booking: TaskSpec) -> None:
    v1, v2 = evaluation_view(booking), evaluation_view(booking)
    assert v1.references == booking.references
    assert v1.holdout == v2.holdout and len(v1.holdout) == 4
    assert all(r in booking.references for r in v1.holdout)
    assert not any(r in booking.holdout for r in v1.holdout if r not in booking.references)


def test_budget_refuses_a_budget_below_one_batch() -> None:
    assert Budget(12, 4).evaluations == 3
    with pytest.raises(Exception, match="cannot pay"):
        Budget(3, 4)


# --------------------------------------------------------------------------------------- evaluator
def test_evaluator_sentences_follow_the_metrics(booking: TaskSpec) -> None:
    ref = booking.references[0]
    import json

    samples = [
        Sample(0, json.dumps(ref)),  # exact copy of a reference
        Sample(1, json.dumps({**ref, "arrival_city": "Oslo", "price": 99.5})),
        Sample(2, '{"departure_city": "Rome"'),  # truncated
        Sample(3, "no json here"),
    ]
    ev = NaturalLanguageEvaluator(with_similarity=False, with_perplexity=False).evaluate(
        samples, evaluation_view(booking), None
    )
    text = " ".join(ev.sentences)
    assert ev.values["parse_rate"] == 0.5
    assert "Only 2 of 4 outputs were parseable JSON objects" in text
    assert "1 outputs were exact copies of reference records." in text
    assert "copied from the reference records" in text  # field overlap is high
    assert "similarity" not in text  # not computed without the embedder


# ------------------------------------------------------------------------------------- baselines
def test_instruction_reader_prefers_tags_and_skips_procedure_lines() -> None:
    orig = "Generate one flight booking as JSON with all fields filled in."
    assert read_instruction("<prompt>Write one new flight booking as a JSON object.</prompt>", orig)[0] == (
        "Write one new flight booking as a JSON object."
    )
    got, _ = read_instruction(
        "1. Cross-over from Step 1 to Step 2:\nTask: Create a realistic booking record in JSON.", orig
    )
    assert got == "Create a realistic booking record in JSON."
    assert read_instruction('Sure!\n{"a": 1}', orig)[0] is None


def test_template_crossover_and_roulette() -> None:
    assert template_crossover("A one. A two.", "B one. B two. B three.") == "A one. B two. B three."
    pop = [Unit("x", fitness=0.0), Unit("y", fitness=1.0)]
    picks = [roulette(pop, random.Random(s))[0].instruction for s in range(200)]
    assert picks.count("y") > 190  # fitness-proportionate: the zero-fitness unit is almost never first
    assert len(roulette(pop, random.Random(0))) == 2


# ---------------------------------------------------------------------------- what the agent reads
def test_verbal_agent_reads_sentences_and_scalar_agent_reads_only_the_number(booking: TaskSpec) -> None:
    from systems.optimizers.aod import AoDConfig, AoDOptimizer, Assessment
    from systems.optimizers.evaluator import Evaluation

    prompt = DiffusionPrompt(instruction=booking.instruction, notes=["Keep values short and real."])
    sentences = ["Only 1 of 4 outputs were parseable JSON objects.", "The outputs are repetitive."]
    best = Assessment(prompt, Evaluation({}, sentences), [], {"tsr": 0.25}, 0.4321, sentences, [])
    verbal = AoDOptimizer(AoDConfig(feedback="verbal")).request(
        "add_note", booking, best, ["x: kept"], -1, booking.instruction
    )
    scalar = AoDOptimizer(AoDConfig(feedback="scalar")).request(
        "set_hint", booking, best, [], -1, booking.instruction
    )
    assert all(s in verbal for s in sentences) and "0.432" not in verbal and '{"note":' in verbal
    assert "0.432" in scalar and not any(s in scalar for s in sentences) and '{"field":' in scalar
    assert "Keep values short and real." in verbal  # the current prompt is shown


def test_ar_generator_puts_notes_and_hints_into_the_ar_prompt(booking: TaskSpec) -> None:
    from systems.ar import ARSystem
    from systems.optimizers.base import ar_spec

    prompt = DiffusionPrompt(
        instruction="Write a booking.", notes=["Use new cities."], hints=[("cabin", "first")]
    )
    requests, _ = ARSystem({"k_shots": 1}).build_requests(ar_spec(booking, prompt), 2, 0)
    text = requests[0].messages[-1][1]
    assert text.startswith("Write a booking.\nUse new cities.\nUse these values: cabin = first")
    assert '"departure_city"' in text  # the schema and a few-shot reference are still ar's own
    from systems.optimizers.base import SteerPrompt

    pooled = SteerPrompt(instruction="Write a booking.", hint_pools=[("cabin", ["first", "business"])])
    assert ar_spec(booking, pooled).instruction.endswith(
        "For cabin, use one of: first, business, a different one each time."
    )


# ------------------------------------------------------------------------- distributional hints
def test_llada_hint_pools_draw_one_value_per_sample_seeded(booking: TaskSpec) -> None:
    from systems.llada import LLaDASystem

    params = {
        "k_shots": 0,
        "hints": {"cabin": "first", "airline": "KLM"},
        "hint_pools": {"cabin": ["economy", "business"]},
    }
    system = LLaDASystem(params)
    parts = [system.prompt_parts(booking, 3, i) for i in range(40)]
    drawn = [dict(p.hints)["cabin"] for p in parts]
    assert set(drawn) == {"economy", "business"}  # varies across samples, never the fixed "first"
    assert all(dict(p.hints)["airline"] == "KLM" for p in parts)  # fixed hints stay
    assert drawn == [dict(LLaDASystem(params).prompt_parts(booking, 3, i).hints)["cabin"] for i in range(40)]
    assert drawn != [dict(system.prompt_parts(booking, 4, i).hints)["cabin"] for i in range(40)]
    # the old contract is unchanged: no pools, the same prompts as before
    plain = LLaDASystem({"k_shots": 0, "hints": {"cabin": "first"}})
    assert plain.prompt_parts(booking, 0, 0).hints == [("cabin", "first")]


def test_a_pooled_prompt_through_the_optimizer_generator_is_llada_with_hint_pools(booking: TaskSpec) -> None:
    from systems.llada import LLaDASystem
    from systems.optimizers.base import DiffusionPromptGenerator

    params = {"k_shots": 1, "hint_pools": {"cabin": ["economy", "business", "first"]}}
    gen = DiffusionPromptGenerator(params)
    prompt = gen.initial_prompt(booking)
    assert prompt.hint_pools == [("cabin", ["economy", "business", "first"])] and prompt.hints == []
    captured: list[str] = []
    gen.system.generate_from_prompts = lambda spec, texts, seed, ctx: captured.extend(texts)  # type: ignore[method-assign]
    gen.generate(booking, prompt, 6, 11, None)  # type: ignore[arg-type]
    assert captured == LLaDASystem(params).prompts(booking, 6, 11)


def test_vary_hint_edits_are_checked_applied_and_removed(booking: TaskSpec) -> None:
    from systems.optimizers.base import template_text
    from systems.optimizers.edits import novel_values, variable_fields, vary_template

    b = EditBounds()
    p = DiffusionPrompt(instruction=booking.instruction, hints=[("cabin", "first")])
    assert "vary_hint" in applicable_kinds(p, b) and set(variable_fields(booking)) >= {"cabin", "price"}
    edit = vary_template(p, booking, random.Random(2), "cabin")
    assert edit.kind == "vary_hint" and set(edit.values) <= set(hint_fields(booking)["cabin"])
    assert check_edit(edit, p, booking, b, booking.instruction) is None
    q = apply_edit(p, edit)
    assert q.hints == [] and q.hint_pools == [("cabin", list(edit.values))]  # the pool replaces the pin
    assert "cabin: one of" in template_text(q) and p.hints == [("cabin", "first")]
    assert check_edit(PromptEdit("vary_hint", field="cabin", values=("economy",)), p, booking, b, "x")
    assert check_edit(
        PromptEdit("vary_hint", field="cabin", values=("economy", "rocket")), p, booking, b, "x"
    )
    assert apply_edit(q, PromptEdit("remove_hint", index=0)).hint_pools == []
    # free fields: new values of the references' own digit shape, none of them a reference value
    prices, novel = novel_values(booking, "price", random.Random(0))
    seen = {str(r["price"]) for r in booking.references}
    assert novel and len(prices) == 6 and not set(prices) & seen
    assert all(re.fullmatch(r"\d+\.\d+", v) for v in prices)


def test_novel_values_follow_the_shape_and_range_of_each_digit_run(booking: TaskSpec) -> None:
    from dataclasses import replace

    from systems.optimizers.edits import novel_values

    times = ["08:05", "09:45", "13:10", "21:55", "07:30"]
    refs = tuple({**booking.references[0], "date": t} for t in times)
    spec = replace(booking, references=refs)
    values, novel = novel_values(spec, "date", random.Random(1), k=8)
    assert novel and len(values) == 8 and not set(values) & set(times)
    for v in values:
        hh, mm = v.split(":")
        assert len(hh) == 2 and 7 <= int(hh) <= 21 and 5 <= int(mm) <= 55
    names, novel = novel_values(spec, "airline", random.Random(1))
    assert not novel and names == [booking.references[0]["airline"]]  # no shape: the references' own


def test_a_literal_hash_is_not_a_digit_run(booking: TaskSpec) -> None:
    """SuperNI commongen's inputs join concepts with `#` (`accident#city#traffic`): no digits, so the
    pool needs the agent's values and `novel_values` returns the references' own (it raised IndexError
    when `#` also stood for a digit run); a `#` beside digits keeps the digit runs' shape."""
    from dataclasses import replace

    from systems.optimizers.edits import needs_agent_values, novel_values

    concepts = ["accident#city#traffic", "board#flight#passenger", "grill#plate#vegetable"]
    spec = replace(booking, references=tuple({**booking.references[0], "airline": c} for c in concepts))
    assert needs_agent_values(spec, "airline")
    values, novel = novel_values(spec, "airline", random.Random(0))
    assert not novel and sorted(values) == sorted(concepts)
    rooms = ["Room #12", "Room #40", "Room #7"]
    spec = replace(booking, references=tuple({**booking.references[0], "airline": r} for r in rooms))
    assert not needs_agent_values(spec, "airline")
    values, novel = novel_values(spec, "airline", random.Random(0))
    assert novel and values and not set(values) & set(rooms)
    assert all(re.fullmatch(r"Room #\d+", v) and 7 <= int(v[6:]) <= 40 for v in values)


# ------------------------------------------------------------------------------ constrained replies
@pytest.mark.parametrize(
    ("kind", "reply", "expected"),
    [
        (
            "add_note",
            '{"note": "Use a different arrival city."}',
            PromptEdit("add_note", text="Use a different arrival city."),
        ),
        (
            "set_hint",
            '{"field": "cabin", "value": "business"}',
            PromptEdit("set_hint", field="cabin", value="business"),
        ),
        (
            "rewrite_instruction",
            '{"instruction": "Write one new booking as JSON."}',
            PromptEdit("rewrite_instruction", text="Write one new booking as JSON."),
        ),
    ],
)
def test_json_replies_become_edits(booking: TaskSpec, kind: str, reply: str, expected: PromptEdit) -> None:
    from systems.optimizers.edits import parse_structured

    p = DiffusionPrompt(instruction=booking.instruction)
    assert parse_structured(kind, reply, booking, p, -1, random.Random(0), EditBounds()) == expected


def test_reply_schemas_compile_to_finite_grammars_and_accept_good_replies(booking: TaskSpec) -> None:
    import json

    from metrics.structure import validator_for
    from systems.backends.grammar import build_grammar, max_bytes
    from systems.optimizers.edits import parse_structured, reply_schema

    p = DiffusionPrompt(instruction=booking.instruction)
    good = {
        "add_note": {"note": "Use a different arrival city."},
        "set_hint": {"field": "cabin", "value": "business"},
        "vary_hint": {"field": "price"},
        "rewrite_instruction": {"instruction": "Write one new flight booking as a JSON object."},
    }
    for kind, reply in good.items():
        schema = reply_schema(kind, booking, p, EditBounds(), booking.instruction)
        assert schema is not None and math.isfinite(max_bytes(build_grammar(schema)))
        assert not list(validator_for(schema).iter_errors(reply)), kind
        edit = parse_structured(kind, json.dumps(reply), booking, p, -1, random.Random(0), EditBounds())
        assert edit is not None and check_edit(edit, p, booking, EditBounds(), booking.instruction) is None
    bad_note = {"note": "ok"}
    assert list(validator_for(reply_schema("add_note", booking, p, EditBounds(), "x")).iter_errors(bad_note))
    assert reply_schema("remove_hint", booking, p, EditBounds(), "x") is None


def test_an_untrained_policy_is_exactly_uniform_so_aod_norl_draws_what_it_always_drew() -> None:
    """aod-norl samples from the starting policy; with no prior its zero logits give exactly 1/n (the
    same floats the uniform draws used before priors existed), so its cells are unchanged."""
    pol = EditPolicy(("a", "b", "c", "d"))
    assert pol.probs(["a", "c"]) == {"a": 0.5, "c": 0.5}
    assert pol.probs() == {k: 1.0 / 4 for k in "abcd"}
    rng = random.Random(3)
    counts = {k: 0 for k in "abcd"}
    for _ in range(4000):
        counts[pol.sample(rng)[0]] += 1
    assert all(abs(c / 4000 - 0.25) < 0.04 for c in counts.values())
    assert pol.sample(random.Random(9))[1] == 0.25


def test_a_prior_sets_the_starting_policy_and_masking_renormalizes_it() -> None:
    prior = {"a": 2.0, "b": 1.0, "c": 1.0}  # weights: normalized to 0.5, 0.25, 0.25
    pol = EditPolicy(("a", "b", "c"), prior=prior)
    assert pol.probs() == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.25})
    assert pol.probs(["b", "c"]) == pytest.approx({"b": 0.5, "c": 0.5})
    assert pol.probs(["a", "c"]) == pytest.approx({"a": 2 / 3, "c": 1 / 3})
    rng = random.Random(5)
    draws = [pol.sample(rng)[0] for _ in range(6000)]
    assert draws.count("a") / 6000 == pytest.approx(0.5, abs=0.03)
    # the same uniform numbers as the untrained policy: they differ only where the CDFs differ
    flat = EditPolicy(("a", "b", "c"))
    same = sum(pol.sample(random.Random(i))[0] == flat.sample(random.Random(i))[0] for i in range(3000))
    # prior: a [0, .5), b [.5, .75), c [.75, 1); uniform: a [0, 1/3), b [1/3, 2/3), c [2/3, 1)
    assert same / 3000 == pytest.approx(1 / 3 + (2 / 3 - 0.5) + 0.25, abs=0.03)


@pytest.mark.parametrize(
    ("prior", "named"),
    [
        ({"a": 1.0, "b": 1.0}, "missing ['c']"),
        ({"a": 1.0, "b": 1.0, "c": 1.0, "z": 1.0}, "unknown ['z']"),
        ({"a": 1.0, "b": 0.0, "c": 1.0}, "not positive and finite: ['b']"),
        ({"a": 1.0, "b": math.inf, "c": 1.0}, "not positive and finite: ['b']"),
    ],
)
def test_a_prior_must_give_every_kind_a_positive_weight(prior: dict, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        EditPolicy(("a", "b", "c"), prior=prior)


def test_aod_params_reject_a_prior_that_misses_an_edit_kind_naming_the_key() -> None:
    from bench.errors import BenchError
    from systems.aod import AoDNoRLSystem

    with pytest.raises(BenchError, match="policy_prior.*missing"):
        AoDNoRLSystem({"policy_prior": {"add_note": 1.0}})


def test_boltzmann_prior_is_a_softmax_of_mean_differences_over_the_pooled_sd() -> None:
    """Checked against a direct computation: pooled SD from the within-kind sums of squares, logits
    mean/s, an unobserved kind at the average observed logit."""
    diffs = {"a": [0.1, 0.3, 0.2], "b": [-0.2, 0.0], "c": [-0.5, -0.3, -0.4, -0.4]}
    got = boltzmann_prior(diffs, ("a", "b", "c", "d"))
    ss = (0.01 + 0.01 + 0.0) + (0.01 + 0.01) + (0.01 + 0.01 + 0.0 + 0.0)
    s = math.sqrt(ss / ((3 - 1) + (2 - 1) + (4 - 1)))
    logits = {"a": 0.2 / s, "b": -0.1 / s, "c": -0.4 / s}
    logits["d"] = sum(logits.values()) / 3
    z = sum(math.exp(v) for v in logits.values())
    assert got == pytest.approx({k: math.exp(v) / z for k, v in logits.items()})
    assert sum(got.values()) == pytest.approx(1.0) and got["a"] > got["d"] > got["c"]
    with pytest.raises(ValueError, match="pooled SD"):
        boltzmann_prior({"a": [0.1, 0.1], "b": [0.2]}, ("a", "b"))
    with pytest.raises(ValueError, match="no observed"):
        boltzmann_prior({"a": [math.nan]}, ("a",))


# ----------------------------------------------------------------------- EvoPrompt DE (Guo et al.)
def test_de_request_has_the_papers_four_steps_with_each_prompt_in_its_slot() -> None:
    from systems.optimizers.evoprompt import de_request

    text = de_request("DONOR ONE.", "DONOR TWO.", "BEST ONE.", "BASE ONE.")
    steps = [text.index(f"{k}. ") for k in (1, 2, 3, 4)]
    assert steps == sorted(steps)
    assert "different parts between Prompt 1 and Prompt 2" in text and "mutate the different parts" in text
    assert text.index("Prompt 1: DONOR ONE.") < steps[1] and text.index("Prompt 2: DONOR TWO.") < steps[1]
    assert steps[2] < text.index("Prompt 3: BEST ONE.") < steps[3]  # step 3 combines with the best
    assert text.index("Basic Prompt: BASE ONE.") > steps[3]  # step 4 crosses over with the base
    assert "<prompt>" in text


def test_de_donors_selection_and_sentence_fallback() -> None:
    from systems.optimizers.evoprompt import de_donors, de_select, template_de

    rng = random.Random(0)
    for _ in range(200):
        i = rng.randrange(5)
        a, b = de_donors(5, i, rng)
        assert a != b and i not in (a, b)
    pop = [Unit("a", fitness=0.5), Unit("b", fitness=0.2)]
    assert not de_select(pop, 0, Unit("c", fitness=0.5)) and pop[0].instruction == "a"  # not fitter: kept
    assert de_select(pop, 1, Unit("d", fitness=0.3)) and pop[1].instruction == "d"
    out = template_de(
        "Same start. Only in one.",
        "Same start. Only in two.",
        "Best first. Best second.",
        "Base first. Base second.",
        random.Random(1),
    )
    pieces = {
        "Same start.",
        "Only in one.",
        "Only in two.",
        "Best first.",
        "Best second.",
        "Base first.",
        "Base second.",
    }
    assert out and all(s in pieces for s in re.split(r"(?<=[.])\s+", out))
    assert "Same start." not in out  # a part the donors share is not a difference


# ----------------------------------------------------------------- PromptBreeder (Fernando et al.)
def test_promptbreeder_operator_prompts_follow_the_paper() -> None:
    from systems.optimizers import promptbreeder as pb

    assert set(pb.OPERATORS) == {
        "zero_order",
        "first_order",
        "eda",
        "eda_rank_index",
        "lineage",
        "zero_order_hyper",
        "first_order_hyper",
        "lamarckian",
    }
    assert "A list of 100 hints:" in pb.zero_order_request("Write trains.")
    assert pb.first_order_request("M.", "T.") == "M.\nINSTRUCTION: T.\nINSTRUCTION MUTANT:"
    assert pb.first_order_hyper_request("Make it short.").startswith(
        "Please summarize and improve the following instruction:"
    )
    zh = pb.zero_order_hyper_request("Write trains.", "Let's think step by step.")
    assert zh.startswith("Write trains. Let's think step by step.")
    rank = pb.rank_index_request("Improve it.", ["worst", "middle", "best"])
    assert "descending order of score" in rank and rank.index("1. worst") < rank.index("3. best")
    assert rank.rstrip().endswith("4.")
    lin = pb.lineage_request(["old elite", "new elite"])
    assert lin.startswith("GENOTYPES FOUND IN ASCENDING ORDER OF QUALITY") and lin.index("old") < lin.index(
        "new"
    )
    assert "workings out" in pb.lamarckian_request({"a": 1}) and pb.lamarckian_request({"a": 1}).endswith(
        "The instruction was:"
    )
    eda = pb.eda_request(["x", "y"])
    assert "1. x" in eda and "2. y" in eda and "fitness" not in eda.lower()


def test_eda_filter_drops_near_duplicates_above_095() -> None:
    from systems.optimizers.promptbreeder import filter_similar, lexical_vectors

    texts = ["write one train record", "write one train record", "Write one train record.", "list a hotel"]
    assert filter_similar(texts, lexical_vectors(texts)) == [0, 3]
    vecs = [[1.0, 0.0], [0.96, 0.28], [0.9, 0.4359]]  # cosines to the first: 0.96, 0.90
    assert filter_similar(["a", "b", "c"], vecs) == [0, 2]
