"""Regression gates: `bench baseline RUN_DIR -o BASELINE.json` and `bench check RUN_DIR --baseline ...`.

Why seed variance: a metric computed from a few samples per seed moves between runs even when nothing
changed, so a fixed tolerance either flaps or misses real regressions. The baseline stores, per (system,
task, metric), the mean, sample std and n over seeds; the gate fails when the current mean moves in the
metric's *bad* direction by more than `k` standard errors of the baseline (std / sqrt(n)), or by more
than the absolute `floor` when that is larger (so a zero-variance baseline does not fail on float noise,
and a team can say "never flag less than 0.01"). Moves in the good direction never fail; metrics
without a direction are reported and skipped. A metric that was finite in the baseline and is missing or
NaN now fails: losing a number is a regression of its own. So does a cell of the checked run that failed
or is damaged on disk: one row `<system>/<task>/cells` per (system, task) names the seeds and reasons,
because a gate that only showed `n 10 -> 9` would let a crashing system through.

Wall-clock metrics (`seconds`, `records_per_s`) are reported and skipped unless `timing=True`
(`bench check --timing`): they move with the machine and its load, not with the code, and their
seed-to-seed spread says nothing about that. A rerun of an unchanged `file` suite on a busy machine
moved `records_per_s` from 32,169 to 23,861, nine baseline standard errors.

Baselines are validated with a pydantic model (`Baseline`), so a hand-edited or truncated file gives
one clear error naming the file and the field, never a KeyError.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from bench.errors import BenchError
from bench.store import atomic_write_json, atomic_write_text, read_json

BASELINE_FORMAT = "aod-bench-baseline"
BASELINE_VERSION = 1
_ARROW = {"up": "\u2191", "down": "\u2193"}


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _clean(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


def build_baseline(run_dir: Path | str) -> dict[str, Any]:
    """Per-(system, task, metric) mean, std, n and s.e. over the run's ok seeds, with the metric's direction."""
    from reports.aggregate import cell_stats, load_run, metric_better, read_manifest

    manifest = read_manifest(run_dir)
    df = load_run(run_dir)
    entries = []
    for (system, task, metric), (st, n_failed) in cell_stats(df).items():
        entries.append(
            {
                "system": system,
                "task": task,
                "metric": metric,
                "better": metric_better(metric),
                "n": st.n,
                "n_failed": n_failed,
                "mean": _clean(st.mean),
                "std": _clean(st.std),
                "sem": _clean(st.sem),
            }
        )
    return {
        "format": BASELINE_FORMAT,
        "version": BASELINE_VERSION,
        "run_id": manifest.get("run_id") or Path(run_dir).name,
        "suite": (manifest.get("suite") or {}).get("name"),
        "git": manifest.get("git"),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "entries": entries,
    }


def write_baseline(run_dir: Path | str, out: Path | str) -> dict[str, Any]:
    baseline = build_baseline(run_dir)
    atomic_write_json(Path(out), baseline)
    return baseline


class BaselineEntry(BaseModel):
    """One (system, task, metric) of a baseline; numbers are null where undefined (NaN)."""

    model_config = ConfigDict(extra="allow")
    system: StrictStr
    task: StrictStr
    metric: StrictStr
    better: Literal["up", "down"] | None = None
    n: int = Field(0, ge=0)
    n_failed: int = Field(0, ge=0)
    mean: float | None = None
    std: float | None = None
    sem: float | None = Field(None, ge=0)


class Baseline(BaseModel):
    model_config = ConfigDict(extra="allow")
    format: Literal["aod-bench-baseline"]
    version: int = Field(..., ge=1)
    entries: list[BaselineEntry]


def _first_errors(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    more = len(exc.errors()) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def read_baseline(path: Path | str) -> dict[str, Any]:
    try:
        data = read_json(Path(path))
    except FileNotFoundError:
        raise BenchError(
            f"{path}: no such baseline file (write one with `bench baseline RUN_DIR -o {path}`)"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise BenchError(f"{path}: not a JSON baseline: {exc}") from None
    except OSError as exc:
        raise BenchError(f"{path}: cannot read the baseline: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise BenchError(f'{path}: not a bench baseline (expected "format": "{BASELINE_FORMAT}")')
    try:
        model = Baseline.model_validate(data)
    except ValidationError as exc:
        raise BenchError(f"{path}: malformed baseline: {_first_errors(exc)}") from None
    if model.version > BASELINE_VERSION:
        raise BenchError(
            f"{path}: baseline version {model.version} is newer than this bench ({BASELINE_VERSION})"
        )
    return model.model_dump()


@dataclass(frozen=True)
class CheckResult:
    system: str
    task: str
    metric: str
    better: str | None
    baseline_mean: float
    baseline_sem: float
    baseline_n: int
    current_mean: float
    current_n: int
    tolerance: float
    status: str  # "pass" | "fail" | "skip"
    reason: str

    @property
    def name(self) -> str:
        return f"{self.system}/{self.task}/{self.metric}"

    @property
    def delta(self) -> float:
        return self.current_mean - self.baseline_mean


def _verdict(
    better: str | None, b_mean: float, c_mean: float, *, present: bool, tol: float
) -> tuple[str, str]:
    """(status, reason) of one baseline entry against the current mean."""
    if better not in ("up", "down"):
        return "skip", "metric has no better direction; not gated"
    if not present and not math.isnan(b_mean):
        return "fail", "missing from the run (no ok cell has this metric)"
    if math.isnan(b_mean):
        return "pass", "baseline is NaN (undefined); nothing to regress from"
    if math.isnan(c_mean):
        return "fail", "was finite in the baseline, NaN now (no parsed record to score?)"
    bad_move = (b_mean - c_mean) if better == "up" else (c_mean - b_mean)
    if bad_move > tol + 1e-12 * max(1.0, abs(b_mean)):
        return "fail", f"moved {bad_move:.4g} in the bad direction; tolerance {tol:.4g}"
    return "pass", "within tolerance" if bad_move > 0 else "unchanged or better"


WALL_CLOCK_METRICS = ("seconds", "records_per_s")


def check_run(
    run_dir: Path | str,
    baseline: dict[str, Any],
    *,
    k: float = 3.0,
    floor: float = 0.0,
    timing: bool = False,
) -> list[CheckResult]:
    """Compare RUN_DIR against a baseline dict (see module docstring for the rule)."""
    from reports.aggregate import cell_stats, load_run

    if k < 0 or floor < 0:
        raise BenchError("--k and --floor must be >= 0")
    current = cell_stats(load_run(run_dir))
    out: list[CheckResult] = []
    for e in baseline.get("entries") or []:
        system, task, metric = str(e["system"]), str(e["task"]), str(e["metric"])
        better = e.get("better")
        b_mean, b_sem, b_n = _num(e.get("mean")), _num(e.get("sem")), int(e.get("n") or 0)
        st = current.get((system, task, metric))
        c_mean = st[0].mean if st else math.nan
        c_n = st[0].n if st else 0
        tol = max(k * (0.0 if math.isnan(b_sem) else b_sem), floor)

        if metric in WALL_CLOCK_METRICS and not timing:
            status, reason = "skip", "wall-clock time; gated only with --timing"
        else:
            status, reason = _verdict(better, b_mean, c_mean, present=st is not None, tol=tol)
        out.append(
            CheckResult(system, task, metric, better, b_mean, b_sem, b_n, c_mean, c_n, tol, status, reason)
        )
    return out + _cell_failures(run_dir, baseline)


def _cell_failures(run_dir: Path | str, baseline: dict[str, Any]) -> list[CheckResult]:
    """One failing row per (system, task) with failed or damaged cells in the checked run."""
    from bench.store import RunStore
    from reports.aggregate import failed_cells

    bad: dict[tuple[str, str], list[str]] = {}
    for c in failed_cells(run_dir):
        bad.setdefault((c["system"], c["task"]), []).append(f"seed {c['seed']}: {c['error']}")
    for key, reason in RunStore(run_dir).damaged_cells():
        bad.setdefault((key.system, key.task), []).append(f"seed {key.seed}: damaged ({reason})")
    base_n = {(str(e["system"]), str(e["task"])): int(e.get("n") or 0) for e in baseline.get("entries") or []}
    ok_n: dict[tuple[str, str], int] = {}
    for c in RunStore(run_dir).iter_cells():
        if c.status == "ok":
            ok_n[(c.key.system, c.key.task)] = ok_n.get((c.key.system, c.key.task), 0) + 1
    out = []
    for (system, task), reasons in bad.items():
        word = "cell" if len(reasons) == 1 else "cells"
        out.append(
            CheckResult(
                system,
                task,
                "cells",
                None,
                math.nan,
                math.nan,
                base_n.get((system, task), 0),
                math.nan,
                ok_n.get((system, task), 0),
                0.0,
                "fail",
                f"{len(reasons)} {word} failed: " + "; ".join(reasons),
            )
        )
    return out


def render_check(results: list[CheckResult], *, k: float, floor: float, verbose: bool = False) -> str:
    """Readable diff: every failure with baseline -> current, the move and the tolerance; then a summary."""
    from reports.fmt import fmt_num

    fails = [r for r in results if r.status == "fail"]
    lines: list[str] = []
    shown = results if verbose else fails
    for r in shown:
        arrow = _ARROW.get(r.better or "", " ")
        word = {"fail": "FAIL", "pass": "ok  ", "skip": "skip"}[r.status]
        if r.metric == "cells" and r.better is None and math.isnan(r.baseline_mean):
            lines.append(
                f"{word} {r.name}  (ok seeds: {r.baseline_n} in the baseline -> {r.current_n})  {r.reason}"
            )
            continue
        sem = "" if math.isnan(r.baseline_sem) else f" = {k:g} x s.e. {r.baseline_sem:.3g}"
        floor_txt = f", floor {floor:g}" if floor else ""
        lines.append(
            f"{word} {r.name} {arrow}  {fmt_num(r.baseline_mean)} -> {fmt_num(r.current_mean)}"
            f"  ({'+' if r.delta >= 0 else ''}{fmt_num(r.delta) if not math.isnan(r.delta) else 'n/a'};"
            f" tolerance {r.tolerance:.3g}{sem}{floor_txt}; n {r.baseline_n} -> {r.current_n})  {r.reason}"
        )
    passed = sum(r.status == "pass" for r in results)
    skipped = sum(r.status == "skip" for r in results)
    lines.append(f"{passed} passed, {len(fails)} failed, {skipped} skipped (k = {k:g}, floor = {floor:g})")
    return "\n".join(lines) + "\n"


def junit_xml(results: list[CheckResult], *, suite_name: str = "bench check") -> str:
    """JUnit XML (one testcase per baseline entry) for CI dashboards; ElementTree escapes every string."""
    fails = sum(r.status == "fail" for r in results)
    skips = sum(r.status == "skip" for r in results)
    ts = ET.Element(
        "testsuite",
        name=suite_name,
        tests=str(len(results)),
        failures=str(fails),
        errors="0",
        skipped=str(skips),
    )
    for r in results:
        tc = ET.SubElement(ts, "testcase", classname=f"bench.check.{r.system}", name=f"{r.task}.{r.metric}")
        props = ET.SubElement(tc, "properties")
        for key, val in (
            ("baseline_mean", r.baseline_mean),
            ("current_mean", r.current_mean),
            ("tolerance", r.tolerance),
            ("better", r.better or ""),
        ):
            ET.SubElement(props, "property", name=key, value=str(val))
        if r.status == "fail":
            f = ET.SubElement(tc, "failure", message=r.reason, type="regression")
            f.text = f"{r.name}: {r.baseline_mean} -> {r.current_mean} (tolerance {r.tolerance})"
        elif r.status == "skip":
            ET.SubElement(tc, "skipped", message=r.reason)
    return ET.tostring(ts, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(results: list[CheckResult], path: Path | str) -> None:
    atomic_write_text(Path(path), junit_xml(results))
