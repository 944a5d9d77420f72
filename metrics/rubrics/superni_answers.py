"""Checks of the SuperNI tasks whose answer, or a necessary condition of it, follows from the input.

Most Super-NaturalInstructions tasks (Wang et al. 2022) need language to answer ("is this comment
toxic?"), so the family's generic checks (metrics/rubrics/superni.py) can only refuse a blank, copied
or malformed answer. A few task definitions fix the answer, or part of it, by the input alone; each such
task gets a check here that answers the correctness question "Is the output the correct answer for this
input according to the task definition?":

* task244, count the elements of the union of two sets: the answer is |Set1 ∪ Set2| (decides);
* task102, CommonGen (Lin et al. 2020): the sentence must use every concept of the input's set of 3 to
  5 concepts. A concept counts when an output word starts with it (`grill` in `grilled`; a final e or y
  dropped: `make` in `making`); irregular forms do not match (`lie` / `lying`, `bring` / `brought`: 2
  of the 20 shipped instances), so one concept may be missing (necessary only). An input that is no
  such set (`custom####`) has no correct sentence;
* task132, DAIS dative alternation: the sentence says the same with the other construction (`Linda
  shrieked him some news` / `Linda shrieked some news to him`), so its words are the input's with one
  `to` or `for` added or taken away (necessary only);
* task1703, LJSpeech text normalisation: every number of the input is written out in words, so the
  input has a digit and the output none (necessary only). A rule read off the references instead ("every
  reference input has a digit, no output does") would also fire on task118, whose math questions with
  letter answers all happen to hold digits, and fail its real instances.

All 20 shipped instances of each task pass its check.
"""

from __future__ import annotations

import re
from collections import Counter

from bench.types import JSON
from metrics.records import words
from metrics.rubrics import Check, CheckFn
from metrics.rubrics.common import is_text

UNION_TASK = "superni/task244_count_elements_in_set_union"
COMMONGEN_TASK = "superni/task102_commongen_sentence_generation"
DATIVE_TASK = "superni/task132_dais_text_modification"
NUMBERS_TASK = "superni/task1703_ljspeech_textmodification"

_TWO_SETS = re.compile(r"Set1: '\{([^{}]*)\}', Set2: '\{([^{}]*)\}'")
_INTEGER = re.compile(r"^-?\d+$")
_DATIVE_MARKERS = {"to", "for"}
_DIGIT = re.compile(r"\d")


def output_text(r: JSON) -> str | None:
    """The output as text (the all_outputs option keeps every acceptable output: the first is read)."""
    v = r.get("output")
    if isinstance(v, list):
        return v[0] if v and all(is_text(x) for x in v) else None
    return v if is_text(v) else None


def _pair(r: JSON) -> tuple[str, str] | None:
    o, v = output_text(r), r.get("input")
    return (v, o) if o is not None and is_text(v) else None


def int_set(text: str) -> set[int] | None:
    """The integers of a comma-separated list ("1, 7, 10"; "" is the empty set), None if any item is not one."""
    items = [t.strip() for t in text.split(",")] if text.strip() else []
    return {int(t) for t in items} if all(_INTEGER.match(t) for t in items) else None


def output_counts_the_union(r: JSON) -> bool | None:
    """task244: the output is |Set1 ∪ Set2| of the input's two sets; an input that states no two sets of
    integers has no correct count, so its output is not one."""
    pair = _pair(r)
    if pair is None:
        return None
    m = _TWO_SETS.search(pair[0])
    sets = (int_set(m.group(1)), int_set(m.group(2))) if m else (None, None)
    if sets[0] is None or sets[1] is None:
        return False
    return pair[1].strip() == str(len(sets[0] | sets[1]))


def _stem(concept: str) -> str:
    return concept[:-1] if len(concept) > 3 and concept[-1] in "ey" else concept


def concept_set(text: str) -> list[str] | None:
    """The concepts of a CommonGen input: 3 to 5 distinct, non-empty `#`-joined items, as the task
    definition states; None for anything else (`custom####`, `accident###traffic`)."""
    concepts = [c.strip().lower() for c in text.split("#")]
    ok = 3 <= len(concepts) <= 5 and all(concepts) and len(set(concepts)) == len(concepts)
    return concepts if ok else None


def output_uses_the_concepts(r: JSON) -> bool | None:
    """task102: every concept of the input starts some output word, all but one allowed to miss
    (irregular forms); an input that is not a concept set has no correct sentence."""
    pair = _pair(r)
    if pair is None:
        return None
    concepts = concept_set(pair[0])
    if concepts is None:
        return False
    said = words(pair[1])
    return sum(any(w.startswith(_stem(c)) for w in said) for c in concepts) >= len(concepts) - 1


def output_rephrases_the_dative(r: JSON) -> bool | None:
    """task132: the output's words are the input's, with exactly one `to` or `for` added or removed."""
    pair = _pair(r)
    if pair is None:
        return None
    before, after = Counter(words(pair[0])), Counter(words(pair[1]))
    changed = (after - before) + (before - after)
    return sum(changed.values()) == 1 and set(changed) <= _DATIVE_MARKERS


def output_spells_out_digits(r: JSON) -> bool | None:
    """task1703: the input holds a number in digits, and the output has none left."""
    pair = _pair(r)
    return None if pair is None else bool(_DIGIT.search(pair[0])) and not _DIGIT.search(pair[1])


# task -> (name, what passes, the check, whether it decides the correctness question)
ANSWER_CHECKS: dict[str, tuple[str, str, CheckFn, bool]] = {
    UNION_TASK: (
        "output_counts_the_union",
        "output is the size of the union of the input's two sets of integers",
        output_counts_the_union,
        True,
    ),
    COMMONGEN_TASK: (
        "output_uses_the_concepts",
        "the input is a set of 3-5 concepts and the output uses them (one may miss: irregular forms)",
        output_uses_the_concepts,
        False,
    ),
    DATIVE_TASK: (
        "output_rephrases_the_dative",
        "output has the input's words with one 'to' or 'for' added or removed",
        output_rephrases_the_dative,
        False,
    ),
    NUMBERS_TASK: (
        "output_spells_out_digits",
        "the input has a number in digits and the output no digit",
        output_spells_out_digits,
        False,
    ),
}


def answer_checks(task: str, question: str) -> list[Check]:
    """The task's own check of its answer (none for most tasks), answering `question`."""
    if task not in ANSWER_CHECKS:
        return []
    name, doc, fn, decides = ANSWER_CHECKS[task]
    return [Check(name, doc, fn, question, decides=decides)]
