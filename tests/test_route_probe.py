"""The route probe (benchmarks/diffusion/route_probe.py) reads the shares the head really mixes."""

from __future__ import annotations

import pytest
import torch
from tiny_dlm import perturbed_head_model

from benchmarks.diffusion.route_probe import RouteRecorder, commits
from systems.backends.mdlm.model import MaskedDiffusionTransformer


def _model(sentinel: bool, translate: bool) -> MaskedDiffusionTransformer:
    return perturbed_head_model(5, sentinel, translate)


def test_recording_leaves_the_distribution_alone_and_reads_the_mixture_weights() -> None:
    for sentinel, translate in ((True, True), (False, False)):
        m = _model(sentinel, translate)
        x = torch.randint(5, 40, (2, 20))
        with torch.no_grad():
            plain = m(x)
            rec = RouteRecorder(m)
            wrapped = m(x)
            rec.restore()
            again = m(x)
        assert torch.equal(plain, wrapped) and torch.equal(plain, again)
        _, copy, g = rec.calls[0]
        # independently: the vocabulary's weight from the head's own parts
        with torch.no_grad():
            h = m.hidden(x)
            _, pids, pmask = m._prompt_of(x, h, None)
            hn, hp = m.ln_f(h), m.ln_f(h[:, :8])
            scores = (m.copy_q(hn) @ m.copy_k(hp).transpose(1, 2) / 4.0).masked_fill(
                ~pmask[:, None], -torch.inf
            )
            if sentinel:
                keep = torch.softmax(torch.cat([m.copy_gate(hn), scores], -1), -1)[..., 0]
            else:
                keep = 1 - torch.sigmoid(m.copy_gate(hn))[..., 0]
        assert torch.allclose(copy, 1 - keep, atol=1e-6)
        assert bool(((g > 0) & (g < 1)).all()) if translate else bool((g == 0).all())


def test_commits_charge_each_new_token_to_the_call_before_it() -> None:
    mask = 1
    content = torch.zeros(40, dtype=torch.bool)
    content[20:] = True
    x0 = torch.tensor([[7, mask, mask, mask]])
    x1 = torch.tensor([[7, 25, mask, 9]])  # a content and a structure token committed
    x2 = torch.tensor([[7, 25, 30, 9]])
    share = lambda *v: torch.tensor([v])  # noqa: E731
    calls = [
        (x0, share(0.0, 0.9, 0.5, 0.2), share(0.0, 0.1, 0.0, 0.7)),
        (x1, share(0.0, 0.0, 0.4, 0.0), share(0.0, 0.0, 0.6, 0.0)),
        (x2, share(0, 0, 0, 0), share(0, 0, 0, 0)),
    ]
    got = commits(calls, mask, content)
    want = {"content": [(0.9, 0.1, 25), (0.4, 0.6, 30)], "structure": [(0.2, 0.7, 9)]}
    assert {k: [pytest.approx(v) for v in vs] for k, vs in want.items()} == got
