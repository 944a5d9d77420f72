"""Importing the libraries of opt-in metrics, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from typing import Any


class MissingExtraError(ImportError):
    """An opt-in metric's library is not installed."""


def require(module: str, package: str, extra: str = "quality", metric: str = "") -> Any:
    """Import `module` or raise MissingExtraError naming the PyPI package and the aod-bench extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        who = f"metric {metric!r} needs" if metric else "this needs"
        raise MissingExtraError(
            f"{who} the package {package!r}, which is not installed: pip install 'aod-bench[{extra}]'"
        ) from exc
