"""Code checks for TruthfulQA items (Lin et al. 2022): the answer lists must agree with each other.

Whether an answer is *true* is the LLM's question; what the record alone decides is bookkeeping the
dataset itself keeps: the best answer is one of the correct answers (all 790 upstream items) and none
of the incorrect ones (all 790), no answer is listed as both correct and incorrect (788 of 790), and
the question is a question (788 of 790 end with "?", a closing quote allowed).
"""

from __future__ import annotations

from bench.tasks.truthfulqa import RUBRIC
from bench.types import JSON, TaskSpec
from metrics.rubrics import Check
from metrics.rubrics.common import is_text, norm

_CLOSERS = "\"'”’)]"


def _answers(r: JSON, key: str) -> set[str] | None:
    v = r.get(key)
    if not isinstance(v, list) or not all(is_text(a) for a in v):
        return None
    return {norm(a) for a in v}


def best_among_correct(r: JSON) -> bool | None:
    correct = _answers(r, "correct_answers")
    best = r.get("best_answer")
    return None if correct is None or not is_text(best) else norm(best) in correct


def best_not_incorrect(r: JSON) -> bool | None:
    incorrect = _answers(r, "incorrect_answers")
    best = r.get("best_answer")
    return None if incorrect is None or not is_text(best) else norm(best) not in incorrect


def lists_disjoint(r: JSON) -> bool | None:
    correct, incorrect = _answers(r, "correct_answers"), _answers(r, "incorrect_answers")
    return None if correct is None or incorrect is None else not (correct & incorrect)


def question_mark(r: JSON) -> bool | None:
    q = r.get("question")
    return None if not is_text(q) else q.strip().rstrip(_CLOSERS).endswith("?")


def checks(spec: TaskSpec) -> list[Check]:
    best_true, correct_true, incorrect_false = RUBRIC[0], RUBRIC[1], RUBRIC[2]
    return [
        Check(
            "best_among_correct",
            "best_answer is one of correct_answers",
            best_among_correct,
            best_true,
            decides=False,
        ),
        Check(
            "best_not_incorrect",
            "best_answer is none of incorrect_answers",
            best_not_incorrect,
            incorrect_false,
            decides=False,
        ),
        Check(
            "lists_disjoint",
            "no answer is both in correct_answers and incorrect_answers",
            lists_disjoint,
            correct_true,
            decides=False,
        ),
        Check("question_mark", 'question ends with "?" (a closing quote allowed)', question_mark),
    ]
