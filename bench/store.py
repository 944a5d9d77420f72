"""The run store: one directory per run, one sub-directory per cell, every write atomic.

Layout (contract; readers such as reports and `bench check` rely on it):

    RUN_DIR/manifest.json
    RUN_DIR/report.md
    RUN_DIR/cells/<system>/<task>/seed-<k>/samples.jsonl   one Sample per line (+ "scored" per-sample rows)
    RUN_DIR/cells/<system>/<task>/seed-<k>/metrics.json    flat {metric: value} (NaN written as null)
    RUN_DIR/cells/<system>/<task>/seed-<k>/trace.jsonl     system trace, one event per line
    RUN_DIR/cells/<system>/<task>/seed-<k>/usage.json      Usage
    RUN_DIR/cells/<system>/<task>/seed-<k>/cell.json       CellRecord: hash, status, error, timings

Task names contain "/" (e.g. multiwoz/train); on disk "/" becomes "__" so one cell is one directory level.
`metrics.json` is written last, so its presence with a matching `cell.json` hash marks a finished cell.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.types import JSON, Sample


def task_dirname(task: str) -> str:
    return task.replace("/", "__")


def task_from_dirname(d: str) -> str:
    return d.replace("__", "/")


def _nan_to_none(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _nan_to_none(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_nan_to_none(x) for x in v]
    return v


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory + fsync + rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _dumps(obj: Any, indent: int | None = None) -> str:
    """UTF-8 JSON; text that cannot be encoded (a model's lone surrogate) falls back to \\u escapes."""
    text = json.dumps(_nan_to_none(obj), indent=indent, sort_keys=True, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(_nan_to_none(obj), indent=indent, sort_keys=True, ensure_ascii=True)
    return text


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, _dumps(obj, indent=2) + "\n")


def atomic_write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    atomic_write_text(path, "".join(_dumps(r) + "\n" for r in rows))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_jsonl(path: Path) -> list[Any]:
    if not Path(path).exists():
        return []
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def metrics_from_json(d: JSON) -> dict[str, float]:
    """null in metrics.json means NaN (no parsed record to score)."""
    return {k: (float("nan") if v is None else v) for k, v in d.items()}


@dataclass(frozen=True)
class CellKey:
    system: str
    task: str
    seed: int

    def relpath(self) -> Path:
        return Path("cells") / self.system / task_dirname(self.task) / f"seed-{self.seed}"

    def label(self) -> str:
        return f"{self.system}/{self.task}/seed-{self.seed}"


@dataclass
class CellData:
    key: CellKey
    record: JSON  # cell.json
    metrics: dict[str, float]
    usage: JSON
    path: Path

    @property
    def status(self) -> str:
        return self.record.get("status", "unknown")


class RunStore:
    """Reads and writes one run directory."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # ------------------------------------------------------------------ manifest
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def write_manifest(self, manifest: JSON) -> None:
        atomic_write_json(self.manifest_path, manifest)

    def read_manifest(self) -> JSON:
        return read_json(self.manifest_path)

    def exists(self) -> bool:
        return self.manifest_path.exists()

    # ------------------------------------------------------------------ cells
    def cell_dir(self, key: CellKey) -> Path:
        return self.root / key.relpath()

    def is_done(self, key: CellKey, cell_hash: str) -> bool:
        """A cell is done when metrics.json exists and cell.json carries the same hash and status ok."""
        d = self.cell_dir(key)
        if not (d / "metrics.json").exists() or not (d / "cell.json").exists():
            return False
        try:
            rec = read_json(d / "cell.json")
        except (OSError, json.JSONDecodeError):
            return False
        return rec.get("hash") == cell_hash and rec.get("status") == "ok"

    def write_cell(
        self,
        key: CellKey,
        *,
        record: JSON,
        samples: list[Sample] | None = None,
        sample_rows: list[JSON] | None = None,
        trace: list[JSON] | None = None,
        usage: JSON | None = None,
        metrics: dict[str, float] | None = None,
    ) -> None:
        """Write a cell; metrics.json goes last so a crash never leaves a cell that looks finished."""
        d = self.cell_dir(key)
        d.mkdir(parents=True, exist_ok=True)
        if samples is not None:
            rows = []
            for i, s in enumerate(samples):
                row = s.to_json()
                if sample_rows is not None and i < len(sample_rows):
                    row["scored"] = sample_rows[i]
                rows.append(row)
            atomic_write_jsonl(d / "samples.jsonl", rows)
        if trace is not None:
            atomic_write_jsonl(d / "trace.jsonl", trace)
        if usage is not None:
            atomic_write_json(d / "usage.json", usage)
        atomic_write_json(d / "cell.json", record)
        if metrics is not None:
            atomic_write_json(d / "metrics.json", metrics)
        elif (d / "metrics.json").exists():
            (d / "metrics.json").unlink()

    def read_samples(self, key: CellKey) -> list[Sample]:
        return [Sample.from_json(r) for r in read_jsonl(self.cell_dir(key) / "samples.jsonl")]

    def iter_cells(self) -> Iterator[CellData]:
        """Every cell directory that has a cell.json, in a stable order."""
        base = self.root / "cells"
        if not base.exists():
            return
        for rec_path in sorted(base.glob("*/*/seed-*/cell.json")):
            d = rec_path.parent
            system, task_dir, seed_dir = d.parts[-3], d.parts[-2], d.parts[-1]
            key = CellKey(system, task_from_dirname(task_dir), int(seed_dir.removeprefix("seed-")))
            record = read_json(rec_path)
            metrics = (
                metrics_from_json(read_json(d / "metrics.json")) if (d / "metrics.json").exists() else {}
            )
            usage = read_json(d / "usage.json") if (d / "usage.json").exists() else {}
            yield CellData(key, record, metrics, usage, d)
