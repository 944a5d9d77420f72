"""System parameters: one place that turns a suite's `params:` mapping into a validated pydantic model."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, ValidationError

from bench.errors import BenchError

P = TypeVar("P", bound=BaseModel)


def validate_params(model: type[P], params: dict | None, system: str) -> P:
    """A bad value or unknown key is a user error naming the system, never a traceback."""
    try:
        return model(**(params or {}))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<params>'}: {e['msg']}" for e in exc.errors()
        )
        raise BenchError(f"bad params for system {system!r}: {problems}") from None
