"""The world of a BFCL multi-turn item: BFCL's own Python backends (file system, math, trading, travel...).

Patil et al., "The Berkeley Function Calling Leaderboard (BFCL)", ICML 2025. The backends ship in the PyPI
package `bfcl-eval` (`eval_checker/multi_turn_eval/func_source_code/`); upstream runs a model's calls by
turning them into Python source and `eval`-ing it. We never evaluate model text: a call
`{"name", "arguments"}` is looked up as a public method of one of the item's classes and called with the
arguments as keyword arguments. Everything else follows upstream's `execute_multi_turn_func_call`:

* one fresh instance per involved class, loaded with a deep copy of the item's `initial_config` (a
  stateless class such as MathAPI gets none); a method name maps to the last involved class that has it;
* the names upstream refuses (`kill`, `exit`, `quit`, `remove`, `unlink`, `popen`, `Popen`, `run`) are
  refused with upstream's message;
* a result is the string itself, a dict as JSON (`str()` if that fails), anything else `str()`; a call that
  raises gives `"Error during execution: <message>"`, as upstream, and is flagged `raised` so metrics
  can count it as the model's failure (a call to an unknown name raises NameError upstream: same text).

Departures, so that no model output can hang or poison the harness: `exponent` and `precision` arguments
past `COST_BOUNDS` are refused (upstream would compute 9**999999999); the process-wide decimal context
and mpmath precision that MathAPI sets are restored after every call (upstream lets them leak into later
calls and items).

Why not call upstream's executor: it keeps instances in its module's globals under a name built from the
model name and item id, so two episodes of the same item in one process would share state, and it
`eval`s the model's text.
"""

from __future__ import annotations

import copy
import decimal
import importlib
import inspect
import json
from dataclasses import dataclass
from typing import Any

from bench.errors import DataError
from bench.types import JSON

#: Upstream's class -> module map (bfcl_eval.constants.executable_backend_config), for the classes of the
#: multi-turn categories; the web-search and memory classes need extra packages and are not used here.
BACKEND_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
CLASS_MODULES: dict[str, str] = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "posting_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking",
    "VehicleControlAPI": "vehicle_control",
}
STATELESS_CLASSES = frozenset({"MathAPI"})
#: Upstream refuses these method names before executing (multi_turn_utils.execute_multi_turn_func_call).
FORBIDDEN = frozenset({"kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run"})


#: Parameters whose value sets how much work a backend does (MathAPI: a big-integer power, a decimal or
#: mpmath precision); a model's absurd value (`exponent: 999999999`) would hang the process, so a call
#: past the bound is refused with an error the model sees (no ground-truth call comes near: <= 10).
COST_BOUNDS: dict[str, int] = {"exponent": 1000, "precision": 1000}


def _mpmath_dps() -> int | None:
    try:
        import mpmath
    except ImportError:
        return None
    return int(mpmath.mp.dps)


def _restore_mpmath_dps(dps: int | None) -> None:
    if dps is not None:
        import mpmath

        mpmath.mp.dps = dps


def backend_class(class_name: str) -> type:
    """The BFCL backend class (imports bfcl-eval; a missing package or class is a data error)."""
    if class_name not in CLASS_MODULES:
        raise DataError(
            f"BFCL backend class {class_name!r} is not supported (known: {', '.join(CLASS_MODULES)})"
        )
    try:
        module = importlib.import_module(f"{BACKEND_PREFIX}.{CLASS_MODULES[class_name]}")
    except ImportError as exc:
        raise DataError(
            "BFCL multi-turn tasks execute calls on bfcl-eval's backends: install the `[bfcl]` extra "
            f"(pip install --no-deps bfcl-eval); importing {class_name} failed: {exc}"
        ) from exc
    return getattr(module, class_name)


def stringify(result: Any) -> str:
    """Upstream's rendering of a call's return value (what the model is shown and what is compared)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


@dataclass(frozen=True)
class Execution:
    """One executed call: what the model sees (`result`) and whether the backend raised (`raised`)."""

    name: str
    arguments: JSON
    result: str
    raised: bool = False

    def to_json(self) -> JSON:
        return {"name": self.name, "arguments": self.arguments, "result": self.result, "raised": self.raised}


class BFCLEnvironment:
    """The backend instances of one episode; state persists across the calls and turns of the episode."""

    def __init__(self, initial_config: JSON, involved_classes: list[str]):
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, tuple[str, Any]] = {}
        for class_name in involved_classes:
            instance = backend_class(class_name)()
            if class_name not in STATELESS_CLASSES:
                instance._load_scenario(
                    copy.deepcopy((initial_config or {}).get(class_name, {})), long_context=False
                )
            self.instances[class_name] = instance
            for name, method in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not name.startswith("_"):
                    self.methods[name] = (class_name, method)

    def execute(self, name: str, arguments: JSON, args: tuple = ()) -> Execution:
        """Run one call (positional `args` only for upstream's ground-truth strings). Never raises."""
        if name in FORBIDDEN:
            return Execution(
                name, arguments, f"Error during execution: Function call {name} is not allowed.", True
            )
        if name not in self.methods:
            return Execution(name, arguments, f"Error during execution: name '{name}' is not defined", True)
        _, method = self.methods[name]
        for param, bound in COST_BOUNDS.items():
            v = arguments.get(param)
            if isinstance(v, int | float) and not isinstance(v, bool) and not abs(v) <= bound:
                msg = f"Error during execution: {param}={v!r} is outside the harness's bound (|{param}| <= {bound})"
                return Execution(name, arguments, msg, True)
        saved_decimal, saved_dps = decimal.getcontext().copy(), _mpmath_dps()
        try:  # copies: some backends edit their list arguments in place, which would rewrite the record
            result = method(*copy.deepcopy(args), **copy.deepcopy(arguments))
            text = stringify(result)
        except Exception as exc:  # the model's call was wrong (bad arguments, bad types): upstream's text
            return Execution(name, arguments, f"Error during execution: {exc}", True)
        finally:  # MathAPI sets the process-wide decimal precision and mpmath's dps: never let them leak
            decimal.setcontext(saved_decimal)
            _restore_mpmath_dps(saved_dps)
        return Execution(name, arguments, text)

    def state(self, class_name: str) -> JSON:
        """The public attributes of one instance: what BFCL's state checker compares."""
        return {k: v for k, v in vars(self.instances[class_name]).items() if not k.startswith("_")}

    def parameter_names(self, name: str) -> list[str]:
        """The method's parameter names in order (to name upstream's positional ground-truth arguments)."""
        _, method = self.methods[name]
        return [p.name for p in inspect.signature(method).parameters.values() if p.kind is not p.VAR_KEYWORD]
