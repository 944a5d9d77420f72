"""Preflight: before any cell runs, check that every model the run needs can be served here.

Why: without it a run starts every cell and each one fails on its own (API key missing, 45 s of hub
retries for weights that are not there, bitsandbytes without CUDA), so a user waits hours for a wall of
doomed cells. Preflight checks, without loading any model:

* weights: packaged GGUF / embedder packages installed, local files and directories present, hub ids in
  the local Hugging Face cache; a hub id that is not cached is "reachable" only when HF_HUB_OFFLINE is
  not set and the hub answers a 3-second TCP probe (never a download, never a retry);
* keys: the API key's environment variable is set (unless the preset points at its own `base_url`);
* CUDA: bitsandbytes quantization and fp16 LLaDA checkpoints on a device map need a CUDA GPU.

A backend class may add its own checks with a classmethod `preflight(spec) -> list[str]` (the diffusion
backends of other systems do). `bench run` stops at once with one list of problems (`--dry-run` prints
the same list); `--keep-going` runs the systems that can run and records the others as failed cells with
the preflight reason. When the hub is found unreachable, HF_HUB_OFFLINE=1 is set for the run, so no
backend spends time on hub retries.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.types import JSON

HUB_PROBE_TIMEOUT_S = 3.0
METRIC_ROLES = {"scorer": ("perplexity",), "embedder": ("similarity", "bleu", "rouge_l", "meteor")}
_TRUE = ("1", "true", "yes", "on")
_HUB_REACHABLE: dict[str, bool] = {}


@dataclass
class Problem:
    """One thing that stops a model from serving here, and who needs that model."""

    preset: str
    backend: str
    model: str
    reason: str
    needed_by: list[str] = field(default_factory=list)  # "system/role" or "(metrics)/role"

    def line(self) -> str:
        who = ", ".join(self.needed_by)
        return f"{self.preset} ({self.backend}: {self.model}): {self.reason} [needed by {who}]"


@dataclass
class PreflightReport:
    problems: list[Problem]
    blocked: dict[str, list[str]]  # system -> reasons
    metric_problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.metric_problems

    def render(self) -> str:
        """The one list `bench run` stops with and `--dry-run` prints."""
        if self.ok:
            return "preflight: every model of the run can be served here."
        lines = ["preflight: these models cannot be served here:"]
        lines += [f"  - {p.line()}" for p in self.problems + self.metric_problems]
        if self.blocked:
            lines.append(f"systems that cannot run: {', '.join(sorted(self.blocked))}")
        if self.metric_problems:
            lines.append("metrics that would fail in every cell: the scorer/embedder problems above")
        return "\n".join(lines)


def offline() -> bool:
    return any(os.environ.get(v, "").lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable() -> bool:
    """One TCP probe of the hub endpoint (DNS included) bounded by HUB_PROBE_TIMEOUT_S; memoized."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if endpoint in _HUB_REACHABLE:
        return _HUB_REACHABLE[endpoint]
    host = endpoint.split("://", 1)[-1].split("/", 1)[0]
    name, _, port = host.partition(":")
    result = [False]

    def probe() -> None:
        try:
            with socket.create_connection((name, int(port or 443)), timeout=HUB_PROBE_TIMEOUT_S):
                result[0] = True
        except OSError:
            result[0] = False

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(HUB_PROBE_TIMEOUT_S + 0.5)  # getaddrinfo ignores socket timeouts: bound it from outside
    _HUB_REACHABLE[endpoint] = bool(result[0])
    return _HUB_REACHABLE[endpoint]


def hub_cached(repo_id: str, revision: str | None = None) -> bool:
    """True when the repo's config.json is in the local Hugging Face cache (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    for name in ("config.json", "model_index.json", "modules.json"):
        try:
            hit = try_to_load_from_cache(repo_id, name, revision=revision)
        except Exception:
            hit = None
        if isinstance(hit, str):
            return True
    return False


def _weights_problem(model: str, revision: str | None = None) -> str | None:
    """Local path present, or hub id cached, or hub reachable (online only)."""
    path = Path(os.path.expanduser(model))
    if path.exists():
        return None
    if model.startswith(("/", ".", "~")) or model.endswith(".gguf"):
        return f"local weights not found: {path}"
    if hub_cached(model, revision):
        return None
    if offline():
        return "weights not in the local Hugging Face cache, and HF_HUB_OFFLINE is set (no download)"
    if not hub_reachable():
        os.environ["HF_HUB_OFFLINE"] = "1"  # the run never waits on hub retries after this
        return "weights not in the local Hugging Face cache, and the hub is unreachable"
    return None  # reachable: the backend downloads them once


def _cuda_problem(what: str) -> str | None:
    try:
        import torch
    except ImportError:
        return f"{what} needs torch with CUDA; torch is not installed"
    if not torch.cuda.is_available():
        return f"{what} needs a CUDA GPU; none is available here"
    return None


#: What transformers needs to load a packaged GGUF file (DiffLM's decoder, the `-hf` second runtime);
#: the `embedded` extra installs each (tests/test_preflight.py checks it).
GGUF_THROUGH_TRANSFORMERS = ("transformers", "gguf", "accelerate")


def _package_problem(package: str) -> str | None:
    if importlib.util.find_spec(package) is None:
        return f"needs the Python package {package.replace('_', '-')!r} (pip install it)"
    return None


def _llama_cpp(spec: JSON, params: JSON) -> list[str]:
    from systems.backends.llama_cpp import PACKAGED_CHUNKED_GGUF, PACKAGED_GGUF, packaged_gguf_problem

    out = [p for p in [_package_problem("llama_cpp")] if p]
    model = str(spec.get("model") or spec.get("path") or "")
    if model in PACKAGED_GGUF or model in PACKAGED_CHUNKED_GGUF:
        problem = packaged_gguf_problem(model)
    else:
        problem = None if Path(os.path.expanduser(model)).is_file() else f"GGUF file not found: {model}"
    return out + ([problem] if problem else [])


def _hf(spec: JSON, params: JSON) -> list[str]:
    out = [p for p in [_package_problem("transformers")] if p]
    model = str(spec.get("model") or "")
    from systems.backends.llama_cpp import PACKAGED_GGUF, packaged_gguf_problem

    if model in PACKAGED_GGUF:
        problem = packaged_gguf_problem(model) or next(
            (p for p in map(_package_problem, GGUF_THROUGH_TRANSFORMERS) if p), None
        )
    else:
        problem = _weights_problem(model, params.get("revision"))
    if problem:
        out.append(problem)
    quant = params.get("quantization")
    if quant not in (None, "none", ""):
        cuda = _cuda_problem(f"{quant} quantization (bitsandbytes)")
        if cuda:
            out.append(cuda)
        elif importlib.util.find_spec("bitsandbytes") is None:
            out.append(f"{quant} quantization needs the bitsandbytes package: pip install 'aod-bench[hf]'")
    return out


def _llada_hf(spec: JSON, params: JSON) -> list[str]:
    out = [p for p in [_package_problem("transformers")] if p]
    problem = _weights_problem(str(params.get("path") or spec.get("model") or ""), params.get("revision"))
    if problem:
        out.append(problem)
    if params.get("dtype", "float16") in ("float16", "bfloat16") and params.get("device_map", "auto"):
        cuda = _cuda_problem(f"an 8B diffusion LM at {params.get('dtype', 'float16')}")
        if cuda:
            out.append(cuda)
    return out


def _openai(spec: JSON, params: JSON) -> list[str]:
    out = [p for p in [_package_problem("openai")] if p]
    env = str(params.get("api_key_env", "OPENAI_API_KEY"))
    if params.get("base_url") is None and not os.environ.get(env):
        out.append(f"${env} is not set (API key)")
    return out


def _sentence_transformers(spec: JSON, params: JSON) -> list[str]:
    from systems.backends.sentence_embedder import PACKAGED_MODELS

    out = [p for p in [_package_problem("sentence_transformers")] if p]
    model = str(spec.get("model") or "")
    problem = (
        _package_problem(PACKAGED_MODELS[model]) if model in PACKAGED_MODELS else _weights_problem(model)
    )
    return out + ([problem] if problem else [])


def _difflm(spec: JSON, params: JSON) -> list[str]:
    """DiffLM's decoder is a frozen causal LM loaded by transformers (a packaged GGUF needs `gguf` and
    `accelerate`: transformers refuses to load a GGUF file without it)."""
    return [p for p in map(_package_problem, ("torch", *GGUF_THROUGH_TRANSFORMERS)) if p]


def _mdlm(spec: JSON, params: JSON) -> list[str]:
    return [p for p in [_package_problem("torch")] if p]  # trained locally on the task (cached)


CHECKS = {
    "llama_cpp": _llama_cpp,
    "hf": _hf,
    "llada_hf": _llada_hf,
    "openai": _openai,
    "sentence_transformers": _sentence_transformers,
    "mdlm": _mdlm,
    "difflm": _difflm,
}


def check_spec(spec: JSON) -> list[str]:
    """Everything that would stop this resolved model spec from serving here (loads nothing)."""
    backend = str(spec.get("backend") or "")
    params = dict(spec.get("params") or {})
    out: list[str] = []
    if backend in CHECKS:
        out += CHECKS[backend](spec, params)
    from bench.registry import BACKENDS

    try:
        cls = BACKENDS.get(backend)
    except Exception as exc:
        return out + [f"unknown backend {backend!r} ({exc})"]
    hook = getattr(cls, "preflight", None)
    if callable(hook):
        try:
            out += [str(p) for p in hook(spec) or []]
        except Exception as exc:
            out.append(f"its preflight check failed: {type(exc).__name__}: {exc}")
    return out


def system_roles(system_type: str, params: JSON, roles: JSON) -> list[str]:
    """Roles a system needs: its primary roles when it names them, else every role of its profile."""
    from bench.registry import SYSTEMS

    try:
        system = SYSTEMS.get(system_type)(dict(params))
    except Exception:
        return sorted(roles)
    return roles_of(system, roles)


def roles_of(system: Any, roles: JSON) -> list[str]:
    """The roles of `roles` (a profile's) that a built system uses; preflight and the dry run share it.

    A system that declares `roles` gets those; one with a single `role` (on itself or its params) gets
    its primary roles (bench.served); any other gets every role but the metric models'."""
    from bench.served import primary_roles

    declared = getattr(system, "roles", None)
    if isinstance(declared, tuple | list):
        return [r for r in declared if r in roles]
    if getattr(system, "role", None) or isinstance(getattr(system.params, "role", None), str):
        return [r for r in primary_roles(system, roles) if r in roles]
    return sorted(r for r in roles if r not in METRIC_ROLES)


def run_preflight(roles_by_system: JSON, system_types: JSON, metrics: list[str]) -> PreflightReport:
    """Check every (system, role) model and the metric models; group problems by model preset.

    roles_by_system: system -> role -> resolved spec; system_types: system -> {"type", "params"}."""
    seen: dict[str, list[str]] = {}
    by_model: dict[str, Problem] = {}
    blocked: dict[str, list[str]] = {}

    def check(spec: JSON, who: str) -> list[str]:
        key = repr(sorted((k, repr(v)) for k, v in spec.items()))
        if key not in seen:
            seen[key] = check_spec(spec)
        for reason in seen[key]:
            pkey = f"{key}\x00{reason}"
            if pkey not in by_model:
                by_model[pkey] = Problem(
                    str(spec.get("name", "")),
                    str(spec.get("backend", "")),
                    str(spec.get("model", "")),
                    reason,
                )
            by_model[pkey].needed_by.append(who)
        return seen[key]

    for system, roles in roles_by_system.items():
        cfg = system_types.get(system) or {}
        for role in system_roles(str(cfg.get("type", "")), cfg.get("params") or {}, roles):
            reasons = check(roles[role], f"{system}/{role}")
            if reasons:
                blocked.setdefault(system, []).extend(
                    f"{role} model {roles[role].get('name')}: {r}" for r in reasons
                )
    metric_keys: set[str] = set()
    for role, users in METRIC_ROLES.items():
        if not set(metrics) & set(users):
            continue
        for roles in roles_by_system.values():
            if role in roles:
                before = set(by_model)
                check(roles[role], f"(metrics)/{role}")
                metric_keys |= set(by_model) - before
                break
    problems = [p for k, p in by_model.items() if k not in metric_keys]
    metric_problems = [by_model[k] for k in metric_keys]
    for p in problems + metric_problems:
        p.needed_by = list(dict.fromkeys(p.needed_by))
    return PreflightReport(problems, blocked, metric_problems)


def preflight_suite(suite: Any, profile_name: str | None = None) -> PreflightReport:
    """Preflight of a suite under a profile without planning cells (what --dry-run prints)."""
    from bench.profiles import apply_overrides, resolve_profile

    base = resolve_profile(profile_name or suite.profile, suite.models)
    roles = {n: apply_overrides(base, c.models, suite.models).roles for n, c in suite.systems.items()}
    types = {n: {"type": c.type, "params": c.params} for n, c in suite.systems.items()}
    return run_preflight(roles, types, suite.metric_list())


class PreflightFailed(Exception):
    """The run stopped before any cell: the message is the one list of problems."""


def gate(suite: Any, roles_by_system: JSON, metrics: list[str], keep_going: bool) -> dict[str, str]:
    """The runner's preflight: raise PreflightFailed with the list, or (keep_going) return the systems
    that cannot run, each with the reason its cells are recorded as failed."""
    from bench.errors import BenchError

    types = {n: {"type": c.type, "params": c.params} for n, c in suite.systems.items()}
    report = run_preflight(roles_by_system, types, metrics)
    if report.ok:
        return {}
    if not keep_going:
        runnable = [s for s in roles_by_system if s not in report.blocked]
        hint = (
            f"--keep-going runs the {len(runnable)} system(s) that can: {', '.join(runnable)}"
            if runnable and report.blocked
            else "--keep-going runs the cells anyway"
        )
        raise BenchError(f"{report.render()}\nNo cell was run. {hint}.")
    import sys

    print(report.render() + "\n--keep-going: running the rest.", file=sys.stderr)
    return {s: "preflight: " + "; ".join(dict.fromkeys(r)) for s, r in report.blocked.items()}
