"""The LLM judge of AoD's judge cluster: yes/no answers to the task rubric and schema questions.

The judge reads one parsed record at a time and answers one question per call (small models answer a
single question far more reliably than a numbered list). Its text is read by `parse_yes_no`, which is
deliberately forgiving: the first standalone "yes"/"no" wins, then hedges ("not sure") count as no
answer, then negations, then affirmations. An output the parser cannot read is recorded as unanswered
and, in the verdict list, as not-a-yes. A sample that holds no JSON object is not sent to the judge at
all: every answer for it is "no" (there is no record to judge), which costs no call.

Calls are keyed by (question, record), so the same record asked the same question gets the same answer
within a run, whichever iteration produced it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from bench.types import JSON, Sample, TaskSpec
from metrics.extract import extract_record
from systems.optimizers.base import Agent

_YES_NO = re.compile(r"\b(yes|no)\b")
_HEDGE = re.compile(
    r"\b(not sure|unsure|(?:don.t|do not) know|cannot (?:tell|determine|say)|can't (?:tell|determine|say)|unclear|unknown|maybe|depends)\b"
)
_NEGATIVE = re.compile(
    r"\b(not|never|false|incorrect|invalid|wrong|nope|doesn't|isn't|aren't|don't|does not|is not)\b|n't\b"
)
_POSITIVE = re.compile(
    r"\b(true|correct|valid|indeed|certainly|affirmative|yeah|yep|right|plausible|matches)\b"
)

JUDGE_SYSTEM = (
    "You are a strict reviewer of data records. Answer each question about the record with yes or no."
)


def parse_yes_no(text: str) -> bool | None:
    """True for yes, False for no, None when the text gives no readable answer."""
    t = " ".join(text.lower().split())
    if not t:
        return None
    m = _YES_NO.search(t)
    if m:
        return m.group(1) == "yes"
    if _HEDGE.search(t):
        return None
    if _NEGATIVE.search(t):
        return False
    if _POSITIVE.search(t):
        return True
    return None


def schema_questions(spec: TaskSpec) -> list[str]:
    """Questions about structure the rubric does not ask (the judge's schema-conformance half)."""
    required = [str(k) for k in spec.schema.get("required", [])]
    qs = []
    if required:
        qs.append("Does the record have a value for every one of these fields: " + ", ".join(required) + "?")
    qs.append("Are all values realistic, with no placeholders such as 'string', 'N/A' or '...'?")
    return qs


@dataclass
class Verdict:
    """The judge's answers for one sample; `answers` has None for an unreadable reply."""

    index: int
    judged: bool
    answers: list[bool | None]
    replies: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> list[bool]:
        """One boolean per question, unreadable replies counted as not-a-yes (for `tsr_judge`)."""
        return [a is True for a in self.answers]

    @property
    def yes_share(self) -> float:
        return sum(self.verdicts) / len(self.verdicts) if self.verdicts else 0.0


class Judge:
    """Asks every question about every parsed record of a batch."""

    def __init__(self, agent: Agent, questions: list[str], record_chars: int = 600) -> None:
        self.agent = agent
        self.questions = questions
        self.record_chars = record_chars

    def prompt(self, record: JSON, question: str) -> str:
        text = json.dumps(record, ensure_ascii=False)[: self.record_chars]
        return f"Record: {text}\nQuestion: {question}\nAnswer yes or no."

    def judge(self, samples: list[Sample], limit: int | None = None) -> list[Verdict]:
        """Verdicts for the first `limit` samples (all when None)."""
        out = []
        for s in samples[: limit if limit is not None else len(samples)]:
            ext = extract_record(s.text, s.finish_reason)
            if ext.record is None or (s.status is not None and s.status.is_harness_failure):
                out.append(Verdict(s.index, False, [False] * len(self.questions)))
                continue
            answers: list[bool | None] = []
            replies: list[str] = []
            for q in self.questions:
                reply = self.agent.ask(
                    self.prompt(ext.record, q), key={"q": q, "record": ext.record}, system=JUDGE_SYSTEM
                )
                replies.append(reply)
                answers.append(parse_yes_no(reply))
            out.append(Verdict(s.index, True, answers, replies))
        return out


def summarize(questions: list[str], verdicts: list[Verdict]) -> dict[str, float]:
    """Yes-share per question over the judged records (unjudged samples count as no)."""
    if not verdicts:
        return {q: 0.0 for q in questions}
    return {q: sum(v.verdicts[i] for v in verdicts) / len(verdicts) for i, q in enumerate(questions)}


def judge_sentences(questions: list[str], verdicts: list[Verdict]) -> list[str]:
    """The judge's critique in words: which questions got a 'no', and how often."""
    judged = [v for v in verdicts if v.judged]
    if not judged:
        return ["The judge could not read any record (no output was a JSON object)."]
    out = []
    for i, q in enumerate(questions):
        no = sum(1 for v in judged if not v.verdicts[i])
        if no:
            out.append(
                f"The judge answered no (or gave no answer) to '{q}' for {no} of {len(judged)} records."
            )
    if not out:
        out.append(f"The judge answered yes to every question for all {len(judged)} records.")
    return out
