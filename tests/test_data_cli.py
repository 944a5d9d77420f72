"""`bench data verify` and `bench data fetch` against real files, a loopback mirror and a closed port."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import DataError
from bench.tasks import load_task
from bench.tasks.fetch import FETCH_MANIFEST, fetch, verify_dir
from bench.tasks.files import KNOWN_FILES, RAW

DATA_DIR = Path(os.environ.get("BENCH_DATA_DIR", "/work/shared/datasets"))
needs_data = pytest.mark.skipif(not DATA_DIR.is_dir(), reason=f"dataset dir {DATA_DIR} absent")


def _copy_required(dest: Path) -> None:
    for known in KNOWN_FILES:
        if known.required:
            (dest / known.relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(DATA_DIR / known.relpath, dest / known.relpath)


@needs_data
def test_verify_reports_every_shared_file_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "verify", str(DATA_DIR)]) == 0
    out = capsys.readouterr().out
    assert f"{len(KNOWN_FILES)} ok" in out
    assert "ok         truthfulqa/data/v1/TruthfulQA.csv" in out


@needs_data
def test_verify_flags_a_corrupt_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _copy_required(tmp_path)
    assert main(["data", "verify", str(tmp_path)]) == 0  # optional docs absent: not a failure
    assert "absent" in capsys.readouterr().out
    with (tmp_path / "multiwoz_2.2/db/hotel_db.json").open("ab") as fh:
        fh.write(b" ")
    (tmp_path / "self_instruct/seed_tasks.jsonl").unlink()
    assert main(["data", "verify", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "mismatch   multiwoz_2.2/db/hotel_db.json" in out
    assert "missing    self_instruct/seed_tasks.jsonl" in out


def test_verify_of_a_missing_dir_fails_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["data", "verify", str(tmp_path / "none")]) == 1
    assert "bench data fetch" in capsys.readouterr().err


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fetch_offline_fails_fast_with_a_clear_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = time.monotonic()
    rc = main(
        [
            "data",
            "fetch",
            "--dest",
            str(tmp_path),
            "--mirror",
            f"http://127.0.0.1:{_closed_port()}",
            "--timeout",
            "2",
        ]
    )
    elapsed = time.monotonic() - start
    err = capsys.readouterr().err
    assert rc == 2 and elapsed < 5
    assert "offline" in err and "BENCH_DATA_DIR" in err and "Traceback" not in err
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server laid out like raw.githubusercontent.com, serving the shared copies."""
    root = tmp_path / "mirror"
    for known in KNOWN_FILES:
        if known.upstream_url:
            target = root / known.upstream_url[len(RAW) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(DATA_DIR / known.relpath, target)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


@needs_data
def test_fetch_from_a_loopback_mirror_verifies_and_the_result_loads(
    mirror: tuple[str, Path], tmp_path: Path
) -> None:
    url, root = mirror
    # stand-in for a full upstream SuperNI file: different bytes, no pinned hash -> "unverified"
    task = "task1192_food_flavor_profile"
    served = next(root.rglob(f"{task}.json"))
    served.write_bytes(served.read_bytes() + b"\n")
    dest = tmp_path / "cache"
    results = fetch(dest, mirror=url, timeout=5)
    status = {r.relpath: r.status for r in results}
    assert status[f"super_natural_instructions/tasks/{task}.json"] == "unverified"
    assert status["multiwoz_2.2/db/train_db.json"] == "ok"
    assert (dest / FETCH_MANIFEST).is_file()
    checks = {c.relpath: c.status for c in verify_dir(dest)}
    assert checks[f"super_natural_instructions/tasks/{task}.json"] == "unverified"
    assert not {s for s in checks.values()} & {"missing", "mismatch"}
    assert load_task(f"superni/{task}", n_references=5, n_holdout=5, data_dir=dest).meta["n_records"] == 20
    # a second fetch downloads nothing
    assert {r.note for r in fetch(dest, mirror=url, timeout=5)} == {"present"}


@needs_data
def test_fetch_refuses_a_file_whose_hash_does_not_match(mirror: tuple[str, Path], tmp_path: Path) -> None:
    url, root = mirror
    v1 = next(k for k in KNOWN_FILES if k.relpath == "truthfulqa/data/v1/TruthfulQA.csv")
    served = root / v1.upstream_url[len(RAW) + 1 :]
    served.write_bytes(served.read_bytes().replace(b"watermelon", b"pumpkin"))
    dest = tmp_path / "cache"
    with pytest.raises(DataError, match="does not match the pinned"):
        fetch(dest, mirror=url, timeout=5)
    assert (dest / "truthfulqa/TruthfulQA.csv").is_file()  # files before it were fetched and kept
    assert not (dest / v1.relpath).exists() and not list(dest.rglob("*.part"))
