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


def bfcl_multi_turn_checker() -> Any:
    """bfcl-eval's own multi-turn checker on our episode records (None when bfcl-eval is absent).

    Upstream's evaluation (`eval_runner._evaluate_single_multi_turn_entry`): an episode with a different
    number of turns than the ground truth is force-terminated (invalid); every other step's calls become
    Python call strings, empty steps are dropped, and `multi_turn_checker` re-executes them. Upstream keeps
    backend instances in its module's globals keyed by model name and item id, so each check gets a fresh
    model name and removes its instances afterwards. Returns (valid, error_type) with upstream's type names.
    """
    try:
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker as mtc
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils as mtu
    except ImportError:
        return None
    counter = [0]

    def call_text(name: str, arguments: dict) -> str:
        return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in arguments.items()) + ")"

    def check(record: dict, item_meta: dict, item_id: str) -> tuple[bool, str | None]:
        truth = item_meta["ground_truth"]
        if len(record["turns"]) != len(truth):
            return False, "multi_turn:force_terminated"
        decoded = [
            [[call_text(c["name"], c["arguments"]) for c in step["calls"]] for step in turn if step["calls"]]
            for turn in record["turns"]
        ]
        counter[0] += 1
        model = f"aodref{counter[0]}"
        entry = {
            "id": item_id,
            "initial_config": item_meta["initial_config"],
            "involved_classes": item_meta["involved_classes"],
        }
        try:
            out = mtc.multi_turn_checker(decoded, truth, entry, "multi_turn_base", model)
        finally:
            for key in [k for k in vars(mtu) if k.startswith(model)]:
                delattr(mtu, key)
        return bool(out["valid"]), out.get("error_type")

    return check
