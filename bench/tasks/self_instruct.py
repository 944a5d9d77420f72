"""Self-Instruct (`self_instruct/seed_tasks.jsonl` + `self_instruct/user_oriented_instructions.jsonl`).

One record per instance: `{"instruction", "input", "output"}`, the shape of upstream's generated data
(`all_instances_82K.jsonl`), which is absent here. `input` is "" for instructions that need none, as
upstream writes it. Option `sources` picks the files (default both: 175 seed + 252 user-oriented).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError, DataError
from bench.types import JSON

from .base import TaskSource, check_options, loads_jsonl, read_source

SOURCES = {
    "seed": "self_instruct/seed_tasks.jsonl",
    "user_oriented": "self_instruct/user_oriented_instructions.jsonl",
}

INSTRUCTION = (
    "Generate one instruction-following example in the style of the Self-Instruct dataset: a natural "
    "task instruction a user might give an AI assistant (writing, rewriting, classification, reasoning, "
    "planning, coding, ...), an optional input the instruction applies to (empty string when none is "
    "needed), and a high-quality output that carries the instruction out, as one JSON object."
)
RUBRIC = (
    "Is the instruction a clear, self-contained task a user might give an assistant?",
    "Is the input consistent with the instruction (empty only when the instruction needs no input)?",
    "Does the output correctly and completely carry out the instruction on the input?",
)


@dataclass(frozen=True)
class SelfInstruct:
    """Loader for `self_instruct`."""

    family: str = "self_instruct"
    version: str = "1"
    needs_data_dir: bool = True
    options_doc: dict[str, str] = field(
        default_factory=lambda: {"sources": "list of 'seed' and/or 'user_oriented' (default both)"}
    )

    def variants(self, data_dir: Path | None) -> list[str]:
        ok = data_dir is not None and all((data_dir / p).is_file() for p in SOURCES.values())
        return [""] if ok else []

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        check_options("self_instruct", options, self.options_doc)
        assert data_dir is not None
        sources = list(options.get("sources", list(SOURCES)))
        bad = [s for s in sources if s not in SOURCES]
        if bad or not sources:
            raise BenchError(
                f"task 'self_instruct': option sources must name some of {list(SOURCES)}, got {sources}"
            )
        files = [read_source(data_dir, SOURCES[s], "self_instruct") for s in sources]
        records: list[JSON] = []
        for f in files:
            for lineno, task in enumerate(loads_jsonl(f.data, f.relpath), 1):
                instruction = task.get("instruction")
                instances = task.get("instances")
                if not isinstance(instruction, str) or not isinstance(instances, list):
                    raise DataError(f"{f.relpath}: task {lineno} lacks instruction/instances")
                for inst in instances:
                    records.append(
                        {
                            "instruction": instruction.strip(),
                            "input": str(inst.get("input", "")).strip(),
                            "output": str(inst.get("output", "")).strip(),
                        }
                    )
        return TaskSource(
            records=records,
            instruction=INSTRUCTION,
            rubric=RUBRIC,
            files=files,
            title="Self-Instruct instance",
            free_text=frozenset({"instruction", "input", "output"}),
            meta={"sources": sources},
        )


SELF_INSTRUCT = SelfInstruct()
