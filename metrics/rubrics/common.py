"""Small readers shared by the family checks: normalised text, clock times, money amounts."""

from __future__ import annotations

import re

from metrics.records import normalized_value

_CLOCK = re.compile(r"^([01]\d|2[0-4]):([0-5]\d)$")
MINUTES_PER_DAY = 24 * 60


def norm(value: object) -> str:
    """Case-, space- and punctuation-insensitive form used for equality between fields."""
    return normalized_value(str(value))


def clock_minutes(text: str) -> int | None:
    """Minutes after midnight of "HH:MM" (MultiWOZ writes 24:08 for 00:08 next day), None if malformed."""
    m = _CLOCK.match(text.strip())
    if not m:
        return None
    hours, minutes = int(m.group(1)), int(m.group(2))
    if hours == 24 and minutes > 59:
        return None
    return hours * 60 + minutes


def elapsed_minutes(leave: str, arrive: str) -> int | None:
    """Minutes from `leave` to `arrive`, an arrival after midnight counting as the next day."""
    a, b = clock_minutes(leave), clock_minutes(arrive)
    if a is None or b is None:
        return None
    return (b - a) % MINUTES_PER_DAY


def is_text(value: object) -> bool:
    return isinstance(value, str)


def nonblank(value: object) -> bool:
    return isinstance(value, str) and bool(norm(value))
