"""The runner: suite -> cells (system x task x seed) -> executor -> run store -> expectations -> report.

`run_suite` is the one entry point used by `bench run`, the pytest plugin and tests. Resuming a run
skips every cell whose hash matches a finished cell on disk; cells whose metrics.json lacks a metric the
suite now asks for are re-scored from their stored samples without any model call.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.cells import CellJob, CellOutcome, cell_hash, load_task_cached, resolved_system_params
from bench.checks import prepare_suite
from bench.context import default_cache_dir
from bench.errors import BenchError
from bench.executors import run_jobs
from bench.expect import ExpectationResult, Ref, evaluate, skip_if_left_out
from bench.manifest import build_manifest
from bench.profiles import apply_overrides, resolve_profile
from bench.runlock import RunLock
from bench.store import CellKey, DiskFullError, RunStore, read_json
from bench.suite import Suite, SuiteFile
from bench.types import JSON


@dataclass
class RunOptions:
    """Transport and selection knobs: none of them enters a cell hash."""

    out: str | None = None
    resume: str | None = None
    systems: list[str] | None = None
    tasks: list[str] | None = None
    workers: int | None = None
    """Worker processes; None: the profile's `workers:` (catalog), capped at the machine's cores, else 1."""
    executor: str = "local"
    use_cache: bool = True
    cache_dir: str | None = None
    data_dir: str | None = None
    progress: bool = True
    write_report: bool = True
    keep_going: bool = False  # preflight problems: run what can run instead of stopping
    preflight: bool = True


@dataclass
class RunResult:
    run_dir: Path
    outcomes: list[CellOutcome]
    expectations: list[ExpectationResult]
    skipped: int = 0
    report_md: str = ""
    manifest: JSON = field(default_factory=dict)

    @property
    def failed_cells(self) -> list[CellOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed_cells and all(e.passed or e.skipped for e in self.expectations)


def _select(names: list[str], wanted: list[str] | None, kind: str) -> list[str]:
    if not wanted:
        return names
    missing = [w for w in wanted if w not in names]
    if missing:
        from bench.registry import suggest

        raise BenchError(f"--{kind} names {missing[0]!r}, not in the suite{suggest(missing[0], names)}")
    return [n for n in names if n in wanted]


def expand_task_patterns(suite: Suite, data_dir: str | None) -> Suite:
    """`superni/*`-style task names become one TaskConfig per matching task, sizes copied."""
    if not any(set(t.name) & set("*?[") for t in suite.tasks):
        return suite
    from bench.tasks import expand_task_pattern

    tasks = []
    for t in suite.tasks:
        if set(t.name) & set("*?["):
            names = expand_task_pattern(t.name, data_dir)
            if not names:
                raise BenchError(f"task pattern {t.name!r} matches no task in the data dir")
            tasks += [t.model_copy(update={"name": n}) for n in names]
        else:
            tasks.append(t)
    return suite.model_copy(update={"tasks": tasks})


def plan_jobs(sf: SuiteFile, run_dir: Path, opts: RunOptions) -> tuple[list[CellJob], JSON, JSON]:
    """Expand the suite into jobs; returns (jobs, roles per system, data fingerprints per task)."""
    suite = sf.suite
    base_profile = resolve_profile(suite.profile, suite.models)
    cache_dir = str(Path(opts.cache_dir) if opts.cache_dir else default_cache_dir())
    data_dir = opts.data_dir
    system_names = _select(list(suite.systems), opts.systems, "systems")
    task_cfgs = [
        t for t in suite.tasks if t.name in _select([t.name for t in suite.tasks], opts.tasks, "tasks")
    ]
    fingerprints: JSON = {}
    for t in task_cfgs:
        spec = load_task_cached(t.model_dump(), data_dir)
        fingerprints[t.name] = spec.fingerprint
    roles_by_system: JSON = {}
    jobs: list[CellJob] = []
    metrics = suite.metric_list()
    for sname in system_names:
        cfg = suite.systems[sname]
        profile = apply_overrides(base_profile, cfg.models, suite.models)
        roles_by_system[sname] = profile.roles
        sys_json = {"type": cfg.type, "params": cfg.params}
        resolved = resolved_system_params(sys_json)
        for t in task_cfgs:
            tjson = t.model_dump()
            for seed in suite.seed_list():
                key = CellKey(sname, t.name, seed)
                h = cell_hash(
                    sys_json, profile.roles, tjson, fingerprints[t.name], seed, suite.samples, resolved
                )
                jobs.append(
                    CellJob(
                        key,
                        h,
                        sys_json,
                        profile.roles,
                        profile.name,
                        tjson,
                        suite.samples,
                        metrics,
                        str(run_dir),
                        cache_dir,
                        opts.use_cache,
                        data_dir,
                        suite.timeout_s,
                    )
                )
    return jobs, roles_by_system, fingerprints


def _announce_scale(suite: Suite, jobs: list[CellJob], opts: RunOptions) -> None:
    """Say the scale before the long part starts (the manifest records it as `scale` too)."""
    if not opts.progress:
        return
    print(f"{suite.name}: {scale_text(suite, jobs)}", file=sys.stderr)


def scale_text(suite: Suite, jobs: list[CellJob]) -> str:
    seeds = suite.seed_list()
    systems = list(dict.fromkeys(j.key.system for j in jobs))
    tasks = list(dict.fromkeys(j.key.task for j in jobs))
    sizes = ", ".join(
        f"{t.name} {t.n_references or 'all'}/{t.n_holdout or 'all'}" for t in suite.tasks if t.name in tasks
    )
    return (
        f"profile {suite.profile}; {len(systems)} system(s) x {len(tasks)} task(s) x {len(seeds)} seed(s) = "
        f"{len(jobs)} cells; {suite.samples} samples per cell; references/holdout per task: {sizes}"
    )


def default_run_dir(suite: Suite) -> Path:
    """runs/<name>-<time>; the name is reduced to one safe path component even if it slipped past the
    suite schema (which refuses '/', a leading '.', control characters), so a run never lands outside runs/."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in suite.name).lstrip(".")[:100] or "suite"
    return Path("runs") / f"{safe}-{stamp}"


class MacroLookup:
    """Value of a Ref: mean over seeds per task (NaN seeds ignored), then mean over tasks.

    Also a `bench.expect.TaskMeansLookup`, so an expectation can say when two means cover different tasks.
    """

    def __init__(self, cells: list[tuple[CellKey, dict[str, float]]]):
        per: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for key, values in cells:
            for m, v in values.items():
                if v is not None and not (isinstance(v, float) and math.isnan(v)):
                    per[(key.system, key.task, m)].append(float(v))
        self._per = per

    def task_means(self, ref: Ref) -> dict[str, float]:
        return {
            t: sum(vals) / len(vals)
            for (s, t, m), vals in self._per.items()
            if s == ref.system and m == ref.metric and (ref.task is None or t == ref.task) and vals
        }

    def __call__(self, ref: Ref) -> float:
        means = self.task_means(ref)
        return sum(means.values()) / len(means) if means else math.nan


def macro_lookup(cells: list[tuple[CellKey, dict[str, float]]]) -> MacroLookup:
    """The lookup that suite expectations read, in `bench run` and the pytest plugin (see MacroLookup)."""
    return MacroLookup(cells)


def _rescore_if_needed(store: RunStore, job: CellJob) -> CellOutcome | None:
    """A finished cell missing some requested metric is re-scored from its samples (no generation)."""
    d = store.cell_dir(job.key)
    have = read_json(d / "metrics.json")
    missing = [m for m in job.metrics if m not in have]
    if not missing:
        return None
    from bench.cells import build_context
    from metrics.scoring import score_cell

    spec = load_task_cached(job.task, job.data_dir)
    samples = store.read_samples(job.key)
    score = score_cell(samples, spec, job.metrics, build_context(job))
    have.update(score.values)
    record = read_json(d / "cell.json")
    record["rescored"] = time.time()
    store.write_cell(job.key, record=record, metrics=have)
    return CellOutcome(job.key, "ok", have, None, len(samples), 0.0)


class Progress:
    """tqdm bar over cells with records/s; silent when disabled or not installed."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        self.records = 0
        self.t0 = time.perf_counter()
        if enabled and total:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="cell", file=sys.stderr, dynamic_ncols=True, smoothing=0.1)
            except ImportError:  # pragma: no cover
                self.bar = None

    def update(self, outcome: CellOutcome, failed: int) -> None:
        self.records += outcome.n_samples
        if self.bar is not None:
            rate = self.records / max(1e-9, time.perf_counter() - self.t0)
            self.bar.set_postfix_str(f"{rate:.2f} rec/s, {failed} failed, last {outcome.key.label()}")
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_suite(
    suite_path: str | Path, overrides: dict[str, Any] | None = None, opts: RunOptions | None = None
) -> RunResult:
    opts = opts or RunOptions()
    if opts.resume:
        overrides, opts = resume_selection(Path(opts.resume), overrides, opts)
    # every check validate and --dry-run make (bench.checks); patterns come back expanded
    sf = prepare_suite(suite_path, overrides, data_dir=opts.data_dir, systems=opts.systems, tasks=opts.tasks)
    sf.suite = expand_task_patterns(sf.suite, opts.data_dir)
    suite = sf.suite
    opts = replace(opts, workers=resolve_workers(opts.workers, suite.profile))  # the manifest records it
    if opts.resume:
        run_dir = Path(opts.resume)
        if not (run_dir / "manifest.json").exists():
            raise BenchError(f"--resume {run_dir}: not a run directory (no manifest.json)")
        RunStore(run_dir).read_manifest()  # a damaged manifest is a clear error before any work
    else:
        run_dir = Path(opts.out) if opts.out else default_run_dir(suite)
        _refuse_existing_run(run_dir)
    store = RunStore(run_dir)
    jobs, roles, fingerprints = plan_jobs(sf, run_dir, opts)
    with RunLock(run_dir):
        if not opts.resume:
            _refuse_existing_run(run_dir)  # again under the lock: another run may have started meanwhile
        store.remove_stale_tmp()
        try:
            return _run_locked(sf, store, jobs, roles, fingerprints, opts)
        except DiskFullError as exc:
            raise DiskFullError(
                f"{exc}. The run stopped; every finished cell is kept. Free some space, then finish it with "
                f"`bench run {sf.path} --resume {run_dir}`"
            ) from None


def resume_selection(
    run_dir: Path, overrides: dict[str, Any] | None, opts: RunOptions
) -> tuple[dict[str, Any], RunOptions]:
    """What a resume runs when the command does not say: the run's own seeds, samples, profile, systems
    and tasks, from its manifest. Without this, `bench run SUITE --resume RUN` of a run started with
    `--seeds 3 --samples 6 --systems a,b` planned the suite's defaults instead: it re-ran finished cells
    with another sample count into the same run and added systems the run never had. A flag given on
    the command line still wins (a resume may add seeds on purpose)."""
    overrides = dict(overrides or {})
    manifest_path = run_dir / "manifest.json"
    if not manifest_path.exists():
        return overrides, opts  # run_suite refuses it with a clear error
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return overrides, opts  # RunStore.read_manifest names the damage
    suite = manifest.get("suite") or {}
    seeds = suite.get("seeds")
    if "seeds" not in overrides and isinstance(seeds, list) and seeds == list(range(len(seeds))) and seeds:
        overrides["seeds"] = len(seeds)
    if "samples" not in overrides and isinstance(suite.get("samples"), int):
        overrides["samples"] = suite["samples"]
    if "profile" not in overrides and isinstance(manifest.get("profile"), str):
        overrides["profile"] = manifest["profile"]
    labels = [str(k) for k in (manifest.get("cells") or {})]
    parts = [lab.split("/") for lab in labels if lab.count("/") >= 2]
    systems = list(dict.fromkeys(p[0] for p in parts))
    tasks = list(dict.fromkeys("/".join(p[1:-1]) for p in parts))
    if opts.systems is None and systems and set(systems) != set(suite.get("systems") or {}):
        opts = replace(opts, systems=systems)
    suite_tasks = [t.get("name") for t in suite.get("tasks") or [] if isinstance(t, dict)]
    if opts.tasks is None and tasks and set(tasks) != set(suite_tasks):
        opts = replace(opts, tasks=tasks)
    return overrides, opts


def _refuse_existing_run(run_dir: Path) -> None:
    if (run_dir / "manifest.json").exists():
        raise BenchError(f"{run_dir} already holds a run; use --resume {run_dir} to finish it")


def _run_locked(
    sf: SuiteFile, store: RunStore, jobs: list[CellJob], roles: JSON, fingerprints: JSON, opts: RunOptions
) -> RunResult:
    suite = sf.suite
    run_dir = store.root
    blocked: dict[str, str] = {}
    if opts.preflight:  # before any cell runs: weights, keys, CUDA (bench/preflight.py)
        from bench.preflight import gate

        blocked = gate(suite, roles, suite.metric_list(), opts.keep_going)
    _announce_scale(suite, jobs, opts)
    started = datetime.now(UTC).isoformat()
    previous = store.read_manifest() if store.exists() else {}
    manifest = build_manifest(suite, sf.path, opts, jobs, roles, fingerprints, started, previous)
    manifest.update(scale=scale_text(suite, jobs), preflight_blocked=blocked)
    store.write_manifest(manifest)

    outcomes: list[CellOutcome] = []
    todo: list[CellJob] = []
    skipped = 0
    for job in jobs:
        check = store.check_cell(job.key, job.hash)
        if check.done:
            rescored = _rescore_if_needed(store, job)
            skipped += 1
            outcomes.append(rescored or CellOutcome(job.key, "skipped"))
        elif job.key.system in blocked:
            from bench.cells import record_failure

            outcomes.append(record_failure(job, blocked[job.key.system], 0.0))
        else:
            if check.state == "damaged":
                print(
                    f"resume: cell {job.key.label()} is damaged ({check.reason}); running it again",
                    file=sys.stderr,
                )
            todo.append(job)
    if skipped:
        print(f"resume: {skipped} finished cell(s) skipped, {len(todo)} to run", file=sys.stderr)

    progress = Progress(len(todo), opts.progress)
    failed = 0

    def on_done(outcome: CellOutcome) -> None:
        nonlocal failed
        if outcome.status == "aborted":
            raise DiskFullError(outcome.error or "the run store could not be written")
        failed += outcome.status == "failed"
        outcomes.append(outcome)
        progress.update(outcome, failed)
        if outcome.status == "failed" and opts.progress:
            print(f"\nFAILED {outcome.key.label()}: {outcome.error}", file=sys.stderr)

    # Seed-major order (stable, so systems and tasks keep the suite's order within a seed): a run that
    # is stopped part-way has every system on the same seeds, which is what paired tests across systems
    # need; `--resume` then adds whole seeds.
    todo.sort(key=lambda job: job.key.seed)
    try:
        run_jobs(todo, on_done, opts.executor, resolve_workers(opts.workers, sf.suite.profile))
    finally:
        progress.close()

    # expectations over every finished cell of this run (including resumed ones)
    on_disk = list(store.iter_cells())  # read once: the expectations and the plan's remainder use it
    cells = [(c.key, c.metrics) for c in on_disk if c.status == "ok"]
    lookup = macro_lookup(cells)
    all_tasks = [t.name for t in suite.tasks]
    left_out_systems = set(suite.systems) - set(_select(list(suite.systems), opts.systems, "systems"))
    left_out_tasks = set(all_tasks) - set(_select(all_tasks, opts.tasks, "tasks"))
    results = [
        skip_if_left_out(e, left_out_systems, left_out_tasks) or evaluate(e, lookup)
        for e in suite.expectations()
    ]
    hits = sum(o.cache_hits for o in outcomes)
    misses = sum(o.cache_misses for o in outcomes)
    labels = {c.key.label() for c in on_disk}
    left = [label for label in manifest["cells"] if label not in labels]
    if left:  # planned by an earlier invocation and left out of this one (a narrowed resume)
        print(
            f"note: {len(left)} cell(s) the run planned earlier are not run yet (e.g. {left[0]}); "
            f"`bench run {sf.path} --resume {run_dir}` finishes them",
            file=sys.stderr,
        )
    manifest.update(
        finished=None if left else datetime.now(UTC).isoformat(),
        cells_not_run=len(left),
        cache={**manifest.get("cache", {}), "hits": hits, "misses": misses},
        cell_status={s: sum(o.status == s for o in outcomes) for s in ("ok", "failed", "skipped")},
        expectations=[
            {"text": r.text, "passed": r.passed, "detail": r.detail, "skipped": r.skipped} for r in results
        ],
    )
    store.write_manifest(manifest)
    report = ""
    if opts.write_report:
        report = write_report(run_dir)
    return RunResult(run_dir, outcomes, results, skipped, report, manifest)


def write_report(run_dir: Path) -> str:
    """report.md (+ results.csv) always; report.html too unless BENCH_NO_HTML is set.

    A renderer failure is reported on stderr and never turns a finished run into a failed one.
    """
    from reports.markdown import write_report_md

    text = write_report_md(run_dir)
    if not os.environ.get("BENCH_NO_HTML"):
        try:
            from reports.html import write_report_html

            write_report_html(run_dir)
        except Exception as exc:  # plots need matplotlib etc.; the Markdown report is already written
            print(f"warning: report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr)
    return text


def summary_line(result: RunResult) -> str:
    """pytest-like closing line over the suite's expectations, then the failed cells when there are any
    (a run whose every cell failed must not end in "0 passed, 0 failed")."""
    passed = sum(e.passed for e in result.expectations)
    skipped = sum(e.skipped for e in result.expectations)
    failed = len(result.expectations) - passed - skipped
    line = f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else "")
    n_failed = len(result.failed_cells)
    if n_failed:
        line += f"; {n_failed} of {len(result.outcomes)} cells failed"
    return line


def resolve_workers(asked: int | None, profile: str) -> int:
    """`--workers` when given, else the profile's default (`workers:` in systems/catalog.yaml), never more
    than the machine's cores. The embedded profile asks for 2: its DLM training and llama.cpp calls run one
    thread each, so one worker left a core of a 2-core machine idle for most of Table 1."""
    if asked is not None:
        return asked
    from bench.profiles import load_catalog

    declared = int((load_catalog().profiles.get(profile) or {}).get("workers") or 1)
    return max(1, min(declared, os.cpu_count() or 1))


def env_workers(default: int = 1) -> int:
    return int(os.environ.get("BENCH_WORKERS", default))
