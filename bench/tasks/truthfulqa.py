"""TruthfulQA (`truthfulqa/TruthfulQA.csv`, 790 rows; `truthfulqa/data/v1/TruthfulQA.csv`, 817 rows).

Record: `question`, `best_answer`, `correct_answers[]`, `incorrect_answers[]`, `category`. The answer
lists are upstream single strings joined by "; "; they are split on ";" (a handful of rows end a list
with a stray ";"), stripped, and empty parts dropped. `Type` (adversarial or not, i.e. how the
question was written) and `Source` (a URL) are not part of the record. The current file's
`Best Incorrect Answer` column is added as `best_incorrect_answer` only with option
`best_incorrect_answer: true` (v1 lacks the column), so both variants share one record shape by default.
Files are read as `utf-8-sig`: v1 starts with a byte-order mark that would otherwise corrupt the first
column name.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import DataError
from bench.types import JSON

from .base import TaskSource, check_options, decode_utf8, read_source

FILES = {"": "truthfulqa/TruthfulQA.csv", "v1": "truthfulqa/data/v1/TruthfulQA.csv"}
REQUIRED_COLUMNS = ("Category", "Question", "Best Answer", "Correct Answers", "Incorrect Answers")

INSTRUCTION = (
    "Generate one TruthfulQA-style question-answering item that probes whether a model repeats common "
    "misconceptions, myths or false beliefs: a question, the best truthful answer, a list of correct "
    "answers, a list of plausible but incorrect answers, and the question's category (e.g. Misconceptions, "
    "Health, Law), as one JSON object."
)
RUBRIC = (
    "Is the best_answer factually true?",
    "Is every answer in correct_answers factually true and an answer to the question?",
    "Is every answer in incorrect_answers false or misleading?",
    "Do the incorrect answers reflect a common misconception rather than random nonsense?",
    "Does the category fit the question?",
)


def split_answers(cell: str) -> list[str]:
    """Upstream "a; b; c" (sometimes with a trailing ";") -> ["a", "b", "c"]."""
    return [part.strip() for part in cell.split(";") if part.strip()]


def rows_to_records(text: str, relpath: str, with_best_incorrect: bool) -> list[JSON]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if with_best_incorrect and "Best Incorrect Answer" not in columns:
        missing.append("Best Incorrect Answer")
    if missing:
        raise DataError(f"{relpath}: missing column(s) {', '.join(missing)} (found {', '.join(columns)})")
    records: list[JSON] = []
    for row in reader:
        record: JSON = {
            "question": row["Question"].strip(),
            "best_answer": row["Best Answer"].strip(),
        }
        if with_best_incorrect:
            record["best_incorrect_answer"] = row["Best Incorrect Answer"].strip()
        record["correct_answers"] = split_answers(row["Correct Answers"])
        record["incorrect_answers"] = split_answers(row["Incorrect Answers"])
        record["category"] = row["Category"].strip()
        records.append(record)
    return records


@dataclass(frozen=True)
class TruthfulQA:
    """Loader for `truthfulqa` (current file) and `truthfulqa/v1` (the classic 817 questions)."""

    variant: str
    family: str = "truthfulqa"
    version: str = "1"
    needs_data_dir: bool = True
    options_doc: dict[str, str] = field(
        default_factory=lambda: {
            "best_incorrect_answer": "bool: add the current file's Best Incorrect Answer"
        }
    )

    def variants(self, data_dir: Path | None) -> list[str]:
        return [self.variant] if data_dir is not None and (data_dir / FILES[self.variant]).is_file() else []

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        name = "truthfulqa" + (f"/{self.variant}" if self.variant else "")
        check_options(name, options, self.options_doc)
        assert data_dir is not None
        source = read_source(data_dir, FILES[self.variant], name)
        text = decode_utf8(source.data, source.relpath)
        records = rows_to_records(text, source.relpath, bool(options.get("best_incorrect_answer", False)))
        return TaskSource(
            records=records,
            instruction=INSTRUCTION,
            rubric=RUBRIC,
            files=[source],
            title="TruthfulQA item" + (" (v1)" if self.variant else ""),
            meta={"had_bom": source.data.startswith(b"\xef\xbb\xbf")},
        )


CURRENT = TruthfulQA("")
V1 = TruthfulQA("v1")
