"""reports.fmt: the one place numbers and p-values become text, for every report and benchmark table.

The expected strings are written out by hand (not produced by Python's format mini-language through the
function under test), so a change in rounding, sign or the missing mark shows up here."""

from __future__ import annotations

import math

import pytest

from reports.fmt import DASH, fmt_num, fmt_p


@pytest.mark.parametrize(
    ("x", "kwargs", "text"),
    [
        (0.12345, {"decimals": 3}, "0.123"),
        (0.12355, {"decimals": 2}, "0.12"),
        (0.25, {"decimals": 3, "sign": True}, "+0.250"),
        (-0.25, {"decimals": 3, "sign": True}, "-0.250"),
        (0.0, {"decimals": 1, "sign": True}, "+0.0"),
        (123.456, {}, "123.5"),  # no decimals given: fewer for large values
        (12.3456, {}, "12.35"),
        (0.5, {}, "0.500"),
        (None, {}, DASH),
        (math.nan, {"decimals": 3}, DASH),
        (math.inf, {"decimals": 3}, DASH),
        (None, {"decimals": 3, "missing": "-"}, "-"),
        (math.nan, {"decimals": 3, "sign": True, "missing": "-"}, "-"),
    ],
)
def test_fmt_num(x, kwargs, text):
    assert fmt_num(x, **kwargs) == text


@pytest.mark.parametrize(
    ("p", "kwargs", "text"),
    [
        (0.0123, {}, "0.012"),
        (0.0123, {"spec": ".4f"}, "0.0123"),
        (0.0123, {"spec": ".2g"}, "0.012"),
        (0.00049, {"spec": ".3g"}, "0.00049"),
        (0.0009, {"below": "0.001"}, "<0.001"),
        (0.001, {"below": "0.001"}, "0.001"),  # the floor itself is printed as a number
        (5e-5, {"spec": ".4f", "below": "1e-4"}, "<1e-4"),
        (0.0001, {"spec": ".4f", "below": "1e-4"}, "0.0001"),
        (1.0, {"spec": ".2g"}, "1"),
        (None, {}, DASH),
        (math.nan, {"below": "1e-4"}, DASH),
        (math.nan, {"spec": ".3g", "missing": "-"}, "-"),
    ],
)
def test_fmt_p(p, kwargs, text):
    assert fmt_p(p, **kwargs) == text
