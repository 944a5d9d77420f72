"""Seed-aware call cache (SQLite, WAL mode) in front of any TextBackend.

The key is built by one function, `call_key`, from everything that can change an output (the backend's
identity, every sampling parameter, the prompt, the seed and the sample index) and from nothing that
cannot (API keys, base URLs, concurrency, timeouts, retries): backends keep those out of `identity()`.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


class CallCache:
    """A small key -> Completion store shared by processes (WAL + busy timeout make that safe)."""

    def __init__(self, path: Path | str, busy_timeout_ms: int = 30_000):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._busy_timeout_ms = busy_timeout_ms
        self.hits = 0
        self.misses = 0
        with self._conn() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL)"
            )

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_ms)}")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn = conn
        return conn

    def get(self, key: str) -> Completion | None:
        data = self.get_value(key)
        if data is None:
            return None
        data["cached"] = True
        return Completion(**data)

    def put(self, key: str, completion: Completion) -> None:
        data = completion.to_json()
        data.pop("cached", None)
        self.put_value(key, data)

    def get_value(self, key: str) -> JSON | None:
        """Any JSON value stored under `key` (calls other than `generate`, e.g. skeleton infilling)."""
        row = self._conn().execute("SELECT value FROM calls WHERE key=?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_value(self, key: str, value: JSON) -> None:
        self._conn().execute(
            "INSERT OR REPLACE INTO calls (key, value, created) VALUES (?, ?, ?)",
            (key, json.dumps(value), time.time()),
        )

    def __len__(self) -> int:
        return self._conn().execute("SELECT COUNT(*) FROM calls").fetchone()[0]


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
