"""Which model really served each system of a run, in words, for the manifest, the tables and report.html.

Why a module of its own: a profile may serve a paper preset with a local stand-in (bench/profiles.py,
`stand_ins`), and that must never be silent. The runner writes `served_by` into the manifest; the table
renderers append it to every row label ("LLaMA-3.1 8B (embedded: SmolLM2-135M Q4_1, T 0.7)").

A system's *primary* roles are the ones that make its records: `ar` -> generator; `llada` -> its `role`
param (dlm); prompt optimizers -> the generator they steer plus their optimizer agent. Decoding settings
shown are the effective ones: the preset's `sampling:` under the system's explicit params.
"""

from __future__ import annotations

from typing import Any

from bench.profiles import served_text
from bench.types import JSON

_STEERED_ROLE = {"llada": "dlm", "ar": "generator"}


def primary_roles(system: Any, roles: JSON) -> list[str]:
    """The roles whose models produce the system's records (see the module docstring)."""
    role = getattr(system, "role", None)
    if isinstance(role, str):
        return [role]
    params = getattr(system, "params", None)
    if isinstance(getattr(params, "role", None), str):
        return [params.role]
    steered = _STEERED_ROLE.get(str(getattr(params, "generator", "")))
    if steered:
        return [steered] + (["optimizer"] if "optimizer" in roles else [])
    return ["generator"] if "generator" in roles else sorted(roles)[:1]


def _decoding(system: Any, spec: JSON) -> JSON:
    try:
        from bench.dry_run import effective_decoding

        out = effective_decoding(system, spec)
    except Exception:  # a system without pydantic params: the preset's own settings
        out = dict(spec.get("sampling") or {})
    steps = getattr(getattr(system, "params", None), "steps", None)
    steps = steps if steps is not None else (spec.get("params") or {}).get("steps")
    if isinstance(steps, int):
        out["steps"] = steps
    return out


def served_entry(system: Any, roles: JSON) -> JSON:
    """{"roles": [...], "text": "...", "models": {role: preset}, "stands_in_for": {role: preset}}."""
    prim = [r for r in primary_roles(system, roles) if r in roles]
    parts, stands = [], {}
    for i, role in enumerate(prim):
        spec = roles[role]
        text = served_text(spec, _decoding(system, spec) if i == 0 else None)
        parts.append(text if i == 0 else f"{role} {text}")
        if spec.get("stands_in_for"):
            stands[role] = spec["stands_in_for"]
    notes = [roles[r].get("stand_in_note") for r in prim if roles[r].get("stand_in_note")]
    return {
        "roles": prim,
        "text": "; ".join(parts),
        "models": {r: roles[r].get("name") for r in prim},
        "stands_in_for": stands,
        "notes": notes,
    }


def served_by(suite: Any, roles_by_system: JSON) -> JSON:
    """system -> served entry, for every system the run planned."""
    from bench.registry import SYSTEMS

    out: JSON = {}
    for name, roles in roles_by_system.items():
        cfg = suite.systems.get(name)
        if cfg is None:
            continue
        try:
            system = SYSTEMS.get(cfg.type)(dict(cfg.params))
        except Exception:
            continue
        out[name] = served_entry(system, roles)
    return out
