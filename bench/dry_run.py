"""`bench run SUITE --dry-run`: the resolved plan (every system, role, model, backend and setting), with the
estimated number of calls, tokens and, for API models, dollars. Loads no model.

Why estimates come from the systems themselves: an `ar`-family system builds its real prompts from the
task (instruction + schema + few-shot references), so the prompt size is measured, not guessed; only the
chars-per-token ratio is a rule of thumb (`CHARS_PER_TOKEN`). Outputs are estimated from the size of the
task's reference records, with the `max_tokens` ceiling shown as the upper bound. A system type that
spends calls differently (agents, optimizers) can declare `plan_calls(n_samples) -> {role: calls}`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bench.preflight import check_spec, roles_of
from bench.profiles import Profile, apply_overrides, resolve_profile
from bench.registry import SYSTEMS
from bench.types import JSON

CHARS_PER_TOKEN = 4.0  # English BPE rule of thumb; the real count depends on the tokenizer
DECODING_KEYS = ("temperature", "top_p", "top_k", "num_beams", "max_tokens", "repeat_penalty")
RUNTIME_HIDDEN = ("chat_template_kwargs",)
METRIC_ROLES = {"scorer": ("perplexity",), "embedder": ("similarity", "bleu", "rouge_l", "meteor")}
FALLBACK_PROMPT_CHARS = 2000
FALLBACK_RECORD_CHARS = 300


@dataclass
class PlanRow:
    """One (system, role) line of the plan; `calls`/tokens are totals over all cells of the system."""

    system: str
    system_type: str
    role: str
    preset: str
    backend: str
    model: str
    settings: str
    calls: int | None
    tokens_in: float | None
    tokens_out: float | None
    tokens_out_max: float | None
    cost_usd: float | None = None
    cost_usd_max: float | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class Plan:
    suite: str
    profile: str
    profile_description: str
    tasks: list[str]
    seeds: int
    samples: int
    rows: list[PlanRow]
    notes: list[str] = field(default_factory=list)

    @property
    def cells_per_system(self) -> int:
        return len(self.tasks) * self.seeds


def effective_decoding(system: Any, spec: JSON) -> JSON:
    """Decoding settings a role will use: the preset's `sampling` under the system's explicit params."""
    params = getattr(system, "params", None)
    explicit: set[str] = set(getattr(params, "model_fields_set", set()) or set())
    values = params.model_dump() if params is not None and hasattr(params, "model_dump") else {}
    preset = dict(spec.get("sampling") or {})
    out = {k: values[k] for k in DECODING_KEYS if k in values}
    for k, v in preset.items():
        if k not in explicit:
            out[k] = v
    return out


def _fmt_settings(spec: JSON, decoding: JSON, extra: JSON) -> str:
    runtime = {k: v for k, v in (spec.get("params") or {}).items() if k not in RUNTIME_HIDDEN}
    parts = [f"{k}={v}" for k, v in runtime.items()]
    parts += [f"{k}={v}" for k, v in {**decoding, **extra}.items()]
    return " ".join(parts)


def _expand_tasks(names: list[str]) -> list[str]:
    try:
        from bench.tasks.loading import expand_task_pattern
    except ImportError:
        return names
    out: list[str] = []
    for n in names:
        try:
            out.extend(expand_task_pattern(n))
        except Exception:
            out.append(n)
    return out


def _task_specs(suite: Any) -> tuple[dict[str, Any], list[str]]:
    """TaskSpecs of the suite's tasks (data files only, never a model); notes for those that fail."""
    specs: dict[str, Any] = {}
    notes: list[str] = []
    try:
        from bench.tasks.loading import load_task
    except ImportError:
        return specs, ["tasks cannot be loaded here: sizes are rough defaults"]
    for t in suite.tasks:
        for name in _expand_tasks([t.name]):
            try:
                specs[name] = load_task(
                    name,
                    n_references=t.n_references,
                    n_holdout=t.n_holdout,
                    split_seed=t.split_seed,
                    options=t.options,
                )
            except Exception as exc:
                notes.append(f"task {name}: not loadable here ({exc}); its sizes use rough defaults")
                specs[name] = None
    return specs, notes


def _record_chars(spec: Any) -> float:
    import json

    if spec is None or not spec.references:
        return FALLBACK_RECORD_CHARS
    refs = spec.references[:64]
    return sum(len(json.dumps(r, ensure_ascii=False, separators=(", ", ": "))) for r in refs) / len(refs)


def _prompt_chars(system: Any, spec: Any, samples: int) -> float | None:
    """Mean characters of the real prompts the system would send (None if it cannot tell)."""
    if spec is None:
        return FALLBACK_PROMPT_CHARS if hasattr(system, "build_requests") else None
    if not hasattr(system, "build_requests"):
        return None
    requests, _ = system.build_requests(spec, min(samples, 8), 0)
    return sum(sum(len(c) for _, c in r.messages) for r in requests) / max(1, len(requests))


def _cost(spec: JSON, tokens_in: float | None, tokens_out: float | None) -> float | None:
    if spec.get("backend") != "openai" or tokens_in is None or tokens_out is None:
        return None
    from systems.backends.openai_api import lookup_price

    price = lookup_price(spec)
    return price.cost(int(tokens_in), int(tokens_out)) if price else None


def _max_tokens(decoding: JSON, specs: list[Any]) -> int:
    """The decoding's max_tokens; None means "from the task" (systems/gen_limits.py): their mean."""
    if decoding.get("max_tokens") is not None:
        return int(decoding["max_tokens"])
    from systems.gen_limits import task_max_tokens

    limits = [task_max_tokens(s) for s in specs if s is not None]
    if "max_tokens" in decoding:
        decoding["max_tokens"] = "task:" + "/".join(str(x) for x in limits)
    return round(sum(limits) / len(limits)) if limits else 256


def _availability(spec: JSON) -> list[str]:
    """What would stop this model from running here: the preflight's checks (bench/preflight.py)."""
    return check_spec(spec)


def build_plan(suite: Any, profile_name: str | None = None) -> Plan:
    """Resolve the suite under a profile into plan rows; reads task files, loads no model."""
    profile_name = profile_name or suite.profile
    base = resolve_profile(profile_name, suite.models)
    specs, notes = _task_specs(suite)
    tasks = list(specs)
    seeds = len(suite.seed_list())
    n = suite.samples
    cells = len(tasks) * seeds
    rows: list[PlanRow] = []
    for sys_name, cfg in suite.systems.items():
        profile = apply_overrides(base, cfg.models, suite.models)
        system = SYSTEMS.get(cfg.type)(dict(cfg.params))
        per_cell_calls: dict[str, int] | None = None
        if hasattr(system, "plan_calls"):
            per_cell_calls = dict(system.plan_calls(n))
        elif hasattr(system, "build_requests"):
            per_cell_calls = {getattr(system, "role", "generator"): n}
        roles = list(per_cell_calls) if per_cell_calls else roles_of(system, profile.roles)
        if not roles:  # a system that loads no model (e.g. `file`) still gets its line in the plan
            rows.append(
                PlanRow(
                    sys_name, cfg.type, "-", "-", "-", "-", "no model: " + cfg.type, None, None, None, None
                )
            )
        for role in roles:
            spec = profile.spec(role)
            decoding = effective_decoding(system, spec)
            extra: JSON = {}
            if getattr(system, "grammar", False) and hasattr(system, "limits"):
                lim = system.limits()
                extra = {
                    "grammar": "json_schema",
                    "max_string_chars": lim.max_string_chars,
                    "max_items": lim.max_items,
                    "ascii_strings": lim.ascii_strings,
                }
            calls = per_cell_calls.get(role) * cells if per_cell_calls and role in per_cell_calls else None
            tin = tout = tmax = None
            if calls is not None:
                chars = [_prompt_chars(system, specs[t], n) for t in tasks]
                if all(c is not None for c in chars) and chars:
                    tin = sum(chars) / len(chars) / CHARS_PER_TOKEN * calls  # type: ignore[arg-type]
                out_chars = sum(_record_chars(specs[t]) for t in tasks) / max(1, len(tasks))
                max_tokens = _max_tokens(decoding, [specs[t] for t in tasks])
                tout = min(out_chars / CHARS_PER_TOKEN, max_tokens) * calls
                tmax = max_tokens * calls
            rows.append(
                PlanRow(
                    system=sys_name,
                    system_type=cfg.type,
                    role=role,
                    preset=str(spec.get("name", "")),
                    backend=str(spec.get("backend", "")),
                    model=str(spec.get("model", "")),
                    settings=_fmt_settings(spec, decoding, extra),
                    calls=calls,
                    tokens_in=tin,
                    tokens_out=tout,
                    tokens_out_max=tmax,
                    cost_usd=_cost(spec, tin, tout),
                    cost_usd_max=_cost(spec, tin, tmax),
                    notes=_availability(spec),
                )
            )
    rows += _metric_rows(suite, base, tasks, specs, cells * len(suite.systems), n)
    return Plan(suite.name, profile_name, base.description, tasks, seeds, n, rows, notes)


def _metric_rows(
    suite: Any, profile: Profile, tasks: list[str], specs: dict[str, Any], cells: int, n: int
) -> list[PlanRow]:
    metrics = set(suite.metric_list())
    rows = []
    out_chars = sum(_record_chars(specs[t]) for t in tasks) / max(1, len(tasks))
    for role, users in METRIC_ROLES.items():
        used = sorted(metrics & set(users))
        if not used or role not in profile.roles:
            continue
        spec = profile.spec(role)
        calls = cells * n  # one scored / embedded text per generated record (upper bound: parsed ones only)
        rows.append(
            PlanRow(
                system="(metrics)",
                system_type=",".join(used),
                role=role,
                preset=str(spec.get("name", "")),
                backend=str(spec.get("backend", "")),
                model=str(spec.get("model", "")),
                settings=_fmt_settings(spec, {}, {}),
                calls=calls,
                tokens_in=out_chars / CHARS_PER_TOKEN * calls,
                tokens_out=0,
                tokens_out_max=0,
                notes=_availability(spec),
            )
        )
    return rows


# ------------------------------------------------------------------------------------------ render
def _num(x: float | None) -> str:
    if x is None:
        return "?"
    if x >= 1e6:
        return f"{x / 1e6:.1f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"


def _usd(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return "-"
    return f"${lo:,.2f} (max ${hi:,.2f})" if hi is not None and not math.isclose(lo, hi) else f"${lo:,.2f}"


def render_plan(plan: Plan) -> str:
    """A fixed-width text table; settings last so long lines stay readable."""
    head = [
        f"dry run: suite {plan.suite!r}, profile {plan.profile!r} ({plan.profile_description})",
        f"{len(plan.tasks)} task(s) x {plan.seeds} seed(s) = {plan.cells_per_system} cells per system, "
        f"{plan.samples} samples per cell; nothing was loaded. Tokens ~ chars/{CHARS_PER_TOKEN:g}.",
        "",
    ]
    cols = [
        "system",
        "type",
        "role",
        "preset",
        "backend",
        "model",
        "calls",
        "tokens in",
        "tokens out (max)",
        "cost",
        "settings",
    ]
    table = [
        [
            r.system, r.system_type, r.role, r.preset, r.backend, r.model, _num(r.calls), _num(r.tokens_in),
            f"{_num(r.tokens_out)} ({_num(r.tokens_out_max)})", _usd(r.cost_usd, r.cost_usd_max), r.settings,
        ]
        for r in plan.rows
    ]  # fmt: skip
    widths = [max(len(c), *(len(row[i]) for row in table)) if table else len(c) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in table:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    total_cost = sum(r.cost_usd or 0.0 for r in plan.rows)
    total_max = sum(r.cost_usd_max or 0.0 for r in plan.rows)
    total_calls = sum(r.calls or 0 for r in plan.rows if r.system != "(metrics)")
    tail = ["", f"model calls: {total_calls:,}; API cost: {_usd(total_cost, total_max)}"]
    notes = [f"  {r.system}/{r.role} ({r.preset}): {n}" for r in plan.rows for n in r.notes] + [
        f"  {n}" for n in plan.notes
    ]
    if notes:
        tail += ["", "would not run here as is:" if any(r.notes for r in plan.rows) else "notes:", *notes]
    return "\n".join(head + lines + tail)


def describe_plan(suite: Any, profile_name: str | None = None) -> str:
    """The text `bench run SUITE --dry-run` prints: the plan, then the preflight list a run stops with."""
    from bench.preflight import preflight_suite

    return (
        render_plan(build_plan(suite, profile_name)) + "\n\n" + preflight_suite(suite, profile_name).render()
    )
