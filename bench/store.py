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

Integrity: `cell.json` is written last and seals the cell. A finished cell's `cell.json` carries the cell
hash, status "ok" and the sha256 of every other file of the cell (`files`); a cell is finished only when
every listed file is there with that digest. So a kill at any moment, a resume with another config that
dies half-way, or a truncated file on disk all leave a cell that `check_cell` calls unfinished or damaged
(naming the file), which resume runs again and readers skip with a warning.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.types import JSON, Sample

# Files a finished cell seals in cell.json (digests), in the order they are written; cell.json comes last.
CELL_FILES = ("samples.jsonl", "trace.jsonl", "usage.json", "metrics.json")
# Temp files of atomic_write_text: ".<name>.<mkstemp random>.tmp"
_TMP_NAME = re.compile(r"^\..+\.[A-Za-z0-9_]{6,}\.tmp$")
_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class StoreError(BenchError):
    """A run directory that cannot be read or written as the store's contract says."""


class DiskFullError(StoreError):
    """No space left while writing the run store: the run stops; finished cells stay valid."""


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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same directory + fsync + rename, so readers never see half a file.

    A full disk (ENOSPC, EDQUOT) becomes DiskFullError naming the file; the temp file is removed.
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None and os.path.exists(tmp):
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            raise DiskFullError(f"no space left on device while writing {path}") from exc
        raise


def atomic_write_text(path: Path, text: str, errors: str = "strict") -> None:
    """UTF-8 text through atomic_write_bytes. Renderers pass errors="replace" so a model's lone surrogate
    in a report becomes U+FFFD instead of a crash (the stored samples keep it as a \\u escape)."""
    atomic_write_bytes(path, text.encode("utf-8", errors=errors))


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


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


_WARNED: set[tuple[str, str]] = set()


def warn_once(key: tuple[str, str], message: str) -> None:
    """One warning per (run dir, cell) per process: several readers of one report see the same cell."""
    if key not in _WARNED:
        _WARNED.add(key)
        print(f"warning: {message}", file=sys.stderr)


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


@dataclass(frozen=True)
class CellCheck:
    """What a cell directory holds: `done` (sealed, every file matches), `missing` (never finished),
    `stale` (finished for another hash), `failed` (recorded failure) or `damaged` (reason names the file)."""

    state: str
    reason: str = ""
    record: Any = None

    @property
    def done(self) -> bool:
        return self.state == "done"


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
        try:
            data = read_json(self.manifest_path)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise StoreError(
                f"{self.manifest_path} is damaged ({exc}); restore it, or start a new run with --out"
            ) from None
        if not isinstance(data, dict):
            raise StoreError(f"{self.manifest_path} is damaged (not a JSON object)")
        return data

    def remove_stale_tmp(self) -> int:
        """Delete temp files that a killed writer left (only ours: ".<name>.<random>.tmp")."""
        n = 0
        if not self.root.is_dir():
            return 0
        for p in [*self.root.glob(".*.tmp"), *self.root.glob("cells/*/*/seed-*/.*.tmp")]:
            if _TMP_NAME.match(p.name) and p.is_file():
                try:
                    p.unlink()
                    n += 1
                except OSError:
                    pass
        return n

    def exists(self) -> bool:
        return self.manifest_path.exists()

    # ------------------------------------------------------------------ cells
    def cell_dir(self, key: CellKey) -> Path:
        return self.root / key.relpath()

    def is_done(self, key: CellKey, cell_hash: str) -> bool:
        """Finished for this hash: sealed by cell.json, and every file it lists has its digest."""
        return self.check_cell(key, cell_hash).done

    def check_cell(self, key: CellKey, cell_hash: str | None = None) -> CellCheck:
        """Classify a cell directory (see CellCheck); reading it never raises."""
        d = self.cell_dir(key)
        rec_path = d / "cell.json"
        if not rec_path.exists():
            return CellCheck("missing")
        try:
            rec = read_json(rec_path)
        except (OSError, ValueError) as exc:
            return CellCheck("damaged", f"cell.json is not readable JSON ({exc})")
        if not isinstance(rec, dict):
            return CellCheck("damaged", "cell.json is not a JSON object")
        if cell_hash is not None and rec.get("hash") != cell_hash:
            return CellCheck("stale", "finished for another configuration", rec)
        if rec.get("status") != "ok":
            return CellCheck("failed", str(rec.get("error") or rec.get("status")), rec)
        files = rec.get("files")
        if isinstance(files, dict):
            return self._check_digests(d, files, rec)
        return self._check_legacy(d, rec)

    @staticmethod
    def _check_digests(d: Path, files: dict, rec: JSON) -> CellCheck:
        if "metrics.json" not in files:
            return CellCheck("damaged", "cell.json seals no metrics.json", rec)
        for name, digest in files.items():
            p = d / name
            if not p.is_file():
                return CellCheck("damaged", f"{name} is missing", rec)
            try:
                actual = sha256_file(p)
            except OSError as exc:
                return CellCheck("damaged", f"{name} is not readable ({exc})", rec)
            if actual != digest:
                return CellCheck(
                    "damaged", f"{name} does not match its digest in cell.json (truncated?)", rec
                )
        try:
            if not isinstance(read_json(d / "metrics.json"), dict):
                return CellCheck("damaged", "metrics.json is not a JSON object", rec)
        except ValueError as exc:
            return CellCheck("damaged", f"metrics.json is not valid JSON ({exc})", rec)
        return CellCheck("done", "", rec)

    @staticmethod
    def _check_legacy(d: Path, rec: JSON) -> CellCheck:
        """Cells written before digests: every file must parse, and samples match n_samples."""
        try:
            metrics = read_json(d / "metrics.json")
        except FileNotFoundError:
            return CellCheck("damaged", "metrics.json is missing", rec)
        except (OSError, ValueError) as exc:
            return CellCheck("damaged", f"metrics.json is not valid JSON ({exc})", rec)
        if not isinstance(metrics, dict):
            return CellCheck("damaged", "metrics.json is not a JSON object", rec)
        for name in ("samples.jsonl", "trace.jsonl"):
            try:
                rows = read_jsonl(d / name)
            except (OSError, ValueError) as exc:
                return CellCheck("damaged", f"{name} is not valid JSON lines ({exc})", rec)
            n = rec.get("n_samples")
            if name == "samples.jsonl" and isinstance(n, int) and (d / name).exists() and len(rows) != n:
                return CellCheck("damaged", f"{name} holds {len(rows)} samples, cell.json says {n}", rec)
        if (d / "usage.json").exists():
            try:
                read_json(d / "usage.json")
            except (OSError, ValueError) as exc:
                return CellCheck("damaged", f"usage.json is not valid JSON ({exc})", rec)
        return CellCheck("done", "", rec)

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
        """Write a cell; cell.json goes last and, for a finished cell, seals the digest of every file.

        Files not passed here (a re-score passes no trace) keep their bytes and are sealed as they are.
        Without metrics the cell is not finished: metrics.json is removed and nothing is sealed.
        """
        d = self.cell_dir(key)
        payload: dict[str, bytes] = {}
        if samples is not None:
            rows = []
            for i, s in enumerate(samples):
                row = s.to_json()
                if sample_rows is not None and i < len(sample_rows):
                    row["scored"] = sample_rows[i]
                rows.append(row)
            payload["samples.jsonl"] = "".join(_dumps(r) + "\n" for r in rows).encode("utf-8")
        if trace is not None:
            payload["trace.jsonl"] = "".join(_dumps(r) + "\n" for r in trace).encode("utf-8")
        if usage is not None:
            payload["usage.json"] = (_dumps(usage, indent=2) + "\n").encode("utf-8")
        if metrics is not None:
            payload["metrics.json"] = (_dumps(metrics, indent=2) + "\n").encode("utf-8")
        record = dict(record)
        record.pop("files", None)
        if metrics is None:
            # unseal first: a crash below must not leave an old seal over new files
            if (d / "metrics.json").exists():
                (d / "metrics.json").unlink()
        for name in CELL_FILES:
            if name in payload:
                atomic_write_bytes(d / name, payload[name])
        if metrics is not None:
            record["files"] = {
                name: hashlib.sha256(payload[name]).hexdigest() if name in payload else sha256_file(d / name)
                for name in CELL_FILES
                if name in payload or (d / name).is_file()
            }
        atomic_write_json(d / "cell.json", record)

    def read_samples(self, key: CellKey) -> list[Sample]:
        return [Sample.from_json(r) for r in read_jsonl(self.cell_dir(key) / "samples.jsonl")]

    def iter_cells(self, warn: bool = True) -> Iterator[CellData]:
        """Every finished or failed cell, in a stable order; damaged cells are skipped with a warning."""
        for d in self._cell_dirs():
            key = self._key_of(d)
            chk = self.check_cell(key)
            if chk.state == "damaged":
                if warn:
                    warn_once(
                        (str(self.root), key.label()),
                        f"damaged cell {key.label()} skipped: {chk.reason} ({d}); "
                        "`bench run SUITE --resume RUN_DIR` runs it again",
                    )
                continue
            record = chk.record
            metrics = metrics_from_json(read_json(d / "metrics.json")) if chk.done else {}
            usage: JSON = {}
            if (d / "usage.json").exists():
                try:
                    usage = read_json(d / "usage.json")
                except (OSError, ValueError):
                    usage = {}  # a failed cell's leftover; finished cells have theirs checked
            yield CellData(key, record, metrics, usage, d)

    def damaged_cells(self) -> list[tuple[CellKey, str]]:
        """(key, reason) of every cell directory whose files do not make a whole cell."""
        out = []
        for d in self._cell_dirs():
            key = self._key_of(d)
            chk = self.check_cell(key)
            if chk.state == "damaged":
                out.append((key, chk.reason))
        return out

    def _cell_dirs(self) -> list[Path]:
        base = self.root / "cells"
        if not base.exists():
            return []
        return [
            p.parent
            for p in sorted(base.glob("*/*/seed-*/cell.json"))
            if re.fullmatch(r"seed--?[0-9]+", p.parent.name)
        ]

    @staticmethod
    def _key_of(d: Path) -> CellKey:
        system, task_dir, seed_dir = d.parts[-3], d.parts[-2], d.parts[-1]
        return CellKey(system, task_from_dirname(task_dir), int(seed_dir.removeprefix("seed-")))
