"""The LLM judge of AoD's judge cluster: yes/no answers to the task rubric and schema questions.

The judge reads one parsed record at a time and answers one question per call (small models answer a
single question far more reliably than a numbered list). Its text is read by `parse_yes_no`, which is
deliberately forgiving: the first standalone "yes"/"no" wins, then hedges ("not sure") count as no
answer, then negations, then affirmations. An output the parser cannot read is recorded as unanswered
and, in the verdict list, as not-a-yes. A sample that holds no JSON object is not sent to the judge at
all: every answer for it is "no" (there is no record to judge), which costs no call.

Calls are keyed by (question, record), so the same record asked the same question gets the same answer
within a run, whichever iteration produced it.

Questions the record alone decides are answered in code, not by the LLM (issue 10): `Judge.for_task`
collects the family's code checks (metrics/rubrics/) and checks for the two schema questions; for each
question, a failed check answers "no", deciding checks that all pass answer "yes", and only what is
left (semantic questions, or a necessary check that passed) goes to the LLM. `Verdict.sources` says
which answered each question. benchmarks/judge/calibration.py measures how often the LLM would have
agreed with the code on the decidable questions (docs/systems-aod.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.types import JSON, Sample, TaskSpec
from metrics.extract import extract_record
from metrics.rubrics import Check, answer, rubric_checks
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


PLACEHOLDER_QUESTION = "Are all values realistic, with no placeholders such as 'string', 'N/A' or '...'?"


def _required_question(required: list[str]) -> str:
    return "Does the record have a value for every one of these fields: " + ", ".join(required) + "?"


def schema_questions(spec: TaskSpec) -> list[str]:
    """Questions about structure the rubric does not ask (the judge's schema-conformance half)."""
    required = [str(k) for k in spec.schema.get("required", [])]
    qs = []
    if required:
        qs.append(_required_question(required))
    qs.append(PLACEHOLDER_QUESTION)
    return qs


def schema_question_checks(spec: TaskSpec) -> list[Check]:
    """Code answers to the schema questions: required values present (decides); no placeholder (the
    default rubric's placeholder test, a necessary condition: realism stays with the LLM)."""
    from metrics.rubric import Rubric

    required = [str(k) for k in spec.schema.get("required", [])]
    rubric = Rubric(spec.schema, spec.references)

    def has_required(r: JSON) -> bool:
        return all(k in r and r[k] is not None and r[k] != "" for k in required)

    def no_placeholder(r: JSON) -> bool:
        return not any(f.startswith(("placeholder:", "empty:")) for f in rubric.failures(r))

    out = [Check("no_placeholder", "no required string is empty or a placeholder", no_placeholder,
                 PLACEHOLDER_QUESTION, decides=False)]  # fmt: skip
    if required:
        out.insert(0, Check("has_required", "every required field has a value", has_required,
                            _required_question(required)))  # fmt: skip
    return out


@dataclass
class Verdict:
    """The judge's answers for one sample; `answers` has None for an unreadable reply."""

    index: int
    judged: bool
    answers: list[bool | None]
    replies: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # per question: "code" or "llm"

    @property
    def verdicts(self) -> list[bool]:
        """One boolean per question, unreadable replies counted as not-a-yes (for `tsr_judge`)."""
        return [a is True for a in self.answers]

    @property
    def yes_share(self) -> float:
        return sum(self.verdicts) / len(self.verdicts) if self.verdicts else 0.0


class Judge:
    """Asks every question about every parsed record of a batch."""

    def __init__(
        self, agent: Agent, questions: list[str], record_chars: int = 600, checks: Sequence[Check] = ()
    ) -> None:
        self.agent = agent
        self.questions = questions
        self.record_chars = record_chars
        self.checks = list(checks)

    @classmethod
    def for_task(cls, agent: Agent, questions: list[str], spec: TaskSpec, record_chars: int = 600) -> Judge:
        """A judge that answers the task's decidable questions in code (family and schema checks)."""
        return cls(agent, questions, record_chars, rubric_checks(spec) + schema_question_checks(spec))

    def code_answer(self, record: JSON, question: str) -> bool | None:
        """The code's answer, or None when the LLM must be asked."""
        return answer(self.checks, question, record) if self.checks else None

    def prompt(self, record: JSON, question: str) -> str:
        text = json.dumps(record, ensure_ascii=False)[: self.record_chars]
        return f"Record: {text}\nQuestion: {question}\nAnswer yes or no."

    def ask_llm(self, record: JSON, question: str) -> str:
        """The LLM judge's raw reply to one question about one record."""
        return self.agent.ask(
            self.prompt(record, question), key={"q": question, "record": record}, system=JUDGE_SYSTEM
        )

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
            sources: list[str] = []
            for q in self.questions:
                code = self.code_answer(ext.record, q)
                if code is not None:
                    replies.append("code: yes" if code else "code: no")
                    answers.append(code)
                    sources.append("code")
                    continue
                reply = self.ask_llm(ext.record, q)
                replies.append(reply)
                answers.append(parse_yes_no(reply))
                sources.append("llm")
            out.append(Verdict(s.index, True, answers, replies, sources))
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
