"""Length first (systems/backends/mdlm/length.py): the length draw and the hook that keeps EOS behind it."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
from tiny_dlm import TINY_DLM

torch = pytest.importorskip("torch")

from bench.types import GenerationRequest, SamplingParams  # noqa: E402
from systems.backends.mdlm import EmbeddedMDLMBackend  # noqa: E402
from systems.backends.mdlm.length import EosSuffix, LengthFirst, end_position  # noqa: E402

os.environ.setdefault("BENCH_DATA_DIR", "/work/shared/datasets")
needs_data = pytest.mark.skipif(
    not Path(os.environ["BENCH_DATA_DIR"]).exists(), reason="BENCH_DATA_DIR absent"
)


def first_reaching(p: list[float], u: float) -> int:
    """Independent: walk left to right keeping the running maximum."""
    best = -1.0
    for i, x in enumerate(p):
        best = max(best, x)
        if best >= u:
            return i
    return len(p)


def test_end_position_is_the_first_index_whose_running_max_reaches_u() -> None:
    rng = random.Random(3)
    for _ in range(300):
        p = [rng.random() ** 3 for _ in range(rng.randint(1, 40))]
        u = rng.random()
        assert end_position(torch.tensor(p, dtype=torch.float64), u) == first_reaching(p, u)
    assert end_position(torch.tensor([0.1, 0.2]), 0.9) == 2  # never reached: the whole window


def test_a_minimum_length_conditions_the_draw_on_long_enough_records() -> None:
    """With min_length m, P(L = i) must be P(i) / P(L >= m) for i >= m, P the unconditioned length law
    (the increments of the running maximum); checked on a fine grid of u against that formula."""
    rng = random.Random(5)
    for _ in range(20):
        p = [rng.random() ** 4 for _ in range(rng.randint(4, 20))]
        m = rng.randint(1, len(p) - 1)
        f = [max(p[: i + 1]) for i in range(len(p))]
        mass = {i: f[i] - (f[i - 1] if i else 0.0) for i in range(len(p))}
        mass[len(p)] = 1.0 - f[-1]
        keep = 1.0 - f[m - 1]
        grid = 20000
        drawn: dict[int, int] = {}
        for k in range(grid):
            length = end_position(torch.tensor(p, dtype=torch.float64), (k + 0.5) / grid, min_length=m)
            assert length >= m
            drawn[length] = drawn.get(length, 0) + 1
        for i in range(m, len(p) + 1):
            assert drawn.get(i, 0) / grid == pytest.approx(mass[i] / keep, abs=2e-3)
    assert end_position(torch.tensor([0.9, 0.9, 0.9]), 0.1, min_length=5) == 3  # longer than the window


def test_the_hook_draws_the_length_once_and_keeps_eos_behind_it() -> None:
    V, eos, mask, P, R = 12, 3, 4, 5, 20
    allowed = torch.ones(V, dtype=torch.bool)
    allowed[mask] = False

    def natural(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:  # the backend's rule
        logits[:, P:, ~allowed] = -torch.inf
        return logits

    hook = LengthFirst(P, eos, mask, natural, seeds=[11, 12])
    x = torch.full((2, P + R), mask)
    x[:, :P] = 7
    logits = torch.randn((2, P + R, V), generator=torch.Generator().manual_seed(0))
    expect = []
    for j in range(2):
        p_eos = torch.softmax(logits[j, P:].double(), dim=-1)[:, eos].tolist()
        expect.append(first_reaching(p_eos, hook.u[j]))
    out = hook(logits.clone(), x)
    assert hook.lengths == expect
    for j, n in enumerate(expect):
        assert bool(torch.isinf(out[j, P : P + n, eos]).all())  # no EOS before the drawn length
        tail = out[j, P + n :]
        assert bool((tail.argmax(-1) == eos).all()) and bool(torch.isinf(tail[:, :eos]).all())
        assert bool(torch.isinf(out[j, P:, mask]).all())  # the backend's rule still applies
    # a later pass (some positions committed) keeps the drawn lengths
    x[:, P] = 8
    hook(torch.randn((2, P + R, V)), x)
    assert hook.lengths == expect


def test_eos_suffix_allows_eos_only_right_of_all_content_and_only_eos_right_of_an_eos() -> None:
    """Per row, from the canvas: EOS is forbidden left of the rightmost committed content token; right of
    the first committed EOS only EOS may come; elsewhere the inner hook's logits pass unchanged. Checked
    against a position-by-position rule on random canvases."""
    V, eos, mask, P, R = 10, 3, 4, 3, 12
    natural_calls = []

    def natural(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        natural_calls.append(1)
        logits[:, P:, mask] = -torch.inf
        return logits

    hook = EosSuffix(P, eos, mask, natural)
    rng = random.Random(7)
    for _ in range(200):
        x = torch.full((3, P + R), mask)
        x[:, :P] = 9
        for j in range(3):  # a valid partial canvas: content, masks, then EOS from some point on
            cut = rng.randint(0, R)
            for i in range(R):
                if rng.random() < 0.4:
                    x[j, P + i] = eos if i >= cut else rng.choice([0, 1, 2, 5, 6])
        logits = torch.randn((3, P + R, V), generator=torch.Generator().manual_seed(rng.randint(0, 10**6)))
        out = hook(logits.clone(), x)
        for j in range(3):
            row = x[j, P:].tolist()
            content = [i for i, t in enumerate(row) if t not in (eos, mask)]
            eoses = [i for i, t in enumerate(row) if t == eos]
            for i in range(R):
                got, before = out[j, P + i], logits[j, P + i]
                if eoses and i > eoses[0]:
                    assert got[eos] == 0 and bool(torch.isinf(torch.cat([got[:eos], got[eos + 1 :]])).all())
                    continue
                assert bool(torch.isinf(got[mask]))  # the inner hook ran first
                if content and i < content[-1]:
                    assert bool(torch.isinf(got[eos]))
                else:
                    assert got[eos] == before[eos]
                others = [k for k in range(V) if k not in (eos, mask)]
                assert torch.equal(got[others], before[others])
        assert torch.equal(out[:, :P], logits[:, :P])  # the prompt is untouched
    assert len(natural_calls) == 200
    # one pass committed an EOS left of content (2 and 5): right of the EOS only EOS, the second rule wins
    x = torch.full((1, P + R), mask)
    x[0, P + 2], x[0, P + 5] = eos, 6
    out = hook(torch.zeros((1, P + R, V)), x)[0, P:]
    assert out[0, eos] == -torch.inf and out[1, eos] == -torch.inf  # left of both: no EOS
    for i in (3, 4, 6, 11):
        assert out[i, eos] == 0 and bool(torch.isinf(out[i, :eos]).all())


@needs_data
def test_eos_suffix_generation_never_commits_against_an_earlier_pass(tmp_path: Path) -> None:
    """A real (tiny) model: with `eos_suffix`, no pass commits an EOS left of content committed by an
    earlier pass, nor content right of an earlier EOS (two commits of one pass are not constrained against
    each other, as the docstring says), so fewer records hold content after their first EOS than without
    it. The identity says so, and the cached model is the plain one's."""
    from bench.tasks import load_task
    from systems.backends.mdlm import backend as mdlm_backend

    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    be = EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400, "eos_suffix": True}}, env)
    assert be.identity()["eos_suffix"] is True
    plain = EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400}}, env)
    assert "eos_suffix" not in plain.identity() and plain.train_seconds == be.train_seconds  # one model
    eos, mask = be.tok.eos_id, be.tok.mask_id
    params = SamplingParams(temperature=1.0, extra=(("steps", 6),))
    reqs = [
        GenerationRequest.chat("Fields: day", params, 0, i) for i in range(be.params.gen_batch_size)
    ]  # one batch
    canvases: list[torch.Tensor] = []  # the response canvas each pass saw, then the final one
    finals: list[torch.Tensor] = []
    orig_denoise, orig_hook = mdlm_backend.denoise, EosSuffix.__call__

    def seen(self, logits, x):  # noqa: ANN001, ANN202
        canvases.append(x[:, self.prompt_len :].clone())
        return orig_hook(self, logits, x)

    def keep(*a, **k):  # noqa: ANN002, ANN003, ANN202
        res = orig_denoise(*a, **k)
        finals.append(res.x[:, a[2] :].clone())
        return res

    mdlm_backend.denoise, EosSuffix.__call__ = keep, seen
    try:
        be.generate(reqs)
        hooked_passes = canvases + [finals[-1]]
        plain.generate(reqs)
    finally:
        mdlm_backend.denoise, EosSuffix.__call__ = orig_denoise, orig_hook

    checked = 0
    for before, after in zip(hooked_passes, hooked_passes[1:], strict=False):
        for b, a in zip(before.tolist(), after.tolist(), strict=True):
            content = [i for i, t in enumerate(b) if t not in (eos, mask)]
            eoses = [i for i, t in enumerate(b) if t == eos]
            if content and eoses and content[-1] > eoses[0]:
                continue  # one earlier pass committed both out of order: only EOS may follow (docstring)
            checked += 1
            for i, (t0, t1) in enumerate(zip(b, a, strict=True)):
                if t0 != mask or t1 == mask:
                    continue  # not committed by this pass
                if t1 == eos:
                    assert not content or i > content[-1]
                else:
                    assert not eoses or i < eoses[0]

    assert checked > 40  # most rows of the 6 passes x 16 rows

    def broken(x: torch.Tensor) -> int:  # rows with content after their first EOS
        return sum(eos in r and any(t != eos for t in r[r.index(eos) :]) for r in x.tolist())

    assert broken(finals[0]) < broken(finals[1])  # and the tiny model breaks the rule without it


@needs_data
def test_length_first_generation_stops_exactly_at_the_drawn_length(tmp_path: Path) -> None:
    from bench.tasks import load_task

    spec = load_task("multiwoz/train", n_references=None, n_holdout=None)
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    be = EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400, "length_first": True}}, env)
    assert be.identity()["length_first"] is True
    plain = EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400}}, env)
    assert "length_first" not in plain.identity()  # the cached model is shared: only decoding differs
    params = SamplingParams(temperature=0.5, extra=(("steps", 6),))
    reqs = [GenerationRequest.chat("Fields: day", params, 0, i) for i in range(6)]
    seen = []
    orig = LengthFirst.__call__

    def spy(self, logits, x):  # noqa: ANN001, ANN202
        seen.append(self)
        return orig(self, logits, x)

    LengthFirst.__call__ = spy
    try:
        comps = be.generate(reqs)
    finally:
        LengthFirst.__call__ = orig
    lengths = seen[0].lengths
    assert all(n is not None for n in lengths)
    for c, n in zip(comps, lengths, strict=True):
        assert c.tokens_out == n  # the first EOS is the drawn length
        assert c.finish_reason == ("stop" if n < be.response_length else "length")
    assert [c.text for c in be.generate(reqs)] == [c.text for c in comps]  # seeded


@needs_data
def test_competence_benchmark_counts_parse_and_validity_like_an_independent_recount(tmp_path: Path) -> None:
    import jsonschema

    from bench.tasks import load_task
    from benchmarks.diffusion.competence import measure
    from benchmarks.diffusion.steering import _OneBackend

    spec = load_task("multiwoz/train", n_references=32, n_holdout=32)
    env = SimpleNamespace(cache_dir=tmp_path, task=spec, seed=0)
    be = EmbeddedMDLMBackend.from_spec({"params": TINY_DLM | {"vocab_size": 400, "train_steps": 60}}, env)
    r = measure(spec, _OneBackend(be, tmp_path), {}, 6, 2, window_chars=1000.0)
    recs = []
    for t in r["texts"]:
        try:
            recs.append(json.loads(t.strip()))
        except json.JSONDecodeError:
            recs.append(None)
    objects = [x for x in recs if isinstance(x, dict)]
    assert len(r["texts"]) == 12
    assert r["parse_rate"] == len(objects) / 12
    valid = sum(1 for x in objects if not list(jsonschema.Draft202012Validator(spec.schema).iter_errors(x)))
    assert r["schema_valid"] == valid / 12
    assert r["ended_in_first_quarter"] == sum(len(t) < 250 for t in r["texts"]) / 12
    assert r["copied"] == sum(any(x == ref for ref in spec.references) for x in objects) / 12
    # per seed (6 records each, in seed order): what paired tests across systems read
    for seed, rates in enumerate(r["per_seed"]):
        mine = [x for x in recs[6 * seed : 6 * seed + 6] if isinstance(x, dict)]
        assert rates["parse_rate"] == len(mine) / 6
        assert (
            rates["schema_valid"]
            == sum(jsonschema.Draft202012Validator(spec.schema).is_valid(x) for x in mine) / 6
        )


def test_a_reference_verbatim_is_a_copy_whatever_its_key_order_and_spacing() -> None:
    from metrics.records import canonical  # what the competence benchmark's copy count compares

    ref = {"question": "Why?", "answers": ["a", "b"], "n": 1}
    again = json.loads('{"n": 1,   "answers": ["a", "b"], "question": "Why?"}')
    assert canonical(again) == canonical(ref)
    assert canonical({**ref, "answers": ["b", "a"]}) != canonical(ref)  # list order is content


def test_new_content_counts_what_one_pass_committed_besides_eos() -> None:
    """The trace's first-commit column, against a hand count on canvases built from a real tokenizer."""
    from benchmarks.diffusion.competence import new_content
    from systems.backends.mdlm.tokenizer import train_bpe

    tok = train_bpe(['{"q": "in the Portrait of Henry"}'] * 4, 300, "phrase")
    m, e = tok.mask_id, tok.eos_id
    a, b = tok.encode("Henry")[0], tok.encode('{"')[0]
    before = torch.tensor([[m, m, m, m, e], [m, m, m, m, m], [m, a, m, m, m]])
    after = torch.tensor([[m, a, m, e, e], [b, m, a, m, e], [m, a, b, m, m]])
    # fresh content: row 0 pos 1 (a); row 1 pos 0 (b), pos 2 (a); row 2 pos 2 (b); row 2 pos 1 was already there
    assert new_content(tok, before, after) == sorted(
        [(tok.token_text(a), 2, 1.5), (tok.token_text(b), 2, 1.0)], key=lambda r: r[0]
    )
    assert new_content(tok, after, after) == []


def test_slot_probe_masks_exactly_the_value_tokens_and_finds_the_field_s_first_one() -> None:
    """benchmarks.diffusion.slot_probe: every character of every value (quotes included) lies in a masked
    token, no visible token holds one, and the probed token is where the field's value text starts."""
    from benchmarks.diffusion.slot_probe import value_masked, with_line
    from systems.backends.mdlm.tokenizer import train_bpe

    rec = {"arriveBy": "08:06", "day": "saturday", "price": "12.80 pounds", "n": 3}
    text = json.dumps(rec)
    tok = train_bpe([text] * 4 + ['{"day": "sunday"}'] * 4, 320)
    ids, in_value, first = value_masked(tok, rec, "day")
    pieces = [tok.token_text(i) for i in ids]
    assert "".join(pieces) == text
    value_chars = set()  # independent: find each value's JSON text after its key
    for k, v in rec.items():
        at = text.index(f'"{k}": ') + len(f'"{k}": ')
        value_chars |= set(range(at, at + len(json.dumps(v))))
    pos = 0
    for piece, masked in zip(pieces, in_value, strict=True):
        span = set(range(pos, pos + len(piece)))
        assert masked == bool(span & value_chars), piece
        pos += len(piece)
    day_start = text.index('"saturday"') + 1
    assert sum(map(len, pieces[:first])) <= day_start < sum(map(len, pieces[: first + 1]))
    assert with_line("Instruction\nFields: a", "Note.") == "Instruction\nNote.\nFields: a"
    assert with_line("Instruction", "Note.") == "Instruction\nNote."
