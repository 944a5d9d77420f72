"""`file`: scores generations produced elsewhere, so any external generator can be evaluated.

`params.path` is a template with `{task}` (the task name, may contain "/"), `{task_dir}` (the task name
with "/" as "__"), `{seed}` and `{system}`. Each line is `{"text": "..."}` (raw model output) or
`{"record": {...}}` (an already-parsed record).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.types import GenerationResult, RunContext, Sample, TaskSpec, Usage
from systems.params import validate_params


class FileParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(..., description="path template, e.g. out/{task}/{seed}.jsonl")


def read_generation_lines(path: Path, limit: int | None = None) -> list[Sample]:
    """Parse a generations file into Samples; a line that is not valid JSON is kept as raw text."""
    samples: list[Sample] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if limit is not None and len(samples) >= limit:
                break
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = {"text": line.rstrip("\n")}
            if isinstance(row, dict) and "record" in row:
                text = json.dumps(row["record"], ensure_ascii=False)
            elif isinstance(row, dict) and "text" in row:
                text = str(row["text"])
            else:
                raise BenchError(f"{path}:{lineno}: each line needs a 'text' or 'record' key")
            samples.append(
                Sample(
                    index=len(samples),
                    text=text,
                    finish_reason=row.get("finish_reason") if isinstance(row, dict) else None,
                )
            )
    return samples


class FileSystem:
    roles: tuple[str, ...] = ()  # reads files: needs no model (preflight checks none)

    def __init__(self, params: dict | None = None):
        self.params: FileParams = validate_params(FileParams, params, "file")

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        path = Path(
            self.params.path.format(
                task=spec.name, task_dir=spec.name.replace("/", "__"), seed=seed, system="file"
            )
        )
        if not path.exists() or path.is_dir():
            raise BenchError(f"file system: no generations at {path}")
        samples = read_generation_lines(path, limit=n)
        trace = [{"event": "read", "path": str(path), "lines": len(samples), "requested": n}]
        return GenerationResult(samples=samples, trace=trace, usage=Usage())
