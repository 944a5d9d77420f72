"""Profiles: which concrete model serves each role (generator, dlm, optimizer, judge, scorer, embedder).

Model presets and profiles live in `systems/catalog.yaml`; a suite may add presets under `models:` and a
system may override roles under `models:`. Resolution never substitutes silently: an unknown profile,
role or preset is an error, and the resolved spec of every role is written to the run manifest.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from bench.errors import BenchError
from bench.registry import suggest
from bench.types import JSON

ROLES = ("generator", "dlm", "optimizer", "judge", "scorer", "embedder", "diffusion_lm", "difflm")


@dataclass
class Catalog:
    models: dict[str, JSON]
    profiles: dict[str, JSON]
    prices: dict[str, JSON] = field(default_factory=dict)

    def with_models(self, extra: dict[str, JSON] | None) -> Catalog:
        if not extra:
            return self
        models = dict(self.models)
        models.update(extra)
        return Catalog(models, self.profiles, self.prices)

    def model(self, name: str) -> JSON:
        if name not in self.models:
            raise BenchError(f"unknown model preset {name!r}{suggest(name, sorted(self.models))}")
        spec = copy.deepcopy(self.models[name])
        spec.setdefault("name", name)
        return spec


_CATALOG: Catalog | None = None


def load_catalog() -> Catalog:
    """Read systems/catalog.yaml once per process (safe YAML)."""
    global _CATALOG
    if _CATALOG is None:
        text = resources.files("systems").joinpath("catalog.yaml").read_text(encoding="utf-8")
        data = yaml.safe_load(text) or {}
        _CATALOG = Catalog(
            models=data.get("models") or {},
            profiles=data.get("profiles") or {},
            prices=data.get("prices") or {},
        )
    return _CATALOG


def profile_names() -> list[str]:
    return sorted(load_catalog().profiles)


@dataclass
class Profile:
    name: str
    description: str
    roles: dict[str, JSON]  # role -> resolved model spec (with "name")

    def spec(self, role: str) -> JSON:
        if role not in self.roles:
            raise BenchError(
                f"profile {self.name!r} assigns no model to role {role!r} "
                f"(roles: {', '.join(sorted(self.roles)) or 'none'})"
            )
        return self.roles[role]


def resolve_model(ref: str | JSON, catalog: Catalog) -> JSON:
    """A role value is a preset name or an inline spec dict ({backend, model, params})."""
    if isinstance(ref, str):
        return catalog.model(ref)
    if isinstance(ref, dict) and "backend" in ref:
        spec = copy.deepcopy(ref)
        spec.setdefault("name", f"{ref['backend']}:{ref.get('model', '')}")
        return spec
    raise BenchError(f"a model must be a preset name or a mapping with 'backend', got {ref!r}")


def resolve_profile(name: str, extra_models: dict[str, JSON] | None = None) -> Profile:
    catalog = load_catalog().with_models(extra_models)
    if name not in catalog.profiles:
        raise BenchError(f"unknown profile {name!r}{suggest(name, sorted(catalog.profiles))}")
    data = catalog.profiles[name] or {}
    roles = {role: resolve_model(ref, catalog) for role, ref in (data.get("roles") or {}).items()}
    return Profile(name=name, description=data.get("description", ""), roles=roles)


def apply_overrides(
    profile: Profile, overrides: dict[str, Any], extra_models: dict[str, JSON] | None
) -> Profile:
    """A system's `models:` mapping replaces some roles for that system only."""
    if not overrides:
        return profile
    catalog = load_catalog().with_models(extra_models)
    roles = dict(profile.roles)
    for role, ref in overrides.items():
        roles[role] = resolve_model(ref, catalog)
    return Profile(profile.name, profile.description, roles)
