"""Code checks for MultiWOZ 2.2 entities (`multiwoz/<service>`), one list per service.

Thresholds come from the Cambridge database itself (design: a rubric must not fail the dataset's own
conventions): train fares there run 3.52-75.10 pounds and journeys 17-163 minutes; every venue lies
within latitude 52.11-52.34 and longitude -0.21-0.23; phones are 11-digit UK numbers. The bounds below
are wider than the data, so they reject impossible values, not unusual ones.
"""

from __future__ import annotations

import re

from bench.tasks.multiwoz import RUBRICS
from bench.types import JSON, TaskSpec
from metrics.rubrics import Check
from metrics.rubrics.common import clock_minutes, elapsed_minutes, is_text, nonblank, norm

#: A train journey longer than this (after midnight wrap-around) is not "arriving later".
MAX_JOURNEY_MINUTES = 6 * 60
#: Fare bounds in pounds (the timetable: 3.52-75.10).
FARE_MIN, FARE_MAX = 1.0, 100.0
#: "Inside or near Cambridge, UK".
LAT_RANGE, LON_RANGE = (52.0, 52.45), (-0.35, 0.4)
CAMBRIDGE = "cambridge"

_PRICE = re.compile(r"^(\d+)\.(\d{2}) pounds$")
_DURATION = re.compile(r"^(\d+) minutes?$")
_TRAIN_ID = re.compile(r"^TR\d{4}$")
_PHONE = re.compile(r"^0\d{10}$")
_POSTCODE = re.compile(r"^[a-z]{1,2}\d[a-z\d]?\s?\d[a-z]{2}$")
_FEE = re.compile(r"^(?:free|\d+(?:\.\d{2})? pounds?)$")


def _strings(record: JSON, *keys: str) -> list[str] | None:
    """The values at `keys` when all are strings, else None (absent or mistyped: not this check's call)."""
    values = [record.get(k) for k in keys]
    return [v for v in values if is_text(v)] if all(is_text(v) for v in values) else None


# ------------------------------------------------------------------------------------------ train
def departure_differs(r: JSON) -> bool | None:
    v = _strings(r, "departure", "destination")
    return None if v is None else norm(v[0]) != norm(v[1])


def arrives_after_leaving(r: JSON) -> bool | None:
    v = _strings(r, "leaveAt", "arriveBy")
    if v is None:
        return None
    gap = elapsed_minutes(v[0], v[1])
    return gap is not None and 0 < gap <= MAX_JOURNEY_MINUTES


def duration_matches(r: JSON) -> bool | None:
    v = _strings(r, "leaveAt", "arriveBy", "duration")
    if v is None:
        return None
    m = _DURATION.match(v[2].strip())
    gap = elapsed_minutes(v[0], v[1])
    return bool(m) and gap is not None and int(m.group(1)) == gap


def fare_format_and_range(r: JSON) -> bool | None:
    v = _strings(r, "price")
    if v is None:
        return None
    m = _PRICE.match(v[0].strip())
    return bool(m) and FARE_MIN <= float(f"{m.group(1)}.{m.group(2)}") <= FARE_MAX


def train_id_format(r: JSON) -> bool | None:
    v = _strings(r, "trainID")
    return None if v is None else bool(_TRAIN_ID.match(v[0].strip()))


def clock_format(r: JSON) -> bool | None:
    v = _strings(r, "leaveAt", "arriveBy")
    return None if v is None else all(clock_minutes(t) is not None for t in v)


def cambridge_endpoint(r: JSON) -> bool | None:
    v = _strings(r, "departure", "destination")
    return None if v is None else [norm(x) for x in v].count(CAMBRIDGE) == 1


# ------------------------------------------------------------------------------------------ venues
def coordinates_near_cambridge(r: JSON) -> bool | None:
    loc = r.get("location")
    if not isinstance(loc, list) or len(loc) != 2 or not all(isinstance(x, int | float) for x in loc):
        return None
    lat, lon = float(loc[0]), float(loc[1])
    return LAT_RANGE[0] <= lat <= LAT_RANGE[1] and LON_RANGE[0] <= lon <= LON_RANGE[1]


def phone_format(r: JSON) -> bool | None:
    v = _strings(r, "phone")
    return None if v is None else bool(_PHONE.match(v[0].replace(" ", "")))


def postcode_format(r: JSON) -> bool | None:
    v = _strings(r, "postcode")
    return None if v is None else bool(_POSTCODE.match(norm(v[0])))


def room_prices(r: JSON) -> bool | None:
    price = r.get("price")
    if not isinstance(price, dict) or not price:
        return None
    amounts = []
    for kind in ("single", "double", "family"):
        if kind in price:
            text = price[kind]
            if not is_text(text) or not re.fullmatch(r"\d+", text.strip()) or int(text) <= 0:
                return False
            amounts.append(int(text))
    return amounts == sorted(amounts)


def stars_range(r: JSON) -> bool | None:
    v = _strings(r, "stars")
    return None if v is None else bool(re.fullmatch(r"[0-5]", v[0].strip()))


def fee_matches_price_range(r: JSON) -> bool | None:
    v = _strings(r, "entrance fee", "pricerange")
    if v is None:
        return None
    fee, band = norm(v[0]), norm(v[1])
    return bool(_FEE.match(fee)) and (fee == "free") == (band == "free")


def opening_hours_text(r: JSON) -> bool | None:
    v = r.get("openhours")
    if not is_text(v):
        return None
    return nonblank(v) and any(ch.isalpha() for ch in v)


# ------------------------------------------------------------------------------------------ lists
def checks(spec: TaskSpec) -> list[Check]:
    service = spec.name.split("/", 1)[1] if "/" in spec.name else ""
    q = RUBRICS.get(service, ())
    if service == "train":
        return [
            Check("departure_differs", "departure != destination", departure_differs, q[0]),
            Check(
                "arrives_after_leaving",
                f"arriveBy later than leaveAt, 1-{MAX_JOURNEY_MINUTES} min after (overnight wraps)",
                arrives_after_leaving,
                q[1],
            ),
            Check("duration_matches", '"N minutes" equal to arriveBy - leaveAt', duration_matches, q[2]),
            Check(
                "fare_format_and_range",
                f'price "N.NN pounds", {FARE_MIN:g}-{FARE_MAX:g} (the route is for the LLM)',
                fare_format_and_range,
                q[3],
                decides=False,
            ),
            Check("train_id_format", "trainID is TR + four digits", train_id_format, q[4]),
            Check("clock_format", "leaveAt and arriveBy are HH:MM (24:MM allowed)", clock_format),
            Check("cambridge_endpoint", "exactly one end of the journey is cambridge", cambridge_endpoint),
        ]
    venue = [
        Check("phone_format", "phone is an 11-digit UK number (0 + 10 digits)", phone_format),
        Check("postcode_format", "postcode has the UK shape (cb21ab)", postcode_format),
    ]
    coords = Check(
        "coordinates_near_cambridge",
        f"location within lat {LAT_RANGE}, lon {LON_RANGE}",
        coordinates_near_cambridge,
    )
    if service in ("hotel", "restaurant"):
        plausible = 1  # "Is the place a plausible hotel/restaurant ... (name, address, postcode)?"
        out = [
            Check(coords.name, coords.doc, coords.fn, q[2]),
            Check(venue[0].name, venue[0].doc, venue[0].fn, q[3]),
            Check(venue[1].name, venue[1].doc, venue[1].fn, q[plausible], decides=False),
        ]
        if service == "hotel":
            out += [
                Check(
                    "room_prices",
                    "room prices are positive whole pounds, single <= double <= family",
                    room_prices,
                    q[0],
                    decides=False,
                ),
                Check("stars_range", "stars is 0-5", stars_range),
            ]
        return out
    if service == "attraction":
        return [
            Check(coords.name, coords.doc, coords.fn, q[3]),
            Check(
                "fee_matches_price_range",
                'fee is "free" or "N[.NN] pounds"; free fee iff price range free',
                fee_matches_price_range,
                q[1],
                decides=False,
            ),
            Check(
                "opening_hours_text",
                "openhours is not blank and has words ('always' counts)",
                opening_hours_text,
                q[2],
                decides=False,
            ),
            *venue,
        ]
    return []
