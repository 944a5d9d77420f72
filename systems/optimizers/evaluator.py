"""The natural-language evaluator: turns a batch's metrics into sentences an LLM agent can act on.

It scores the batch with the harness's own metric functions (`metrics.scoring.score_cell`) against the
optimizer's `evaluation_view` of the task (references only, never the holdout), so what the optimizer is
told and what the final table reports are measured the same way. Every sentence is a pure function of
those numbers (thresholds below), so the same batch always reads the same.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from bench.types import JSON, RunContext, Sample, TaskSpec

#: Metrics the evaluator computes; similarity needs the embedder, perplexity the scorer.
CHEAP_METRICS = [
    "parse_rate",
    "schema_valid",
    "tsr",
    "diversity",
    "distinct_1",
    "entropy",
    "novelty",
    "field_overlap",
]
MODEL_METRICS = ["similarity", "perplexity"]


@dataclass
class Evaluation:
    """Metric values of one batch (NaN where undefined), the sentences, and per-sample rows."""

    values: dict[str, float]
    sentences: list[str]
    rows: list[JSON] = field(default_factory=list)
    info: JSON = field(default_factory=dict)


def _pct(x: float) -> str:
    return f"{round(100 * x)}%"


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


class NaturalLanguageEvaluator:
    """Scores a batch and describes it in plain sentences (the judge cluster's quantitative half)."""

    def __init__(self, with_similarity: bool = True, with_perplexity: bool = True) -> None:
        self.names = list(CHEAP_METRICS)
        if with_similarity:
            self.names.append("similarity")
        if with_perplexity:
            self.names.append("perplexity")

    def evaluate(
        self,
        samples: list[Sample],
        view: TaskSpec,
        ctx: RunContext | None,
        previous: dict[str, float] | None = None,
    ) -> Evaluation:
        from metrics.scoring import score_cell

        names = self.names if ctx is not None else list(CHEAP_METRICS)
        score = score_cell(samples, view, names, ctx)  # type: ignore[arg-type]
        values = dict(score.values)
        return Evaluation(values, describe(values, score.rows, score.info, previous), score.rows, score.info)


def describe(
    values: dict[str, float], rows: list[JSON], info: JSON, previous: dict[str, float] | None = None
) -> list[str]:
    """Sentences for one batch, most important first (structure, then copying, then variety)."""
    n = len(rows)
    out: list[str] = []
    parsed = sum(1 for r in rows if r.get("record") is not None)
    statuses = Counter(r.get("status") for r in rows)
    if n and parsed == n:
        out.append(f"All {n} outputs were single JSON objects.")
    elif n:
        why = []
        if statuses.get("truncated"):
            why.append(f"{statuses['truncated']} stopped before the JSON closed")
        if statuses.get("invalid_json"):
            why.append(f"{statuses['invalid_json']} were not valid JSON")
        out.append(
            f"Only {parsed} of {n} outputs were parseable JSON objects"
            + (f" ({', '.join(why)})." if why else ".")
        )
    valid = sum(1 for r in rows if r.get("record") is not None and not r.get("schema_errors"))
    if parsed:
        if valid == parsed:
            out.append(f"Every parsed record matched the schema ({valid} of {n}).")
        else:
            out.append(f"{valid} of {parsed} parsed records matched the schema.")
            problem = _top_schema_problem(info.get("structure") or {})
            if problem:
                out.append(problem)
    failures = Counter(f.split(":", 1)[0] for r in rows for f in (r.get("tsr_failures") or []))
    if failures.get("copy_of_reference"):
        out.append(f"{failures['copy_of_reference']} outputs were exact copies of reference records.")
    if failures.get("duplicate_of_sample"):
        out.append(f"{failures['duplicate_of_sample']} outputs repeated another output word for word.")
    if failures.get("placeholder") or failures.get("empty"):
        out.append(
            f"{failures.get('placeholder', 0) + failures.get('empty', 0)} outputs left a field empty or filled it with a placeholder."
        )
    fo = values.get("field_overlap")
    if _ok(fo):
        if fo > 0.6:
            out.append(
                f"Most field values ({_pct(fo)}) are copied from the reference records; invent new values."
            )
        elif fo > 0.3:
            out.append(f"{_pct(fo)} of field values also appear in the reference records.")
        else:
            out.append(f"Field values are mostly new ({_pct(fo)} shared with the references).")
    nov = values.get("novelty")
    if _ok(nov):
        if nov < 0.4:
            out.append(
                f"The wording mostly repeats the references: only {_pct(nov)} of word triples are new."
            )
        elif nov < 0.7:
            out.append(
                f"The wording is partly new ({_pct(nov)} of word triples are absent from the references)."
            )
        else:
            out.append(f"The wording is new ({_pct(nov)} of word triples are absent from the references).")
    div = values.get("diversity")
    if _ok(div):
        if div < 0.5:
            out.append(f"The outputs are repetitive: only {_pct(div)} of word pairs are distinct.")
        elif div < 0.75:
            out.append(f"The outputs are moderately varied ({_pct(div)} distinct word pairs).")
        else:
            out.append(f"The outputs are varied ({_pct(div)} distinct word pairs).")
    ent = values.get("entropy")
    if _ok(ent):
        out.append(f"Word entropy is {ent:.2f} nats.")
    sim = values.get("similarity")
    if _ok(sim):
        if sim < 0.5:
            out.append(f"The records look unlike real ones (similarity {sim:.2f} to held-back references).")
        elif sim < 0.75:
            out.append(f"The records are somewhat like real ones (similarity {sim:.2f}).")
        else:
            out.append(f"The records resemble real ones (similarity {sim:.2f}).")
    ppl = values.get("perplexity")
    if _ok(ppl):
        word = "fluent" if ppl < 20 else "acceptable" if ppl < 60 else "unnatural"
        out.append(f"The records read as {word} text (perplexity {ppl:.1f}).")
    if previous:
        out.extend(_trends(values, previous))
    return out


def _top_schema_problem(structure: dict[str, dict[str, int]]) -> str | None:
    words = {
        "missing_required": "the field '{p}' was missing",
        "type_violation": "the field '{p}' had the wrong type",
        "enum_violation": "the field '{p}' used a value outside its allowed set",
        "other": "'{p}' broke a format, pattern or extra-key rule",
    }
    best: tuple[int, str, str] | None = None
    for kind, per_path in structure.items():
        for path, count in per_path.items():
            if best is None or count > best[0]:
                best = (count, kind, path)
    if best is None:
        return None
    count, kind, path = best
    what = words.get(kind, "'{p}' broke the rule " + kind).format(p=path or "(record)")
    return f"Most common schema problem: {what} ({count} times)."


def _trends(values: dict[str, float], previous: dict[str, float]) -> list[str]:
    out = []
    for name, label in (
        ("schema_valid", "Schema validity"),
        ("diversity", "Diversity"),
        ("novelty", "Novelty"),
    ):
        a, b = previous.get(name), values.get(name)
        if _ok(a) and _ok(b) and abs(b - a) >= 0.05:
            out.append(
                f"{label} {'rose' if b > a else 'fell'} from {a:.2f} to {b:.2f} compared with the best prompt."
            )
    return out
