"""Suites: declarative YAML (safe_load only, with limits) validated by pydantic, with errors that name
file, line and key.

A suite cannot import code: systems, metrics and tasks are names looked up in registries, and model
presets are data. This module holds the schema and the first two stages of checking (YAML, schema);
`bench.checks` adds the registry and data checks, and is the one function that `validate`, `run
--dry-run` and `run` all call. Every error is a `Problem`; all of them are reported in one pass.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from bench.expect import Expectation, parse_expectation
from bench.problems import Problem, SuiteProblems, fmt_loc
from bench.registry import suggest
from bench.suite_yaml import load_yaml

# System names become directory names and expectation identifiers.
SYSTEM_NAME = re.compile(r"[A-Za-z0-9_\-]+")
MAX_NAME = 64  # a directory name per system; file systems allow 255 bytes for the whole component
MAX_SEEDS = 10_000  # seeds of one suite
MAX_SEED = 2**32  # numpy, torch and llama.cpp all accept seeds in [0, 2**32)
MAX_COUNT = 10**9  # sizes (records, references) beyond any dataset


def _system_name(name: str) -> str:
    if not SYSTEM_NAME.fullmatch(name):
        raise ValueError(f"system name {name!r} may only use letters, digits, '_' and '-'")
    if len(name) > MAX_NAME:
        raise ValueError(f"system name of {len(name)} characters is too long (at most {MAX_NAME})")
    return name


def _suite_name(name: str) -> str:
    """The default run directory is runs/<name>-<time>: the name must stay one plain path component."""
    if not name.strip():
        raise ValueError("the suite name must not be empty")
    if len(name) > 100:
        raise ValueError(f"suite name of {len(name)} characters is too long (at most 100)")
    if "/" in name or "\\" in name or name.startswith(".") or Path(name).is_absolute():
        raise ValueError(
            f"suite name {name!r} must be a plain name (no '/', '\\', no leading '.'): it names the run "
            "directory under runs/ (use --out to put a run elsewhere)"
        )
    if any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in name):
        raise ValueError("suite name holds a control character or a lone surrogate")
    return name


def _seed_count(v: int) -> int:
    if not 1 <= v <= MAX_SEEDS:
        raise ValueError(f"seeds must be a count in 1..{MAX_SEEDS} or a list of seeds")
    return v


def _seed_value(v: int) -> int:
    if not 0 <= v < MAX_SEED:
        raise ValueError(f"a seed must be in 0..{MAX_SEED - 1}")
    return v


class TaskConfig(BaseModel):
    """One task of the suite and the sizes of its seeded reference/holdout split."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        ..., max_length=200, description="task name, e.g. demo/booking, multiwoz/train, superni/task102_..."
    )
    n_references: int | None = Field(
        None, ge=1, le=MAX_COUNT, description="records a system may see (None = all left)"
    )
    n_holdout: int | None = Field(
        None, ge=1, le=MAX_COUNT, description="records kept for similarity/BLEU (None = all left)"
    )
    split_seed: int = Field(
        0, ge=0, lt=MAX_SEED, description="seed of the reference/holdout split (not the run seed)"
    )
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

    name: Annotated[str, AfterValidator(_suite_name)] = Field(
        ..., description="suite name; used in run directory names"
    )
    description: str = Field("", description="what the suite is for")
    profile: str = Field("embedded", description="role -> model mapping (bench list profiles)")
    seeds: Annotated[int, AfterValidator(_seed_count)] | list[Annotated[int, AfterValidator(_seed_value)]] = (
        Field(15, description="N (seeds 0..N-1) or an explicit list")
    )
    samples: int = Field(8, ge=1, le=100_000, description="records generated per cell")
    tasks: list[TaskConfig] = Field(..., min_length=1, description="tasks to run")
    systems: dict[Annotated[str, AfterValidator(_system_name)], SystemConfig] = Field(
        ..., min_length=1, description="name -> system config"
    )
    metrics: list[str] | None = Field(
        None, description="metric names (default: metrics.registry.DEFAULT_METRICS)"
    )
    expect: list[str] = Field(default_factory=list, description="assertions, e.g. 'ar.parse_rate > 0.3'")
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="extra model presets")
    tables: list[dict[str, Any]] | None = Field(None, description="report tables (see docs/reports.md)")
    timeout_s: float | None = Field(None, gt=0, description="per-cell wall-clock limit in seconds")
    pending: dict[str, str] = Field(
        default_factory=dict,
        description="table rows whose system is not built yet: name -> what it will be (shown as pending)",
    )
    profile_overrides: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="profile -> suite keys (seeds, samples, tasks, timeout_s) used under that profile, "
        "e.g. the paper's scale under `paper`; command-line flags still win",
    )

    @field_validator("tasks", mode="before")
    @classmethod
    def _task_strings(cls, v: Any) -> Any:
        if isinstance(v, list):
            return [{"name": t} if isinstance(t, str) else t for t in v]
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: int | list[int]) -> int | list[int]:
        if isinstance(v, list) and not v:
            raise ValueError("the seed list must not be empty")
        if isinstance(v, list) and len(v) > MAX_SEEDS:
            raise ValueError(f"at most {MAX_SEEDS} seeds")
        if isinstance(v, list) and len(set(v)) != len(v):
            raise ValueError("the seed list repeats a seed")
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


class SuiteFile:
    """A suite plus where each key came from, for error messages after validation.

    `pruned` holds the locations whose schema errors were reported and that later checks must skip (their
    values were replaced by placeholders so the rest of the suite could still be checked)."""

    def __init__(
        self, suite: Suite, path: Path, root: yaml.Node | None, pruned: set[tuple[Any, ...]] | None = None
    ):
        self.suite = suite
        self.path = path
        self.root = root
        self.pruned: set[tuple[Any, ...]] = set(pruned or ())

    def line(self, *loc: Any, key: bool = False) -> int | None:
        return _line(_key_node(self.root, loc) if key else _node_at(self.root, loc))

    def where(self, *loc: Any) -> str:
        line = self.line(*loc)
        return f"{self.path}:{line}" if line else str(self.path)

    def problem(self, loc: tuple[Any, ...], message: str, *, key: bool = False) -> Problem:
        return Problem(str(self.path), self.line(*loc, key=key), fmt_loc(loc), message)

    def skipped(self, *loc: Any) -> bool:
        """True when `loc` or a parent of it failed the schema (already reported)."""
        return any(loc[:i] in self.pruned for i in range(len(loc) + 1))


_ALLOWED_FIELDS = {
    "Suite": set(Suite.model_fields),
    "TaskConfig": set(TaskConfig.model_fields),
    "SystemConfig": set(SystemConfig.model_fields),
}


def _extra_key_hint(loc: tuple[Any, ...]) -> str:
    key = str(loc[-1])
    if len(loc) == 1:
        pool = _ALLOWED_FIELDS["Suite"]
    elif loc[0] == "tasks" and len(loc) == 3:
        pool = _ALLOWED_FIELDS["TaskConfig"]
    elif loc[0] == "systems" and len(loc) == 3:
        pool = _ALLOWED_FIELDS["SystemConfig"]
    else:
        return ""
    return suggest(key, sorted(pool))


# ------------------------------------------------------------------------------- schema, every error
_LIST_FIELDS = ("tasks", "metrics", "expect", "tables")
_MAP_FIELDS = ("systems", "models")
# placeholders for required fields whose value failed; checks skip them through SuiteFile.pruned
_PLACEHOLDERS: dict[str, Any] = {
    "name": "suite",
    "tasks": [{"name": "demo/booking"}],
    "systems": {"_": {"type": "file", "params": {"path": "-"}}},
}


def _clean_errors(errors: list[Any], data: dict[str, Any]) -> list[tuple[tuple[Any, ...], str, str]]:
    """(loc, type, msg) per error; the union member tag pydantic puts in `seeds` locations is dropped,
    keeping only the member that matches the input (a list or a count)."""
    out = []
    for err in errors:
        loc = tuple(err["loc"])
        if loc and loc[0] == "seeds" and len(loc) > 1 and isinstance(loc[1], str):
            if loc[1].startswith("list[") != isinstance(data.get("seeds"), list):
                continue
            loc = ("seeds", *loc[2:])
        if len(loc) > 2 and loc[0] == "systems" and loc[2] == "[key]":
            loc = loc[:2]
        msg = str(err["msg"]).removeprefix("Value error, ")
        if (loc, msg) not in [(e[0], e[2]) for e in out]:
            out.append((loc, str(err["type"]), msg))
    return out


def _unit(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The part of the suite dropped after an error at `loc` (one task, one system, or a whole field)."""
    if len(loc) >= 2 and loc[0] in _LIST_FIELDS and isinstance(loc[1], int):
        return loc[:2]
    if len(loc) >= 2 and loc[0] in _MAP_FIELDS:
        return loc[:2]
    return loc[:1]


def _prune(data: dict[str, Any], unit: tuple[Any, ...]) -> None:
    field = unit[0] if unit else None
    if len(unit) == 2 and field in _LIST_FIELDS and isinstance(data.get(field), list):
        # a valid placeholder keeps the other items at their indices (locations, lines) for later checks
        items = list(data[field])
        if unit[1] < len(items):
            items[unit[1]] = {"tasks": {"name": "demo/booking"}, "metrics": "parse_rate", "expect": ""}.get(
                field, {}
            )
        data[field] = items
    elif len(unit) == 2 and field in _MAP_FIELDS and isinstance(data.get(field), dict):
        data[field] = {k: v for k, v in data[field].items() if k != unit[1]}
    elif field in _PLACEHOLDERS:
        data[field] = _PLACEHOLDERS[field]
    elif field is not None:
        data.pop(field, None)


def _schema(
    data: dict[str, Any], path: Path, root: yaml.Node | None
) -> tuple[Suite | None, list[Problem], set]:
    """Validate; on errors, record each, drop the failing part and validate again, so that one pass
    finds the schema errors of every part and the rest of the suite can still be cross-checked."""
    problems: list[Problem] = []
    pruned: set[tuple[Any, ...]] = set()
    seen: set[tuple[tuple[Any, ...], str]] = set()
    work = dict(data)
    for _ in range(50):
        try:
            return Suite.model_validate(work), problems, pruned
        except ValidationError as exc:
            errors = _clean_errors(exc.errors(), work)
        progressed = False
        for loc, kind, msg in errors:
            unit = _unit(loc)
            if (loc, msg) not in seen and unit not in pruned:
                seen.add((loc, msg))
                if kind == "extra_forbidden":
                    line = _line(_key_node(root, loc))
                    msg = f"unknown key{_extra_key_hint(loc)}"
                elif kind == "missing":
                    line = _line(_node_at(root, loc[:-1]))
                    msg = "this key is required"
                else:
                    line = _line(
                        _key_node(root, loc)
                        if loc[:1] == ("systems",) and len(loc) == 2
                        else _node_at(root, loc)
                    )
                problems.append(Problem(str(path), line or 1, fmt_loc(loc), msg))
            if unit not in pruned:
                pruned.add(unit)
                _prune(work, unit)
                progressed = True
        if not progressed:
            break
    return None, problems, pruned


def parse_suite(
    path: str | Path, overrides: dict[str, Any] | None = None
) -> tuple[SuiteFile | None, list[Problem]]:
    """Read and schema-check a suite. Returns (suite file or None, problems); never raises for bad input."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, [Problem(str(path), None, "", "no such suite file")]
    except OSError as exc:
        return None, [Problem(str(path), None, "", f"cannot read the suite file: {exc.strerror or exc}")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, [Problem(str(path), line, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})")]
    loaded = load_yaml(text, str(path))
    if loaded.problems:
        return None, loaded.problems
    if not isinstance(loaded.data, dict):
        return None, [
            Problem(str(path), 1, "", "a suite must be a mapping of keys (name, tasks, systems, ...)")
        ]
    data, problem = _apply_profile_overrides(loaded.data, overrides or {})
    if problem:
        return None, [
            Problem(
                str(path),
                _line(_node_at(loaded.root, ("profile_overrides",))) or 1,
                "profile_overrides",
                problem,
            )
        ]
    suite, problems, pruned = _schema(data, path, loaded.root)
    if suite is None:
        return None, problems
    return SuiteFile(suite, path, loaded.root, pruned), problems


def load_suite(path: str | Path, overrides: dict[str, Any] | None = None) -> SuiteFile:
    """Read a suite and make every check a run makes; raises SuiteProblems listing all problems."""
    from bench.checks import prepare_suite

    return prepare_suite(path, overrides)


PROFILE_OVERRIDABLE = ("seeds", "samples", "tasks", "timeout_s", "description")


def _apply_profile_overrides(
    data: dict[str, Any], overrides: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """Suite keys, then the chosen profile's `profile_overrides` entry, then command-line overrides;
    with a problem text when the entry names a key that cannot vary by profile."""
    profile = overrides.get("profile", data.get("profile", "embedded"))
    per = data.get("profile_overrides") or {}
    chosen = per.get(profile) if isinstance(per, dict) else None
    if isinstance(chosen, dict):
        bad = sorted(set(chosen) - set(PROFILE_OVERRIDABLE))
        if bad:
            return data, (
                f"profile_overrides.{profile}: key {bad[0]!r} cannot vary by profile "
                f"(allowed: {', '.join(PROFILE_OVERRIDABLE)})"
            )
        data = {**data, **chosen}
    return {**data, **overrides}, None


__all__ = [
    "Problem",
    "Suite",
    "SuiteFile",
    "SuiteProblems",
    "SystemConfig",
    "TaskConfig",
    "load_suite",
    "parse_suite",
]


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
