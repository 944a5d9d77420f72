"""Suites: declarative YAML (safe_load only) validated by pydantic, with errors that name file, line, key.

A suite cannot import code: systems, metrics and tasks are names looked up in registries, and model
presets are data. Every error message points at the offending key and suggests the closest valid name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bench.errors import BenchError, SuiteError
from bench.expect import Expectation, parse_expectation
from bench.registry import METRICS, SYSTEMS, UnknownNameError, suggest

# System names become directory names and expectation identifiers.
SYSTEM_NAME = re.compile(r"[A-Za-z0-9_\-]+")


class TaskConfig(BaseModel):
    """One task of the suite and the sizes of its seeded reference/holdout split."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="task name, e.g. demo/booking, multiwoz/train, superni/task102_...")
    n_references: int | None = Field(None, ge=1, description="records a system may see (None = all left)")
    n_holdout: int | None = Field(
        None, ge=1, description="records kept for similarity/BLEU (None = all left)"
    )
    split_seed: int = Field(0, description="seed of the reference/holdout split (not the run seed)")
    options: dict[str, Any] = Field(default_factory=dict, description="task-family specific options")


class SystemConfig(BaseModel):
    """A system under evaluation: its registered type, its params, and optional role->model overrides."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(..., description="registered system type (bench list systems)")
    params: dict[str, Any] = Field(default_factory=dict, description="system parameters")
    models: dict[str, Any] = Field(default_factory=dict, description="role -> model preset or inline spec")
    description: str | None = Field(None, description="free text shown in reports")


class Suite(BaseModel):
    """A whole evaluation: systems x tasks x seeds, the metrics to compute and expectations to check."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="suite name; used in run directory names")
    description: str = Field("", description="what the suite is for")
    profile: str = Field("embedded", description="role -> model mapping (bench list profiles)")
    seeds: int | list[int] = Field(15, description="N (seeds 0..N-1) or an explicit list")
    samples: int = Field(8, ge=1, description="records generated per cell")
    tasks: list[TaskConfig] = Field(..., min_length=1, description="tasks to run")
    systems: dict[str, SystemConfig] = Field(..., min_length=1, description="name -> system config")
    metrics: list[str] | None = Field(
        None, description="metric names (default: metrics.registry.DEFAULT_METRICS)"
    )
    expect: list[str] = Field(default_factory=list, description="assertions, e.g. 'ar.parse_rate > 0.3'")
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="extra model presets")
    tables: list[dict[str, Any]] | None = Field(None, description="report tables (see docs/reports.md)")
    timeout_s: float | None = Field(None, gt=0, description="per-cell wall-clock limit in seconds")

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_strings(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"name": t} if isinstance(t, str) else t for t in v]
        return v

    @field_validator("systems")
    @classmethod
    def _system_names(cls, v: dict[str, SystemConfig]) -> dict[str, SystemConfig]:
        for name in v:
            if not SYSTEM_NAME.fullmatch(name):
                raise ValueError(f"system name {name!r} may only use letters, digits, '_' and '-'")
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, int) and v < 1:
            raise ValueError("seeds must be >= 1")
        if isinstance(v, list) and (not v or len(set(v)) != len(v)):
            raise ValueError("seed list must be non-empty and without repeats")
        return v

    def seed_list(self) -> list[int]:
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)

    def metric_list(self) -> list[str]:
        if self.metrics is not None:
            return list(self.metrics)
        from metrics.registry import DEFAULT_METRICS

        return list(DEFAULT_METRICS)

    def expectations(self) -> list[Expectation]:
        return [parse_expectation(e) for e in self.expect]


# --------------------------------------------------------------------------------- YAML positions
def _node_at(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """Walk a composed YAML node tree along a pydantic error location; return the deepest node found."""
    cur = node
    for part in loc:
        if isinstance(cur, yaml.MappingNode):
            nxt = None
            for k, v in cur.value:
                if str(k.value) == str(part):
                    nxt = v
                    break
            if nxt is None:
                # the key itself is the problem (unknown/extra key): point at the key node
                for k, _ in cur.value:
                    if str(k.value) == str(part):
                        return k
                return cur
            cur = nxt
        elif isinstance(cur, yaml.SequenceNode) and isinstance(part, int) and part < len(cur.value):
            cur = cur.value[part]
        else:
            return cur
    return cur


def _key_node(node: yaml.Node | None, loc: tuple[Any, ...]) -> yaml.Node | None:
    """For 'extra key' errors the node to point at is the key, not its value."""
    if not loc:
        return node
    parent = _node_at(node, loc[:-1])
    if isinstance(parent, yaml.MappingNode):
        for k, _ in parent.value:
            if str(k.value) == str(loc[-1]):
                return k
    return _node_at(node, loc)


def _line(node: yaml.Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _fmt_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top>"


class SuiteFile:
    """A suite plus where each key came from, for error messages after validation."""

    def __init__(self, suite: Suite, path: Path, root: yaml.Node | None):
        self.suite = suite
        self.path = path
        self.root = root

    def where(self, *loc: Any) -> str:
        line = _line(_node_at(self.root, loc))
        return f"{self.path}:{line}" if line else str(self.path)


_ALLOWED_FIELDS = {
    "Suite": set(Suite.model_fields),
    "TaskConfig": set(TaskConfig.model_fields),
    "SystemConfig": set(SystemConfig.model_fields),
}


def _extra_key_hint(loc: tuple[Any, ...]) -> str:
    key = str(loc[-1])
    if len(loc) == 1:
        pool = _ALLOWED_FIELDS["Suite"]
    elif loc[0] == "tasks":
        pool = _ALLOWED_FIELDS["TaskConfig"]
    elif loc[0] == "systems":
        pool = _ALLOWED_FIELDS["SystemConfig"]
    else:
        return ""
    return suggest(key, sorted(pool))


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> SuiteFile:
    """Read, validate and cross-check a suite file. Raises SuiteError with file:line and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise SuiteError(f"{path}: no such suite file") from exc
    except UnicodeDecodeError as exc:
        raise SuiteError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SuiteError(f"{where}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{path}:1: a suite must be a mapping of keys (name, tasks, systems, ...)")
    data = {**data, **(overrides or {})}
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            line = _line(_key_node(root, loc))
            msg = f"unknown key {_fmt_loc(loc)!r}{_extra_key_hint(loc)}"
        else:
            line = _line(_node_at(root, loc))
            msg = f"key {_fmt_loc(loc)!r}: {err['msg']}"
        more = f" (and {len(exc.errors()) - 1} more problem(s))" if len(exc.errors()) > 1 else ""
        raise SuiteError(f"{path}:{line or 1}: {msg}{more}") from None
    sf = SuiteFile(suite, path, root)
    _cross_check(sf)
    return sf


def _cross_check(sf: SuiteFile) -> None:
    """Names that must exist in registries: system types, metrics, tasks, profile; expectations parse."""
    s = sf.suite
    for name, cfg in s.systems.items():
        try:
            SYSTEMS.get(cfg.type)(cfg.params)  # constructing a system only validates its params
        except BenchError as exc:
            raise SuiteError(
                f"{sf.where('systems', name, 'params')}: key 'systems.{name}.params': {exc}"
            ) from None
        except UnknownNameError as exc:
            raise SuiteError(
                f"{sf.where('systems', name, 'type')}: key 'systems.{name}.type': {exc}"
            ) from None
        except ImportError as exc:
            raise SuiteError(
                f"{sf.where('systems', name, 'type')}: system type {cfg.type!r} cannot be loaded here: {exc}"
            ) from None
    for i, metric in enumerate(s.metric_list()):
        if metric not in METRICS:
            raise SuiteError(
                f"{sf.where('metrics', i)}: key 'metrics[{i}]': unknown metric {metric!r}"
                f"{suggest(metric, METRICS.names())}"
            )
    for i, t in enumerate(s.tasks):
        try:
            check_task_name(t.name)
        except UnknownNameError as exc:
            raise SuiteError(f"{sf.where('tasks', i, 'name')}: key 'tasks[{i}].name': {exc}") from None
    from bench.profiles import profile_names

    if s.profile not in profile_names():
        raise SuiteError(
            f"{sf.where('profile')}: key 'profile': unknown profile {s.profile!r}"
            f"{suggest(s.profile, profile_names())}"
        )
    for i, text in enumerate(s.expect):
        try:
            e = parse_expectation(text)
        except ValueError as exc:
            raise SuiteError(f"{sf.where('expect', i)}: key 'expect[{i}]': {exc}") from None
        for sysname in e.systems():
            if sysname not in s.systems:
                raise SuiteError(
                    f"{sf.where('expect', i)}: key 'expect[{i}]': unknown system {sysname!r} in "
                    f"{text!r}{suggest(sysname, sorted(s.systems))}"
                )
        for metric in e.metrics():
            if metric not in s.metric_list() and metric not in EFFICIENCY_METRICS:
                raise SuiteError(
                    f"{sf.where('expect', i)}: key 'expect[{i}]': metric {metric!r} is not computed by this "
                    f"suite{suggest(metric, s.metric_list() + list(EFFICIENCY_METRICS))}"
                )


def check_task_name(name: str) -> None:
    """A task name must resolve to a registered loader (members of families need the data dir later)."""
    from bench.tasks import resolve_family

    resolve_family(name)


# Metrics the runner derives from usage for every cell (not registered metric functions).
EFFICIENCY_METRICS = (
    "seconds",
    "records_per_s",
    "generator_calls",
    "agent_calls",
    "judge_calls",
    "tokens_in",
    "tokens_out",
    "nfe",
    "cost_usd",
)
