"""The batch reward of AoD's scorer, recomputable for any mix of samples from two paired batches.

The acceptance test (systems.optimizers.acceptance) swaps samples between the incumbent's and the
candidate's batch and recomputes both batch rewards for every swap pattern. Rescoring runs the cheap
metrics again (tsr, schema validity, diversity, novelty, field overlap: lexical, milliseconds) and
reuses what is expensive: each sample's similarity to the validation references is computed once per
text and averaged (exactly the `similarity` metric: mean over parsed records of the best cosine), and
each judged sample keeps its judge verdict (the judge's yes-share is a mean over judged samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.types import RunContext, Sample, TaskSpec
from systems.optimizers.judge import Verdict
from systems.optimizers.reward import reward, subrewards

#: The metrics the reward reads besides similarity and the judge.
REWARD_METRICS = ["tsr", "schema_valid", "diversity", "novelty", "field_overlap"]


@dataclass(frozen=True)
class Member:
    """One sample of a batch and, when the judge read it, its verdict."""

    sample: Sample
    verdict: Verdict | None = None


class PairedReward:
    """R(batch) for batches built from members of evaluated batches (similarities cached per text)."""

    def __init__(self, view: TaskSpec, ctx: RunContext | None, with_similarity: bool) -> None:
        self.view = view
        self.ctx = ctx
        self.with_similarity = with_similarity and ctx is not None
        self._similarity: dict[str, float | None] = {}

    def members(self, samples: list[Sample], verdicts: list[Verdict]) -> list[Member]:
        """The batch as members (verdicts belong to the first len(verdicts) samples); caches similarity."""
        if self.with_similarity:
            self._cache_similarity(samples)
        return [Member(s, verdicts[i] if i < len(verdicts) else None) for i, s in enumerate(samples)]

    def _cache_similarity(self, samples: list[Sample]) -> None:
        from metrics.cell import CellView

        todo = [s for s in samples if s.text not in self._similarity]
        if not todo:
            return
        cell = CellView(todo, self.view, self.ctx)  # type: ignore[arg-type]
        parsed = [
            j.sample.text
            for j in cell.judged
            if not j.harness_failure and j.extraction and j.extraction.record is not None
        ]
        best = cell.holdout_cosines.max(axis=1).tolist() if parsed and self.view.holdout else []
        for s in todo:
            self._similarity.setdefault(s.text, None)
        for text, value in zip(parsed, best, strict=False):
            self._similarity[text] = float(value)

    def values(self, members: list[Member]) -> dict[str, float]:
        from metrics.scoring import score_cell

        values = dict(score_cell([m.sample for m in members], self.view, REWARD_METRICS, None).values)
        if self.with_similarity:
            sims = [self._similarity.get(m.sample.text) for m in members]
            sims = [x for x in sims if x is not None]
            values["similarity"] = sum(sims) / len(sims) if sims else math.nan
        return values

    def reward(self, members: list[Member]) -> float:
        verdicts = [m.verdict for m in members if m.verdict is not None]
        yes = sum(v.yes_share for v in verdicts) / len(verdicts) if verdicts else None
        return reward(subrewards(self.values(members), yes))

    def difference(self, candidate: list[Member], incumbent: list[Member]) -> float:
        """The acceptance statistic: R(candidate batch) - R(incumbent batch)."""
        return self.reward(candidate) - self.reward(incumbent)
