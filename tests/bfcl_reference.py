"""Import bfcl-eval's own AST checker (the independent reference for metrics/toolcalls.py).

Its import chain pulls `constants.model_config`, which imports every vendor SDK; that module only maps
model names to name-handling flags, so a stand-in whose every entry says "keep dots" is registered first
(/work/shared/datasets/README.md). Returns None when bfcl-eval is not installed.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _Config:
    underscore_to_dot = False


class _AnyModel(dict):
    def __missing__(self, key: str) -> _Config:
        return _Config()


def bfcl_checker() -> Any:
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        return None
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.MODEL_CONFIG_MAPPING = _AnyModel()  # type: ignore[attr-defined]
        sys.modules[name] = stand_in
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    def check(functions: list, calls: list[tuple[str, dict]], truth: list, category: str) -> bool:
        output = [{name: args} for name, args in calls]
        return bool(ast_checker(functions, output, truth, Language.PYTHON, category, "x")["valid"])

    return check
