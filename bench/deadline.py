"""A wall-clock deadline that model calls honour mid-generation.

The multi-turn agent loop gives each BFCL item `item_timeout_s`. Checking the clock only between
rounds lets one long generation run past it, so the loop sets a deadline for the episode, and the
backends that can stop early check it while they generate:
- llama.cpp streams and stops between tokens, beams between steps;
- transformers adds a time limit to its stopping criteria;
- the OpenAI client caps its request timeout;
- the LLaDA sampler stops between blocks.

A completion cut by the deadline carries `error` (DEADLINE_ERROR), so the call cache never keeps it and
the loop records a timeout, not a model failure. The deadline lives in a context variable: it is set and
read in the worker thread that runs the cell, and no backend signature changes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_DEADLINE: ContextVar[float | None] = ContextVar("bench_deadline", default=None)

DEADLINE_ERROR = "deadline passed mid-generation"


class DeadlinePassed(Exception):
    """Raised inside a backend's generation loop once the deadline has passed."""


@contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Calls inside the block stop generating `seconds` from now (None: no deadline). Nesting keeps
    the earlier of the two."""
    if seconds is None:
        yield
        return
    at = time.monotonic() + seconds
    outer = _DEADLINE.get()
    token = _DEADLINE.set(at if outer is None else min(at, outer))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def remaining() -> float | None:
    """Seconds left before the deadline (0 once passed), or None when there is none."""
    at = _DEADLINE.get()
    return None if at is None else max(0.0, at - time.monotonic())


def passed() -> bool:
    """Whether a deadline is set and has passed."""
    at = _DEADLINE.get()
    return at is not None and time.monotonic() >= at


def check() -> None:
    """Raise DeadlinePassed once the deadline has passed (for loops that stop by raising)."""
    if passed():
        raise DeadlinePassed(DEADLINE_ERROR)
