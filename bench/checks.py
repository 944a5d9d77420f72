"""The one function that checks a suite: `prepare_suite`, called by `bench validate`, `bench run --dry-run`
and `bench run` alike, so that what one accepts the others accept.

A check is a function `(CheckContext) -> iterable of Problem`; `CHECKS` lists them in order and
`register_check` appends one (a preflight of weights, API keys or CUDA plugs in here). Every check runs
even when an earlier one found problems, so one pass reports every error; checks skip the parts of the
suite that failed the schema (`SuiteFile.skipped`), whose errors are already reported.

Stages before the checks (in `bench.suite.parse_suite`): YAML with limits (`bench.suite_yaml`), then the
pydantic schema. The checks then resolve every name against the registries, resolve the model of every
role, expand task patterns, and load every task's data and split, as the run will.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import BenchError
from bench.problems import Problem, SuiteProblems
from bench.registry import BACKENDS, METRICS, SYSTEMS, UnknownNameError, suggest
from bench.suite import EFFICIENCY_METRICS, Suite, SuiteFile, parse_suite

__all__ = [
    "CHECKS",
    "CheckContext",
    "Problem",
    "SuiteProblems",
    "prepare_suite",
    "register_check",
    "select",
    "validate_suite",
]

_GLOB = set("*?[")


@dataclass
class CheckContext:
    """What a check sees: the suite file (with positions) and the run's data dir and selections."""

    sf: SuiteFile
    data_dir: str | None = None
    systems: list[str] | None = None  # --systems
    tasks: list[str] | None = None  # --tasks
    expanded: dict[int, list[str]] = field(default_factory=dict)  # tasks[i] -> concrete task names
    specs: dict[str, Any] = field(default_factory=dict)  # concrete task name -> TaskSpec

    @property
    def suite(self) -> Suite:
        return self.sf.suite

    def problem(self, loc: tuple[Any, ...], message: str, *, key: bool = False) -> Problem:
        """A Problem at `loc` (line of the value, or of the key itself with `key=True`)."""
        return self.sf.problem(loc, message, key=key)

    def live_systems(self) -> list[str]:
        """System names that passed the schema (placeholders and failed entries left out)."""
        if self.sf.skipped("systems"):
            return []
        return [n for n in self.suite.systems if not self.sf.skipped("systems", n)]


Check = Callable[[CheckContext], Iterable[Problem]]


def check_systems(ctx: CheckContext) -> Iterator[Problem]:
    """Each system type is registered and accepts its params (constructing a system loads no model)."""
    for name in ctx.live_systems():
        cfg = ctx.suite.systems[name]
        try:
            SYSTEMS.get(cfg.type)(dict(cfg.params))
        except UnknownNameError as exc:
            yield ctx.problem(("systems", name, "type"), str(exc))
        except BenchError as exc:
            yield ctx.problem(("systems", name, "params"), str(exc))
        except ImportError as exc:
            yield ctx.problem(
                ("systems", name, "type"), f"system type {cfg.type!r} cannot be loaded here: {exc}"
            )


def _backend_problem(spec: Any) -> str | None:
    backend = spec.get("backend") if isinstance(spec, dict) else None
    if not isinstance(backend, str):
        return "a model needs a 'backend' (see `bench list backends`)"
    if backend not in BACKENDS:
        return f"unknown backend {backend!r}{suggest(backend, BACKENDS.names())}"
    return None


def check_models(ctx: CheckContext) -> Iterator[Problem]:
    """Suite presets name a known backend; every system role is a known role whose model resolves."""
    from bench.profiles import ROLES, load_catalog, resolve_model

    s = ctx.suite
    presets = {} if ctx.sf.skipped("models") else s.models
    for pname, spec in presets.items():
        if ctx.sf.skipped("models", pname):
            continue
        msg = _backend_problem(spec)
        if msg:
            yield ctx.problem(("models", pname, "backend") if "backend" in spec else ("models", pname), msg)
    catalog = load_catalog().with_models(presets)
    for name in ctx.live_systems():
        for role, ref in ctx.suite.systems[name].models.items():
            loc = ("systems", name, "models", role)
            if role not in ROLES:
                yield ctx.problem(
                    loc,
                    f"unknown role {role!r}{suggest(role, list(ROLES))} (roles: {', '.join(ROLES)})",
                    key=True,
                )
                continue
            try:
                spec = resolve_model(ref, catalog)
            except BenchError as exc:
                yield ctx.problem(loc, str(exc))
                continue
            msg = _backend_problem(spec)
            if msg:
                yield ctx.problem(loc, msg)


def check_profile(ctx: CheckContext) -> Iterator[Problem]:
    from bench.profiles import profile_names

    if ctx.sf.skipped("profile"):
        return
    if ctx.suite.profile not in profile_names():
        yield ctx.problem(
            ("profile",),
            f"unknown profile {ctx.suite.profile!r}{suggest(ctx.suite.profile, profile_names())}",
        )
    for prof in ctx.suite.profile_overrides:
        if prof not in profile_names():
            yield ctx.problem(
                ("profile_overrides", prof),
                f"unknown profile {prof!r}{suggest(prof, profile_names())}",
                key=True,
            )


def check_metrics(ctx: CheckContext) -> Iterator[Problem]:
    """Metric names are registered, and the profile serves the roles they need (scorer, embedder)."""
    from bench.dry_run import METRIC_ROLES
    from bench.profiles import load_catalog

    if ctx.sf.skipped("metrics"):
        return
    profile = load_catalog().profiles.get(ctx.suite.profile) or {}
    served = set((profile.get("roles") or {}) if isinstance(profile, dict) else ())
    for i, metric in enumerate(ctx.suite.metric_list()):
        if ctx.sf.skipped("metrics", i):
            continue
        if metric not in METRICS:
            yield ctx.problem(("metrics", i), f"unknown metric {metric!r}{suggest(metric, METRICS.names())}")
            continue
        for role, users in METRIC_ROLES.items():
            if metric in users and profile and role not in served:
                yield ctx.problem(
                    ("metrics", i),
                    f"metric {metric!r} needs a {role!r} model; profile {ctx.suite.profile!r} has none",
                )


def check_tasks(ctx: CheckContext) -> Iterator[Problem]:
    """Each task resolves (patterns expand), is listed once, and loads with its options and split.

    A task listed twice would be two configurations writing one cell directory; it is refused, naming
    both lines (give each configuration its own suite, or list the task once)."""
    from bench.cells import load_task_cached
    from bench.tasks import expand_task_pattern, resolve_family

    first: dict[str, int] = {}
    for i, t in enumerate(ctx.suite.tasks):
        if ctx.sf.skipped("tasks", i) or ctx.sf.skipped("tasks"):
            continue
        loc = ("tasks", i, "name")
        try:
            names = expand_task_pattern(t.name, ctx.data_dir) if _GLOB & set(t.name) else [t.name]
            for n in names:
                resolve_family(n)
        except (UnknownNameError, BenchError) as exc:
            yield ctx.problem(loc, str(exc))
            continue
        for n in names:
            if n in first:
                j = first[n]
                yield ctx.problem(
                    loc,
                    f"task {n!r} is already listed as tasks[{j}] (line {ctx.sf.line('tasks', j)}); a task may "
                    "appear once per suite (its cells would share one directory): drop one, or put the other "
                    "configuration in its own suite",
                )
                continue
            first[n] = i
            ctx.expanded.setdefault(i, []).append(n)
            try:
                ctx.specs[n] = load_task_cached({**t.model_dump(), "name": n}, ctx.data_dir)
            except UnknownNameError as exc:
                yield ctx.problem(loc, str(exc))
            except BenchError as exc:
                yield ctx.problem(("tasks", i), f"task {n!r}: {exc}" if n not in str(exc) else str(exc))


def check_expectations(ctx: CheckContext) -> Iterator[Problem]:
    from bench.expect import parse_expectation

    s = ctx.suite
    if ctx.sf.skipped("expect"):
        return
    metrics = None if ctx.sf.skipped("metrics") else s.metric_list()
    for i, text in enumerate(s.expect):
        if ctx.sf.skipped("expect", i):
            continue
        try:
            e = parse_expectation(text)
        except ValueError as exc:
            yield ctx.problem(("expect", i), str(exc))
            continue
        for sysname in e.systems():
            if (
                sysname not in s.systems
                and not ctx.sf.skipped("systems", sysname)
                and not ctx.sf.skipped("systems")
            ):
                yield ctx.problem(
                    ("expect", i),
                    f"unknown system {sysname!r} in {text!r}{suggest(sysname, ctx.live_systems())}",
                )
        for metric in e.metrics():
            if metrics is not None and metric not in metrics and metric not in EFFICIENCY_METRICS:
                yield ctx.problem(
                    ("expect", i),
                    f"metric {metric!r} is not computed by this suite"
                    f"{suggest(metric, metrics + list(EFFICIENCY_METRICS))}",
                )


def check_selection(ctx: CheckContext) -> Iterator[Problem]:
    """`--systems` / `--tasks` name systems and tasks of the suite (as a run requires).

    `--tasks` names concrete tasks, as the run selects them after expanding patterns: with `multiwoz/*`
    in the suite, `--tasks multiwoz/hotel` is a selection and `--tasks 'multiwoz/*'` is not."""
    task_names = [
        n
        for i, t in enumerate(ctx.suite.tasks)
        for n in ctx.expanded.get(i, [] if _GLOB & set(t.name) else [t.name])
    ]
    for kind, wanted, names in (
        ("systems", ctx.systems, ctx.live_systems()),
        ("tasks", ctx.tasks, task_names),
    ):
        for w in wanted or []:
            if w not in names:
                yield Problem(
                    f"--{kind}", None, "", f"names {w!r}, not in the suite {ctx.sf.path}{suggest(w, names)}"
                )


CHECKS: list[Check] = [
    check_systems,
    check_models,
    check_profile,
    check_metrics,
    check_tasks,
    check_expectations,
    check_selection,
]


def register_check(check: Check) -> Check:
    """Add a check (e.g. a preflight of weights, keys, CUDA); usable as a decorator."""
    CHECKS.append(check)
    return check


def prepare_suite(
    path: str | Path,
    overrides: dict[str, Any] | None = None,
    *,
    data_dir: str | None = None,
    systems: list[str] | None = None,
    tasks: list[str] | None = None,
) -> SuiteFile:
    """Parse a suite and make every check a run makes; raise SuiteProblems with all problems found.

    Returns the suite with task patterns (`superni/*`) expanded into one task each, as the run uses it.
    """
    sf, problems = parse_suite(path, overrides)
    if sf is not None:
        ctx = CheckContext(sf, data_dir, systems, tasks)
        for check in list(CHECKS):
            problems.extend(check(ctx))
    if problems:
        raise SuiteProblems(problems)
    assert sf is not None
    if any(_GLOB & set(t.name) for t in sf.suite.tasks):
        expanded = [
            t.model_copy(update={"name": n})
            for i, t in enumerate(sf.suite.tasks)
            for n in ctx.expanded.get(i, [])
        ]
        sf.suite = sf.suite.model_copy(update={"tasks": expanded})
    return sf


validate_suite = prepare_suite


def select(suite: Suite, systems: list[str] | None, tasks: list[str] | None) -> Suite:
    """The suite restricted to `--systems` / `--tasks` (names already checked by `prepare_suite`)."""
    update: dict[str, Any] = {}
    if systems:
        update["systems"] = {n: c for n, c in suite.systems.items() if n in systems}
    if tasks:
        update["tasks"] = [t for t in suite.tasks if t.name in tasks]
    return suite.model_copy(update=update) if update else suite
