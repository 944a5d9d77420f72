"""`file`: scores generations produced elsewhere, so any external generator can be evaluated.

`params.path` is a template with `{task}` (the task name, may contain "/"), `{task_dir}` (the task name
with "/" as "__"), `{seed}` and `{system}`. Each line is `{"text": "..."}` (raw model output) or
`{"record": {...}}` (an already-parsed record).

Each line is classified on its own, because a generator's broken output is a scored failure, never a
lost cell: a line that is not JSON, nests too deep to parse, or is JSON but not such an object (`42`,
`null`, `[1,2,3]`) is kept as raw output text; a line that is not UTF-8 becomes an empty sample (its
meta names the byte offset). Reading is bounded: a line longer than `max_line_bytes` is cut there (and
scored as truncated output), and more than `max_bytes` from one file (say `/dev/zero`) fails the cell.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bench.errors import BenchError
from bench.types import GenerationResult, RunContext, Sample, TaskSpec, Usage
from systems.params import validate_params

MAX_BYTES = 256 * 2**20
MAX_LINE_BYTES = 16 * 2**20


class FileParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(..., description="path template, e.g. out/{task}/{seed}.jsonl")
    max_bytes: int = Field(MAX_BYTES, ge=1, description="most bytes read from one file")
    max_line_bytes: int = Field(MAX_LINE_BYTES, ge=1, description="longer lines are cut (truncated output)")


def _classify(raw: bytes, lineno: int, cut: bool) -> Sample | None:
    """One line -> one Sample (index set by the caller); None for a blank line."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Sample(
            index=0,
            text="",
            meta={
                "input_error": f"line {lineno}: invalid UTF-8 at byte {exc.start} of the line",
                "raw_prefix": raw[:200].decode("utf-8", errors="replace"),
            },
        )
    if not line.strip():
        return None
    if cut:
        return Sample(index=0, text=line, finish_reason="length", meta={"input_error": f"line {lineno}: cut"})
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        row = None
    if isinstance(row, dict) and "record" in row:
        try:
            text = json.dumps(row["record"], ensure_ascii=False)
        except (ValueError, RecursionError):
            text = line.rstrip("\n")
    elif isinstance(row, dict) and "text" in row:
        text = row["text"] if isinstance(row["text"], str) else json.dumps(row["text"], ensure_ascii=False)
    else:  # raw output: not JSON, or JSON that is no {"text"}/{"record"} object (42, null, [1,2,3])
        text = line.rstrip("\r\n")
    finish = row.get("finish_reason") if isinstance(row, dict) else None
    return Sample(index=0, text=text, finish_reason=finish if isinstance(finish, str) else None)


def read_generation_lines(
    path: Path, limit: int | None = None, *, max_bytes: int = MAX_BYTES, max_line_bytes: int = MAX_LINE_BYTES
) -> list[Sample]:
    """Parse a generations file into Samples, one per non-blank line, each line classified on its own."""
    samples: list[Sample] = []
    total = 0
    lineno = 0
    with open(path, "rb") as fh:
        while limit is None or len(samples) < limit:
            raw = fh.readline(max_line_bytes + 1)
            if not raw:
                break
            lineno += 1
            total += len(raw)
            cut = len(raw) > max_line_bytes and not raw.endswith(b"\n")
            if cut:  # skip the rest of an overlong line, still counting what is read
                raw = raw[:max_line_bytes]
                while total <= max_bytes:
                    rest = fh.readline(max_line_bytes)
                    total += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
            if total > max_bytes:
                raise BenchError(
                    f"file system: read more than {max_bytes} bytes from {path} after {lineno} line(s); "
                    "is it a generations file? (raise params.max_bytes if it is)"
                )
            sample = _classify(raw, lineno, cut)
            if sample is not None:
                sample.index = len(samples)
                samples.append(sample)
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
        samples = read_generation_lines(
            path, limit=n, max_bytes=self.params.max_bytes, max_line_bytes=self.params.max_line_bytes
        )
        trace: list = [{"event": "read", "path": str(path), "lines": len(samples), "requested": n}]
        trace += [
            {"event": "input_error", "index": s.index, "error": s.meta["input_error"]}
            for s in samples
            if "input_error" in s.meta
        ]
        return GenerationResult(samples=samples, trace=trace, usage=Usage())
