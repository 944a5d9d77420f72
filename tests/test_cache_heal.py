"""The call cache heals itself and never fails a cell (issue 11, item 8).

A corrupt row is dropped and the call recomputed with a warning; a garbage or truncated database is
moved aside (named in the warning, with `--no-cache`) and a new one started; `file` cells never touch it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest
from filesuite import make_suite, no_html, run, stable_metrics  # noqa: F401 (autouse fixture)

from bench.cache import CachedBackend, CallCache
from bench.types import Completion, GenerationRequest, SamplingParams

REQ = GenerationRequest.chat("hello", SamplingParams(temperature=0.7), seed=1, sample_index=0)


class EchoBackend:
    """A real (trivial) backend: echoes the prompt and counts the calls it answers."""

    def __init__(self) -> None:
        self.calls = 0

    def identity(self) -> dict:
        return {"backend": "echo"}

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]:
        self.calls += len(requests)
        return [Completion(text=f"echo {r.messages[-1][1]} {r.seed}") for r in requests]


def _fill(path, n: int = 3) -> list[GenerationRequest]:
    reqs = [replace(REQ, seed=s) for s in range(n)]
    CachedBackend(EchoBackend(), CallCache(path)).generate(reqs)
    return reqs


@pytest.mark.parametrize("value", ['{"text": "half', "42", '{"txt": 1}', '{"text": 5}'])
def test_corrupt_row_is_dropped_and_recomputed_once(tmp_path, capsys, value):
    path = tmp_path / "calls.sqlite"
    reqs = _fill(path)
    with sqlite3.connect(path) as conn:
        key = conn.execute("SELECT key FROM calls ORDER BY key LIMIT 1").fetchone()[0]
        conn.execute("UPDATE calls SET value=? WHERE key=?", (value, key))
    backend = EchoBackend()
    out = CachedBackend(backend, CallCache(path)).generate(reqs)
    assert backend.calls == 1  # only the corrupt row went back to the model
    assert [c.text for c in out] == [f"echo hello {s}" for s in range(3)]
    err = capsys.readouterr().err
    assert "corrupt entry" in err and str(path) in err
    again = EchoBackend()
    CachedBackend(again, CallCache(path)).generate(reqs)
    assert again.calls == 0  # healed: the recomputed row is cached again
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_database_is_moved_aside_and_replaced(tmp_path, capsys, damage):
    path = tmp_path / "calls.sqlite"
    reqs = _fill(path, 200)
    with sqlite3.connect(path) as conn:  # everything into the main file, then damage that file
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in tmp_path.glob("calls.sqlite-*"):
        side.unlink()
    if damage == "garbage":
        path.write_bytes(b"this is not a database\n" * 400)
    else:
        data = path.read_bytes()
        # keep the header (so sqlite opens it) and cut the pages the table lives in
        path.write_bytes(data[:4096] + b"\0" * 100)
    backend = EchoBackend()
    out = CachedBackend(backend, CallCache(path)).generate(reqs[:2])
    assert [c.text for c in out] == ["echo hello 0", "echo hello 1"]
    err = capsys.readouterr().err
    assert str(path) in err and "--no-cache" in err and "corrupt" in err
    aside = [p for p in tmp_path.glob("calls.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1 and aside[0].name in err
    assert len(CallCache(path)) == 2  # the new database works


def test_file_cells_never_open_the_cache(tmp_path):
    suite = make_suite(tmp_path, seeds=2)
    ref = run(suite, tmp_path, out=str(tmp_path / "ref"))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "calls.sqlite").write_bytes(b"\x00garbage" * 1000)
    res = run(suite, tmp_path, out=str(tmp_path / "run"), use_cache=True, cache_dir=str(cache))
    assert res.ok and not res.failed_cells
    assert stable_metrics(res.run_dir) == stable_metrics(ref.run_dir)
    assert (cache / "calls.sqlite").read_bytes() == b"\x00garbage" * 1000  # untouched


def test_non_generate_rows_heal_too(tmp_path, capsys):
    """Skeleton infills (and any other cached call) read rows through `get_as`: same healing."""
    from systems.skeleton_infill import InfillResult

    cache = CallCache(tmp_path / "calls.sqlite")
    cache.put_value("k", [1, 2])  # not the object an InfillResult is built from
    assert cache.get_as("k", lambda d: InfillResult(**d)) is None
    assert "corrupt entry" in capsys.readouterr().err
    assert cache.get_value("k") is None  # dropped, so the next run recomputes and stores it
