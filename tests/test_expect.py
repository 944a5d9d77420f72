import math

import pytest

from bench.expect import Ref, evaluate, parse_expectation
from bench.runner import macro_lookup
from bench.store import CellKey


def test_parse_number_and_ref_forms():
    e = parse_expectation("ar.parse_rate >= 0.5")
    assert e.left == Ref("ar", "parse_rate") and e.op == ">=" and e.right == 0.5
    e = parse_expectation("aod-static[multiwoz/train].tsr < ar.tsr")
    assert e.left == Ref("aod-static", "tsr", "multiwoz/train") and e.right == Ref("ar", "tsr")


@pytest.mark.parametrize("bad", ["", "ar > 1", "ar.tsr >> 1", "ar.tsr > x", "ar.tsr 1"])
def test_unparseable(bad):
    with pytest.raises(ValueError):
        parse_expectation(bad)


def test_macro_mean_over_tasks_of_seed_means_ignoring_nan():
    cells = [
        (CellKey("a", "t1", 0), {"m": 1.0}),
        (CellKey("a", "t1", 1), {"m": 0.0}),  # t1 mean 0.5
        (CellKey("a", "t2", 0), {"m": 1.0}),
        (CellKey("a", "t2", 1), {"m": math.nan}),  # t2 mean 1.0 (NaN seed ignored)
        (CellKey("b", "t1", 0), {"m": 0.2}),
    ]
    look = macro_lookup(cells)
    assert look(Ref("a", "m")) == pytest.approx(0.75)
    assert look(Ref("a", "m", "t1")) == pytest.approx(0.5)
    assert math.isnan(look(Ref("c", "m")))
    assert evaluate(parse_expectation("a.m > b.m"), look).passed
    res = evaluate(parse_expectation("c.m > 0"), look)
    assert not res.passed and "nan" in res.detail
