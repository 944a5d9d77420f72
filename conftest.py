"""The bench pytest plugin: `pytest --bench-suite suites/smoke.yaml [--bench-run RUN_DIR]`.

Why a pytest plugin: CI systems already read pytest's exit status and JUnit XML, so a suite's
expectations (`expect:` lines such as `ar.parse_rate > 0.3`) become ordinary test items with readable
failures, and the numbers behind them travel into JUnit as `<property>` elements (`record_property`).

- `--bench-suite SUITE` runs the suite once per session (through `bench.runner.run_suite`) and turns each
  expectation into one item, plus one item `cells` that fails when any cell failed (with the reasons).
- `--bench-run RUN_DIR` loads an existing run instead and evaluates the suite's expectations on it.
- `--bench-out DIR` puts the run there (default: the runner's runs/<suite>-<timestamp>).
Without explicit test paths on the command line only the bench items run; with paths, both.
"""

from __future__ import annotations

import os

# Before torch or llama.cpp load: idle OpenMP threads sleep instead of spinning (see bench/cli).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import math  # noqa: E402
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bench", "aod-bench suites as tests")
    group.addoption("--bench-suite", metavar="SUITE", help="run this suite and test its expectations")
    group.addoption("--bench-run", metavar="RUN_DIR", help="evaluate the suite's expectations on this run")
    group.addoption("--bench-out", metavar="DIR", help="run directory for --bench-suite (default runs/...)")


@dataclass
class BenchOutcome:
    """What the session's single run (or load) produced; `error` holds a setup failure for every item."""

    run_dir: Path | None = None
    expectations: dict[str, Any] = field(default_factory=dict)  # text -> ExpectationResult
    failed_cells: list[dict[str, Any]] = field(default_factory=list)
    macro: dict[tuple[str, str], float] = field(default_factory=dict)
    error: str | None = None


_OUTCOME = pytest.StashKey[BenchOutcome]()


class BenchExpectationFailed(Exception):
    """An expectation that evaluated to False (shown without a Python traceback)."""


def _evaluate_run(run_dir: Path, expect: list[str]) -> BenchOutcome:
    from bench.expect import evaluate, parse_expectation
    from bench.runner import macro_lookup
    from bench.store import RunStore
    from reports.aggregate import failed_cells

    store = RunStore(run_dir)
    cells = [(c.key, c.metrics) for c in store.iter_cells() if c.status == "ok"]
    lookup = macro_lookup(cells)
    results = {text: evaluate(parse_expectation(text), lookup) for text in expect}
    macro: dict[tuple[str, str], float] = {}
    for key, metrics in cells:
        for m in metrics:
            macro.setdefault((key.system, m), math.nan)
    for system, metric in list(macro):
        from bench.expect import Ref

        macro[(system, metric)] = lookup(Ref(system, metric))
    return BenchOutcome(run_dir, results, failed_cells(run_dir), macro)


def _bench_outcome(config: pytest.Config) -> BenchOutcome:
    """Run (or load) once per session; later items reuse the stashed outcome."""
    if _OUTCOME in config.stash:
        return config.stash[_OUTCOME]
    suite_path = Path(config.getoption("bench_suite"))
    run_opt = config.getoption("bench_run")
    try:
        from bench.suite import load_suite

        suite = load_suite(suite_path).suite
        if run_opt:
            run_dir = Path(run_opt)
            if not (run_dir / "cells").is_dir():
                raise FileNotFoundError(f"--bench-run {run_dir}: not a run directory (no cells/)")
        else:
            from bench.runner import RunOptions, run_suite

            out = config.getoption("bench_out")
            result = run_suite(suite_path, None, RunOptions(out=out, progress=False))
            run_dir = Path(result.run_dir)
        outcome = _evaluate_run(run_dir, list(suite.expect))
    except Exception as exc:  # noqa: BLE001 - reported on every item, readable
        outcome = BenchOutcome(error=f"{type(exc).__name__}: {exc}")
    config.stash[_OUTCOME] = outcome
    return outcome


class BenchSuiteFile(pytest.File):
    """The suite file as a pytest collector: one item per expectation plus the `cells` item."""

    def collect(self):  # type: ignore[override]
        from bench.suite import load_suite

        try:
            suite = load_suite(self.path).suite
        except Exception as exc:  # noqa: BLE001 - a broken suite is one failing item, not a crash
            yield BenchSuiteError.from_parent(self, name="suite", message=str(exc))
            return
        for text in suite.expect:
            yield BenchExpectationItem.from_parent(self, name=text, text=text)
        yield BenchCellsItem.from_parent(self, name="cells")


class BenchSuiteError(pytest.Item):
    def __init__(self, *, message: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.message = message

    def runtest(self) -> None:
        raise BenchExpectationFailed(f"suite cannot be loaded: {self.message}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, "bench suite"


class _BenchItem(pytest.Item):
    def _outcome(self) -> BenchOutcome:
        outcome = _bench_outcome(self.config)
        if outcome.error:
            raise BenchExpectationFailed(f"the suite did not run: {outcome.error}")
        self.user_properties.append(("run_dir", str(outcome.run_dir)))
        return outcome

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, BenchExpectationFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"bench: {self.name}"


class BenchExpectationItem(_BenchItem):
    """One `expect:` line; passes when it holds on the run's macro means."""

    def __init__(self, *, text: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.text = text

    def runtest(self) -> None:
        from bench.expect import Ref, parse_expectation

        outcome = self._outcome()
        exp = parse_expectation(self.text)
        refs = [exp.left] + ([exp.right] if isinstance(exp.right, Ref) else [])
        for ref in refs:
            value = outcome.macro.get((ref.system, ref.metric)) if ref.task is None else None
            if value is not None:
                self.user_properties.append((f"{ref.system}.{ref.metric}", value))
        result = outcome.expectations[self.text]
        self.user_properties.append(("detail", result.detail))
        if result.skipped:
            pytest.skip(result.detail)
        if not result.passed:
            raise BenchExpectationFailed(
                f"expectation failed: {self.text}\n  observed: {result.detail}\n  run: {outcome.run_dir}"
            )


class BenchCellsItem(_BenchItem):
    """Fails when any cell of the run failed (system crash, backend error, timeout), listing the reasons."""

    def runtest(self) -> None:
        outcome = self._outcome()
        for (system, metric), value in sorted(outcome.macro.items()):
            self.user_properties.append((f"{system}.{metric}", value))
        if outcome.failed_cells:
            lines = [f"{len(outcome.failed_cells)} cell(s) failed in {outcome.run_dir}:"]
            lines += [
                f"  {f['system']}/{f['task']}/seed-{f['seed']}: {f['error']}" for f in outcome.failed_cells
            ]
            raise BenchExpectationFailed("\n".join(lines))


class _SuiteFileCollection:
    """Global plugin (not conftest-scoped, so a suite outside this directory is collected too)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() == self.path:
            return BenchSuiteFile.from_parent(parent, path=file_path)
        return None


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A `--bench-suite` session runs in one process: under the xdist workers of the project's
    `addopts` each worker would run the suite itself, into the same run directory."""
    if config.getoption("bench_suite", None) and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Make the suite file a collection argument: alone, unless test paths were given explicitly."""
    suite = config.getoption("bench_suite", None)
    if not suite:
        return
    path = Path(suite).resolve()
    config.pluginmanager.register(_SuiteFileCollection(path), "aod-bench-suite-file")
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(str(path))
    else:
        config.args[:] = [str(path)]
