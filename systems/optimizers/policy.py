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
"""

from __future__ import annotations

import math
import random
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

    def __post_init__(self) -> None:
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

    def uniform(self, allowed: list[str] | None = None) -> dict[str, float]:
        """The frozen policy of `aod-norl`: uniform over the applicable kinds."""
        names = [k for k in self.kinds if allowed is None or k in allowed]
        return {k: 1.0 / len(names) for k in names}

    def sample_uniform(self, rng: random.Random, allowed: list[str] | None = None) -> tuple[str, float]:
        """A kind drawn uniformly (same RNG use as `sample`, so only the probabilities differ)."""
        return _draw(rng, self.uniform(allowed))

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
