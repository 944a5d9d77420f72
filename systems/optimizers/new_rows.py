"""Joint-pool rows that pass the rubric's checks without being any reference's row.

Why: a joint pool (`vary_together`) drawn from reference rows fixes the checks across fields
(arriveBy = leaveAt + duration) but copies whole reference journeys into the records, and on
multiwoz/train it cost novelty 0.25-0.28 (docs/systems-aod.md, "One pool over the union"). The paper's
AoD claims more diversity *and* less overlap with the references, so the pool must supply rows the
references do not have.

How, generically (from the data, no per-family code): a field of the group whose every passing
reference value is a clock time ("HH:MM", `metrics.rubrics.common.clock_minutes`) is a clock field. A
new row is a passing reference row with all its clock fields shifted by one common offset: the same
journey some whole hours earlier or later (`SHIFT_STEP`). The other fields (stations, durations) keep
the row's own values, so what the checks cannot see (a 50-minute ride is a 50-minute ride whatever
the hour) stays as plausible as the reference. Every candidate is then checked by the code checks the
pool covers; only rows that pass all of them and are no reference's row are kept. A group with no
clock field gets no new rows (the caller falls back to reference rows).

Left out, on purpose: recombining the other fields across rows (a departure from one journey, a
destination from another) would pass the code checks too, but the row's duration would then belong
to another pair of stations, which the judge's plausibility question, not the code, would have to
catch.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from bench.types import TaskSpec
from metrics.rubrics.common import MINUTES_PER_DAY, clock_minutes
from systems.skeleton_prompt import hint_text

# Offsets are whole hours, at most MAX_SHIFT minutes away. Whole hours because the embedded DLM copies a
# hinted time whose minutes it has seen beside that journey: with offsets of any minute it wrote "07:05"
# as "05:07" and "14:33" as "33:14", and the pool's records passed every check 0.184 of the time against
# 0.616 with whole hours and 0.625 with the reference rows (suites/dlm_new_rows.yaml, 10 seeds x 32).
SHIFT_STEP = 60
MAX_SHIFT = 6 * 60


def clock_fields(group: Sequence[str], rows: Sequence[tuple[str, ...]]) -> list[int]:
    """Indexes of the group's fields whose every value in `rows` is an "HH:MM" clock time."""
    return [i for i in range(len(group)) if rows and all(clock_minutes(r[i]) is not None for r in rows)]


def shifted_row(
    row: tuple[str, ...], clocks: list[int], offset: int, lo: int, hi: int
) -> tuple[str, ...] | None:
    """`row` with every clock field moved by `offset` minutes ("HH:MM", as `clock_minutes` reads it),
    or None when one leaves [lo, hi]."""
    out = list(row)
    for i in clocks:
        m = clock_minutes(row[i])
        if m is None or not lo <= m + offset <= hi:
            return None
        out[i] = "{:02d}:{:02d}".format(*divmod(m + offset, 60))
    return tuple(out)


def consistent_rows(
    spec: TaskSpec,
    check_name: str,
    group: tuple[str, ...],
    base: Sequence[tuple[str, ...]],
    rng: random.Random,
    k: int,
    step: int = SHIFT_STEP,
    tries: int = 40,
) -> list[tuple[str, ...]]:
    """Up to `k` new rows of `group`, each a row of `base` (reference rows that pass the checks of
    `check_name`, "+"-joined) with its clock fields shifted together by a multiple of `step` minutes,
    passing every one of those checks, and none equal to a reference's row of the group. Seeded by
    `rng`; [] without clock fields.
    """
    from systems.optimizers.edits import covered_checks

    clocks = clock_fields(group, base)
    if not clocks:
        return []
    checks = covered_checks(spec, check_name)
    minutes = [clock_minutes(r[i]) or 0 for r in base for i in clocks]
    lo, hi = max(0, min(minutes)), min(MINUTES_PER_DAY, max(minutes))
    references = [r for r in spec.references if isinstance(r, dict)]
    known = {tuple(hint_text(r.get(f, "")) for f in group) for r in references} | set(base)
    order = list(base)
    rng.shuffle(order)
    out: list[tuple[str, ...]] = []
    for n in range(tries * k):
        row = order[n % len(order)]
        offset = rng.choice([-1, 1]) * step * rng.randint(1, MAX_SHIFT // step)
        new = shifted_row(row, clocks, offset, lo, hi)
        if new is None or new in known or new in out:
            continue
        record = dict(zip(group, new, strict=True))
        if all(c(record) is True for c in checks):
            out.append(new)
            if len(out) == k:
                break
    return out
