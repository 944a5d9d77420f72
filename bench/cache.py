"""Seed-aware call cache (SQLite, WAL mode) in front of any TextBackend.

The cache is only an accelerator, so it never fails a cell: a row that does not decode is dropped (with
a warning) and the call recomputed; a database that sqlite calls corrupt is moved aside to
`calls.sqlite.corrupt-<time>` and a new one started, with a warning naming the file and `--no-cache`.
The database is opened on first use, so cells that make no model call (the `file` system) never touch it.

The key is built by one function, `call_key`, from everything that can change an output (the backend's
identity, every sampling parameter, the prompt, the seed and the sample index) and from nothing that
cannot (API keys, base URLs, concurrency, timeouts, retries): backends keep those out of `identity()`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.hashing import stable_hash
from bench.types import JSON, Completion, GenerationRequest, TextBackend

CACHE_KEY_VERSION = 1


def call_key(identity: JSON, request: GenerationRequest) -> str:
    """The cache key of one call. Changing what goes in here changes every key: bump the version."""
    return stable_hash(
        {
            "v": CACHE_KEY_VERSION,
            "backend": identity,
            "messages": [list(m) for m in request.messages],
            "params": request.params.to_json(),
            "seed": request.seed,
            "sample_index": request.sample_index,
        }
    )


T = TypeVar("T")


def _completion(data: Any) -> Completion:
    if not isinstance(data, dict):
        raise TypeError(f"a {type(data).__name__}, not an object")
    comp = Completion(**{**data, "cached": True})
    if not isinstance(comp.text, str):
        raise TypeError("text is not a string")
    return comp


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


class CallCache:
    """A small key -> Completion store shared by processes (WAL + busy timeout make that safe)."""

    def __init__(self, path: Path | str, busy_timeout_ms: int = 30_000):
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._busy_timeout_ms = busy_timeout_ms
        self.hits = 0
        self.misses = 0
        self.healed: list[Path] = []  # where corrupt databases were moved

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
            )
            conn.execute("SELECT key, value FROM calls LIMIT 1").fetchall()
        except BaseException:
            conn.close()
            raise
        return conn

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = self._open()
            except sqlite3.DatabaseError as exc:
                self._move_aside(exc)
                conn = self._open()
            self._local.conn = conn
        return conn

    def _still_corrupt(self) -> bool:
        """Another process may already have replaced the file: check before moving it."""
        try:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000)
            try:
                return conn.execute("PRAGMA quick_check").fetchone()[0] != "ok"
            finally:
                conn.close()
        except sqlite3.DatabaseError:
            return True

    def _move_aside(self, exc: Exception) -> None:
        old = getattr(self._local, "conn", None)
        if old is not None:
            old.close()
            self._local.conn = None
        with self._lock:
            if not self.path.exists() or not self._still_corrupt():
                return
            aside = self.path.with_name(
                f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            )
            os.replace(self.path, aside)
            for suffix in ("-wal", "-shm"):
                side = Path(f"{self.path}{suffix}")
                if side.exists():
                    os.replace(side, Path(f"{aside}{suffix}"))
            self.healed.append(aside)
        _warn(
            f"call cache {self.path} is corrupt ({exc}); moved it to {aside} and started a new one "
            "(calls are recomputed; pass --no-cache to run without the cache)"
        )

    def _run(self, sql: str, args: tuple = ()) -> list[tuple]:
        """One statement; a corrupt database is moved aside once and the statement retried on a new one."""
        try:
            return self._conn().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise
            self._move_aside(exc)
            return self._conn().execute(sql, args).fetchall()

    def _drop(self, key: str, why: str) -> None:
        _warn(f"call cache {self.path}: dropped a corrupt entry ({why}); recomputing that call")
        self._run("DELETE FROM calls WHERE key=?", (key,))

    def get(self, key: str) -> Completion | None:
        return self.get_as(key, _completion)

    def get_as(self, key: str, build: Callable[[Any], T]) -> T | None:
        """The value under `key` turned into an object by `build`; a row `build` rejects (TypeError,
        ValueError) is corrupt: it is dropped with a warning and None returned, so the call is redone."""
        data = self.get_value(key)
        if data is None:
            return None
        try:
            return build(data)
        except (TypeError, ValueError) as exc:
            self._drop(key, str(exc))
            return None

    def put(self, key: str, completion: Completion) -> None:
        data = completion.to_json()
        data.pop("cached", None)
        self.put_value(key, data)

    def get_value(self, key: str) -> JSON | None:
        """Any JSON value stored under `key` (calls other than `generate`, e.g. skeleton infilling)."""
        rows = self._run("SELECT value FROM calls WHERE key=?", (key,))
        if not rows:
            return None
        try:
            return json.loads(rows[0][0])
        except (TypeError, ValueError, RecursionError) as exc:
            self._drop(key, f"not JSON: {exc}")
            return None

    def put_value(self, key: str, value: JSON) -> None:
        self._run(
            "INSERT OR REPLACE INTO calls (key, value, created) VALUES (?, ?, ?)",
            (key, json.dumps(value), time.time()),
        )

    def __len__(self) -> int:
        return self._run("SELECT COUNT(*) FROM calls")[0][0]


@dataclass
class CachedBackend:
    """Wraps a backend: cache hits are answered locally, misses go to the backend in one batch.

    Completions with an error are never cached (a transient failure must not stick).
    """

    backend: TextBackend
    cache: CallCache | None

    def identity(self) -> JSON:
        return self.backend.identity()

    def __getattr__(self, name: str) -> Any:  # expose extra methods (nll, infill, ...) of the backend
        return getattr(self.backend, name)

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        if self.cache is None:
            return self.backend.generate(requests)
        ident = self.backend.identity()
        keys = [call_key(ident, r) for r in requests]
        out: list[Completion | None] = [self.cache.get(k) for k in keys]
        todo = [i for i, c in enumerate(out) if c is None]
        self.cache.hits += len(requests) - len(todo)
        self.cache.misses += len(todo)
        if todo:
            fresh = self.backend.generate([requests[i] for i in todo])
            for i, comp in zip(todo, fresh, strict=True):
                out[i] = comp
                if comp.error is None:
                    self.cache.put(keys[i], comp)
        return [c for c in out if c is not None]
