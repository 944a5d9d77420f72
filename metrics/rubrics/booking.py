"""Code checks for the shipped demo (`demo/booking`): its world is the generator in bench/tasks/demo.py.

The demo's fares follow a known law: (39 + 0.11 km) x cabin factor x U(0.85, 1.25) per passenger, the
distance being the great circle between the two cities. For two of its 20 cities and one of its 11
airlines the record alone therefore decides the route, code and price questions; for other cities or
airlines the code cannot decide and the LLM answers.
"""

from __future__ import annotations

import re

from bench.tasks.demo import AIRLINES, CABINS, CITIES, RUBRIC, _km
from bench.types import JSON, TaskSpec
from metrics.rubrics import Check
from metrics.rubrics.common import is_text, norm

_CITY = {norm(c[0]): c for c in CITIES}
_CODE = {norm(name): code for name, code in AIRLINES}
#: The generator's fare noise band, widened by a cent for rounding.
FARE_BAND = (0.85, 1.25)
_NAME = re.compile(r"^[A-Z][A-Za-z'\- ]*$")


def cities_differ(r: JSON) -> bool | None:
    a, b = r.get("departure_city"), r.get("arrival_city")
    return None if not (is_text(a) and is_text(b)) else norm(a) != norm(b)


def flight_code_matches(r: JSON) -> bool | None:
    airline, number = r.get("airline"), r.get("flight_number")
    if not (is_text(airline) and is_text(number)) or norm(airline) not in _CODE:
        return None
    return number.strip().startswith(_CODE[norm(airline)])


def fare_law(r: JSON) -> bool | None:
    a, b = _CITY.get(norm(str(r.get("departure_city")))), _CITY.get(norm(str(r.get("arrival_city"))))
    cabin, pax, price = r.get("cabin"), r.get("passengers"), r.get("price")
    if a is None or b is None or a == b or cabin not in CABINS:
        return None
    if not isinstance(pax, int) or isinstance(pax, bool) or pax < 1:
        return None
    if not isinstance(price, int | float) or isinstance(price, bool):
        return None
    base = (39.0 + 0.11 * _km(a, b)) * CABINS[cabin] * pax
    return base * FARE_BAND[0] - 0.01 <= float(price) <= base * FARE_BAND[1] + 0.01


def names_capitalised(r: JSON) -> bool | None:
    p = r.get("lead_passenger")
    if not isinstance(p, dict) or not all(is_text(p.get(k)) for k in ("first_name", "last_name")):
        return None
    return all(_NAME.match(p[k].strip()) for k in ("first_name", "last_name"))


def checks(spec: TaskSpec) -> list[Check]:
    differ, code, price, name = RUBRIC
    return [
        Check("cities_differ", "arrival_city != departure_city", cities_differ, differ),
        Check("flight_code_matches", "flight_number starts with the airline's code (known airlines)",
              flight_code_matches, code),
        Check("fare_law", "price within the generator's band for route, cabin, passengers (known cities)",
              fare_law, price),
        Check("names_capitalised", "first and last name are capitalised words", names_capitalised, name,
              decides=False),
    ]  # fmt: skip
