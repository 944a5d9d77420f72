"""AoD's policy over prompt-edit types: a softmax over edit kinds, trained REINFORCE-style with a
baseline and a PPO-like clipped step.

Why so small: the prompt optimizer (an LLM) writes the content of an edit; what is learned is *which
kind* of edit pays on this task and generator (add a note, set a `field: value` hint, rewrite the
instruction, ...). The paper describes a blend of PPO and REINFORCE over prompt space; this is that blend
at the smallest scale that is still the real thing:

- action a ~ pi_theta (softmax over the applicable kinds; inapplicable ones are masked out),
- reward r = R(child prompt) - R(parent prompt) (the edit's improvement),
- baseline b = exponential moving average of past r; advantage A = r - b,
- update: `epochs` gradient-ascent steps on the clipped surrogate
  L(theta) = min(rho * A, clip(rho, 1 - eps, 1 + eps) * A), rho = pi_theta(a) / pi_old(a),
  whose gradient in the logits is rho * A * (onehot(a) - pi_theta) while unclipped and 0 once clipped.
  Clipping bounds how far one noisy reward can move the policy (the "small step" in Theorem 1's
  contraction argument).

A policy can start from a prior instead of uniform (`prior`, `boltzmann_prior`): the edit kinds' values
learned across other cells of the task, because one cell keeps too few edits for its own updates to move
the policy (docs/systems-aod.md, "A policy learned across cells").
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bench.types import JSON


def _draw(rng: random.Random, p: dict[str, float]) -> tuple[str, float]:
    """One kind from the distribution `p` by inverse CDF on one uniform draw, and its probability."""
    u = rng.random()
    acc = 0.0
    for k, pk in p.items():
        acc += pk
        if u < acc:
            return k, pk
    last = list(p)[-1]
    return last, p[last]


@dataclass
class EditPolicy:
    kinds: tuple[str, ...]
    lr: float = 0.5
    clip: float = 0.2
    epochs: int = 4
    baseline_decay: float = 0.7
    logits: dict[str, float] = field(default_factory=dict)
    baseline: float = 0.0
    updates: int = 0
    prior: Mapping[str, float] | None = None  # starting probabilities (None: uniform)

    def __post_init__(self) -> None:
        if self.prior is not None:
            check_prior(self.prior, self.kinds)
            z = sum(self.prior.values())
            for k in self.kinds:
                self.logits.setdefault(k, math.log(self.prior[k] / z))
        for k in self.kinds:
            self.logits.setdefault(k, 0.0)

    def probs(
        self, allowed: list[str] | None = None, logits: dict[str, float] | None = None
    ) -> dict[str, float]:
        logits = logits or self.logits
        names = [k for k in self.kinds if allowed is None or k in allowed]
        top = max(logits[k] for k in names)
        weights = {k: math.exp(logits[k] - top) for k in names}
        z = sum(weights.values())
        return {k: w / z for k, w in weights.items()}

    def sample(self, rng: random.Random, allowed: list[str] | None = None) -> tuple[str, float]:
        """An edit kind and its probability under the current policy (pi_old for the update)."""
        return _draw(rng, self.probs(allowed))

    def update(self, kind: str, reward: float, p_old: float, allowed: list[str] | None = None) -> JSON:
        """One clipped policy-gradient update for the action taken; returns what happened (for the trace)."""
        advantage = reward - self.baseline if self.updates else reward
        logits = dict(self.logits)
        clipped = False
        ratio = 1.0
        for _ in range(self.epochs):
            p = self.probs(allowed, logits)
            ratio = p[kind] / p_old if p_old > 0 else 1.0
            if (advantage > 0 and ratio > 1 + self.clip) or (advantage < 0 and ratio < 1 - self.clip):
                clipped = True
                break
            for k, pk in p.items():
                grad = ratio * advantage * ((1.0 if k == kind else 0.0) - pk)
                logits[k] += self.lr * grad
        self.logits = logits
        self.baseline = (
            reward
            if not self.updates
            else self.baseline_decay * self.baseline + (1 - self.baseline_decay) * reward
        )
        self.updates += 1
        return {
            "kind": kind,
            "reward": reward,
            "advantage": advantage,
            "ratio": ratio,
            "clipped": clipped,
            "baseline": self.baseline,
            "probs": self.probs(),
        }


def check_prior(prior: Mapping[str, float], kinds: Sequence[str]) -> None:
    """A prior names every edit kind, and only those, with a positive finite weight (a kind at 0 could
    never be drawn, and a round where it is the only applicable kind would have no distribution)."""
    missing = [k for k in kinds if k not in prior]
    unknown = [k for k in prior if k not in kinds]
    bad = [k for k, v in prior.items() if not (isinstance(v, int | float) and math.isfinite(v) and v > 0)]
    if missing or unknown or bad:
        raise ValueError(
            "policy prior must give every edit kind a positive weight"
            + (f"; missing {missing}" if missing else "")
            + (f"; unknown {unknown} (kinds: {list(kinds)})" if unknown else "")
            + (f"; not positive and finite: {bad}" if bad else "")
        )


def boltzmann_prior(differences: Mapping[str, Sequence[float]], kinds: Sequence[str]) -> dict[str, float]:
    """Edit-kind probabilities from observed paired reward differences D per kind (other cells' rounds):
    a softmax of each kind's mean D in units of the pooled within-kind standard deviation of D,
    p_k proportional to exp(mean_k / s).

    Why this scale: s is the noise of one round's D, so a kind whose edits gain one noise unit more than
    another's is drawn e times as often. It keeps every kind drawable (exploration) and needs no tuned
    temperature. A kind never observed gets the mean of the observed kinds' logits (no evidence either
    way). Why the mean of D and not the probability of being best (Thompson sampling): the latter puts
    almost all mass on one kind, and when that kind is not applicable in a round the renormalized draw
    falls to the runner-up whatever its value."""
    observed = {k: [float(d) for d in differences.get(k, ()) if math.isfinite(d)] for k in kinds}
    observed = {k: v for k, v in observed.items() if v}
    if not observed:
        raise ValueError("no observed paired differences to build a prior from")
    means = {k: sum(v) / len(v) for k, v in observed.items()}
    dof = sum(len(v) - 1 for v in observed.values())
    ss = sum(sum((d - means[k]) ** 2 for d in v) for k, v in observed.items())
    if dof <= 0 or ss <= 0:
        raise ValueError("a prior needs repeated, varying differences within kinds (pooled SD is 0)")
    scale = math.sqrt(ss / dof)
    logits = {k: m / scale for k, m in means.items()}
    neutral = sum(logits.values()) / len(logits)
    full = {k: logits.get(k, neutral) for k in kinds}
    top = max(full.values())
    weights = {k: math.exp(v - top) for k, v in full.items()}
    z = sum(weights.values())
    return {k: w / z for k, w in weights.items()}
