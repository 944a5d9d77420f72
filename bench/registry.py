"""One typed registry for systems, metrics, tasks and profiles.

Entries can be registered lazily as "module:attr" strings so that listing names never imports torch or
llama.cpp. Plugins add entries through the entry-point groups `aod_bench.systems` / `aod_bench.metrics`.
An unknown name fails with close matches ("unknown system 'lada'; did you mean 'llada'?").
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """Raised for an unregistered name; its message already carries the suggestions."""

    def __str__(self) -> str:  # KeyError quotes its message; we do not want that
        return str(self.args[0])


def suggest(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def load_ref(ref: str) -> Any:
    """Import "package.module:attr" (attr may be dotted)."""
    module_name, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


@dataclass
class Registry(Generic[T]):
    kind: str
    entry_point_group: str | None = None
    _entries: dict[str, T | str] = field(default_factory=dict)
    _meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    _plugins_loaded: bool = False

    def register(self, name: str, obj: T | str | None = None, **meta: Any) -> Any:
        """Register `obj` (or a lazy "module:attr") under `name`; usable as a decorator."""
        if obj is None:

            def deco(o: T) -> T:
                self.register(name, o, **meta)
                return o

            return deco
        self._entries[name] = obj
        self._meta[name] = meta
        return obj

    def _load_plugins(self) -> None:
        if self._plugins_loaded:
            return
        self._plugins_loaded = True
        load_builtins()
        if not self.entry_point_group:
            return
        for ep in metadata.entry_points(group=self.entry_point_group):
            if ep.name not in self._entries:
                self._entries[ep.name] = ep.value

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._entries)

    def meta(self, name: str) -> dict[str, Any]:
        self.get(name)  # raises with suggestions when unknown
        return self._meta.get(name, {})

    def summary(self, name: str) -> str:
        """One line describing an entry: its `summary` meta, else the first paragraph of the docstring of
        the module that defines it, read from source without importing it (no torch, no llama.cpp)."""
        self._load_plugins()
        meta = self._meta.get(name, {})
        if meta.get("summary"):
            return str(meta["summary"])
        obj = self._entries.get(name)
        doc = _module_doc(obj.partition(":")[0]) if isinstance(obj, str) else _object_doc(obj)
        return " ".join(doc.split("\n\n")[0].split())

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries

    def get(self, name: str) -> T:
        self._load_plugins()
        if name not in self._entries:
            raise UnknownNameError(f"unknown {self.kind} {name!r}{suggest(name, self.names())}")
        obj = self._entries[name]
        if isinstance(obj, str):
            obj = load_ref(obj)
            self._entries[name] = obj
        return obj  # type: ignore[return-value]

    def items(self) -> Iterator[tuple[str, T]]:
        for n in self.names():
            yield n, self.get(n)


def _module_doc(module: str) -> str:
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return ""
        with open(spec.origin, encoding="utf-8") as fh:
            return ast.get_docstring(ast.parse(fh.read())) or ""
    except (ImportError, OSError, SyntaxError, ValueError):
        return ""


def _object_doc(obj: Any) -> str:
    import inspect
    import sys

    mod = sys.modules.get(getattr(obj, "__module__", "") or "")
    return (inspect.getdoc(mod) if mod else None) or inspect.getdoc(obj) or ""


SystemFactory = Callable[..., Any]

SYSTEMS: Registry[SystemFactory] = Registry("system", "aod_bench.systems")
METRICS: Registry[Any] = Registry("metric", "aod_bench.metrics")
TASKS: Registry[Any] = Registry("task")
PROFILES: Registry[Any] = Registry("profile")
# Model runtimes: name -> class with `from_spec(spec: dict, env: BackendEnv) -> backend`.
BACKENDS: Registry[Any] = Registry("backend")

# Built-in entries are declared as lazy "module:attr" strings in these provider modules, which are
# imported on first lookup. Importing them is cheap: they only call `register` with strings.
BUILTIN_PROVIDERS = ("systems.registry", "metrics.registry", "bench.tasks.registry")


def load_builtins() -> None:
    for mod in BUILTIN_PROVIDERS:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:  # a provider package may be absent in a partial install
            if exc.name != mod and not mod.startswith(str(exc.name)):
                raise
