"""Profiles: which concrete model serves each role (generator, dlm, optimizer, judge, scorer, embedder).

Model presets and profiles live in `systems/catalog.yaml`; a suite may add presets under `models:` and a
system may override roles under `models:`. Resolution never substitutes silently: an unknown profile,
role or preset is an error, and the resolved spec of every role is written to the run manifest.

Per-profile model resolution: a profile may declare `stand_ins`, a mapping from a preset a suite names
(say the paper's `llama-3.1-8b-4bit`) to the preset that serves it under this profile (the embedded
`smollm2-135m-instruct`). So one suite row (`models: {generator: llama-3.1-8b-4bit}`) means the paper's
model under `--profile paper` and its local stand-in under `--profile embedded`. A stand-in keeps the
paper preset's decoding settings (`sampling:`, e.g. temperature 0.7, top-p 0.9, beams 3) unless the
stand-in entry overrides them, and its resolved spec says what it stands in for (`stands_in_for`,
`paper_model`, `stand_in_note`): the manifest, the tables and report.html print it, e.g.
"LLaMA-3.1 8B (embedded: SmolLM2-135M Q4_1, T 0.7)".
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
    stand_ins: dict[str, JSON] = field(default_factory=dict)  # preset name -> stand-in entry

    def spec(self, role: str) -> JSON:
        if role not in self.roles:
            raise BenchError(
                f"profile {self.name!r} assigns no model to role {role!r} "
                f"(roles: {', '.join(sorted(self.roles)) or 'none'})"
            )
        return self.roles[role]


def _stand_in_entry(entry: Any, profile: str, name: str) -> JSON:
    """A `stand_ins` value is a preset name or {preset, sampling?, note?}."""
    if isinstance(entry, str):
        return {"preset": entry}
    if isinstance(entry, dict) and isinstance(entry.get("preset"), str):
        return dict(entry)
    raise BenchError(
        f"profile {profile!r}: stand_ins.{name} must be a preset name or a mapping with 'preset', got {entry!r}"
    )


def resolve_stand_in(name: str, entry: JSON, catalog: Catalog, profile: str) -> JSON:
    """The spec of the preset serving `name` under `profile`, with the paper preset's decoding settings."""
    original = catalog.model(name)
    entry = _stand_in_entry(entry, profile, name)
    spec = catalog.model(entry["preset"])
    sampling = {**(original.get("sampling") or {}), **(entry.get("sampling") or {})}
    if sampling:
        spec["sampling"] = sampling
    spec["stands_in_for"] = name
    spec["paper_model"] = original.get("model")
    if original.get("label"):
        spec["paper_label"] = original["label"]
    if entry.get("note"):
        spec["stand_in_note"] = str(entry["note"])
    spec["profile"] = profile
    return spec


def resolve_model(
    ref: str | JSON, catalog: Catalog, stand_ins: dict[str, JSON] | None = None, profile: str = ""
) -> JSON:
    """A role value is a preset name or an inline spec dict ({backend, model, params}).

    A preset name the profile maps in `stand_ins` resolves to its stand-in (see the module docstring).
    """
    if isinstance(ref, str):
        if stand_ins and ref in stand_ins:
            return resolve_stand_in(ref, stand_ins[ref], catalog, profile)
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
    stand_ins = dict(data.get("stand_ins") or {})
    for preset in stand_ins:
        catalog.model(preset)  # an unknown preset in stand_ins is an error, never ignored
    roles = {
        role: resolve_model(ref, catalog, stand_ins, name) for role, ref in (data.get("roles") or {}).items()
    }
    return Profile(name=name, description=data.get("description", ""), roles=roles, stand_ins=stand_ins)


def apply_overrides(
    profile: Profile, overrides: dict[str, Any], extra_models: dict[str, JSON] | None
) -> Profile:
    """A system's `models:` mapping replaces some roles for that system only."""
    if not overrides:
        return profile
    catalog = load_catalog().with_models(extra_models)
    roles = dict(profile.roles)
    for role, ref in overrides.items():
        roles[role] = resolve_model(ref, catalog, profile.stand_ins, profile.name)
    return Profile(profile.name, profile.description, roles, profile.stand_ins)


# ------------------------------------------------------------------------------ who served a row
_SETTING_WORDS = (("temperature", "T"), ("top_p", "top-p"), ("top_k", "top-k"), ("num_beams", "beams"))


def decoding_text(sampling: JSON) -> str:
    """Short decoding settings for labels: "T 0.7, top-p 0.9" (defaults such as top-k 0 left out)."""
    parts = []
    for key, word in _SETTING_WORDS:
        if sampling.get(key) is None:
            continue
        v = sampling[key]
        if (key == "top_p" and v == 1.0) or (key in ("top_k",) and v == 0) or (key == "num_beams" and v == 1):
            continue
        if key == "num_beams" and sampling.get("temperature") == 0.0:
            parts = [p for p in parts if not p.startswith("T ")]
        parts.append(f"{word} {v:g}" if isinstance(v, float) else f"{word} {v}")
    if sampling.get("steps") is not None:  # diffusion LMs: denoising steps
        parts.append(f"{sampling['steps']} steps")
    return ", ".join(parts)


def model_label(spec: JSON) -> str:
    """The preset's display label (`label:` in the catalog), else its model id or name."""
    return str(spec.get("label") or spec.get("model") or spec.get("name") or "?")


def served_text(spec: JSON, sampling: JSON | None = None) -> str:
    """Which model really served a role, in words: "embedded: SmolLM2-135M Q4_1, T 0.7" for a stand-in,
    "Llama-3.1-8B-Instruct 4-bit, T 0.7" for the model itself. `sampling` is the effective decoding
    (the preset's under the system's explicit params); default: the preset's own."""
    settings = decoding_text((spec.get("sampling") or {}) if sampling is None else sampling)
    text = model_label(spec) + (f", {settings}" if settings else "")
    if spec.get("stands_in_for"):
        text = f"{spec.get('profile') or 'stand-in'}: {text}"
    return text
