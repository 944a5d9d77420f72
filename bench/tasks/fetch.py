"""`bench data verify` and `bench data fetch`: check dataset files by sha256, download them from upstream.

Fetch downloads each known file that has an upstream URL (pinned commits, see `bench.tasks.files`)
into the destination, in the same layout the loaders read. A file is written only after its bytes
were checked against the pinned upstream sha256 (where one is known); a file already present with an
accepted hash is not downloaded again. Files with no pinned upstream hash (the full SuperNI task files)
are recorded, with the hash they had when downloaded, in `FETCH_MANIFEST`; `verify` reports them as
"unverified" rather than "ok" and does not fail on them.

Offline, fetch fails fast: the first connection error (short timeout) ends the whole fetch with one
DataError that says what to do, never a traceback and never one timeout per file.
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from bench.errors import DataError

from .files import KNOWN_FILES, RAW, KnownFile

FETCH_MANIFEST = ".aod-bench-fetch.json"
MIRROR_ENV = "BENCH_DATA_MIRROR"
DEFAULT_TIMEOUT_S = 10.0

OK, UNVERIFIED, MISMATCH, MISSING, ABSENT = "ok", "unverified", "mismatch", "missing", "absent"
FAILING = frozenset({MISMATCH, MISSING})


@dataclass(frozen=True)
class FileCheck:
    """The verdict on one known file. `absent` is a missing optional file (documentation only)."""

    relpath: str
    status: str
    sha256: str | None
    note: str = ""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_manifest(root: Path) -> dict[str, dict[str, str]]:
    path = root / FETCH_MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def verify_dir(root: Path) -> list[FileCheck]:
    """Check every known file under `root` (missing optional files are `absent`, not failures)."""
    manifest = _read_manifest(root)
    checks = []
    for known in KNOWN_FILES:
        path = root / known.relpath
        if not path.is_file():
            status = MISSING if known.required else ABSENT
            checks.append(FileCheck(known.relpath, status, None, "" if known.required else "optional"))
            continue
        digest = sha256_file(path)
        fetched = manifest.get(known.relpath, {})
        if known.accepts(digest):
            checks.append(FileCheck(known.relpath, OK, digest))
        elif known.upstream_sha256 is None and fetched.get("sha256") == digest:
            note = f"full upstream file from {fetched.get('url')}; no pinned hash"
            checks.append(FileCheck(known.relpath, UNVERIFIED, digest, note))
        else:
            checks.append(FileCheck(known.relpath, MISMATCH, digest, f"expected {known.sha256[0][:16]}..."))
    return checks


def mirrored(url: str, mirror: str | None) -> str:
    """Replace the raw.githubusercontent.com prefix by a mirror (a local server, an offline proxy)."""
    if not mirror:
        return url
    return mirror.rstrip("/") + url[len(RAW) :] if url.startswith(RAW) else url


def _download(url: str, timeout: float) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "aod-bench data fetch"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - fixed https/mirror URLs
        return response.read()


def _offline_error(url: str, reason: object) -> DataError:
    return DataError(
        f"cannot download {url} ({reason}); this machine seems to be offline or the host is unreachable. "
        "Copy the dataset files to a folder and point $BENCH_DATA_DIR (or --data-dir) at it, "
        f"or set ${MIRROR_ENV} / --mirror to a reachable mirror of raw.githubusercontent.com."
    )


def fetch(
    dest: Path,
    *,
    mirror: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    include_optional: bool = False,
) -> list[FileCheck]:
    """Download the known upstream files into `dest`; returns one FileCheck per file considered."""
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    dest.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(dest)
    results = []
    wanted: list[KnownFile] = [k for k in KNOWN_FILES if k.upstream_url and (k.required or include_optional)]
    for known in wanted:
        assert known.upstream_url is not None
        target = dest / known.relpath
        if target.is_file():
            digest = sha256_file(target)
            if known.accepts(digest) or manifest.get(known.relpath, {}).get("sha256") == digest:
                results.append(
                    FileCheck(known.relpath, OK if known.accepts(digest) else UNVERIFIED, digest, "present")
                )
                continue
        url = mirrored(known.upstream_url, mirror)
        try:
            data = _download(url, timeout)
        except urllib.error.HTTPError as exc:
            raise DataError(f"cannot download {url}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            raise _offline_error(url, getattr(exc, "reason", exc)) from None
        digest = hashlib.sha256(data).hexdigest()
        if known.upstream_sha256 is not None and digest != known.upstream_sha256:
            raise DataError(
                f"{url}: sha256 {digest} does not match the pinned {known.upstream_sha256}; "
                "the file was not written (a changed upstream or a bad mirror)"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        part.write_bytes(data)
        os.replace(part, target)
        manifest[known.relpath] = {"url": known.upstream_url, "sha256": digest}
        _write_manifest(dest, manifest)
        status = OK if known.upstream_sha256 is not None else UNVERIFIED
        results.append(FileCheck(known.relpath, status, digest, "downloaded"))
    return results


def _write_manifest(root: Path, manifest: dict[str, dict[str, str]]) -> None:
    tmp = root / (FETCH_MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, root / FETCH_MANIFEST)
