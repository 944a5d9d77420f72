"""The demo dataset that ships inside the package, so the quickstart needs no data dir at all.

`demo/booking`: 48 flight bookings (departure_city, arrival_city, date, airline, flight_number, cabin,
passengers, lead_passenger{first_name, last_name}, price in EUR) with a hand-written schema that uses
what derived schemas avoid (`format: date`, patterns, bounds), so the quickstart exercises them too.

The records are made by `booking_records()` from a fixed seed: a great-circle distance between two
European cities sets a plausible fare, scaled by cabin and passengers. `python -m bench.tasks.demo`
rewrites `bench/data/demo/booking.jsonl` and `booking.schema.json`; a test checks that the shipped files
are byte-identical to what the generator makes, so they are never edited by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from bench.errors import DataError
from bench.types import JSON

from .base import SourceFile, TaskSource, check_options, loads_jsonl, loads_lenient

SEED = 20260301
N_BOOKINGS = 48
DEMO_PACKAGE_DIR = ("data", "demo")

# (city, latitude, longitude)
CITIES = (
    ("Amsterdam", 52.37, 4.90),
    ("Athens", 37.98, 23.73),
    ("Barcelona", 41.39, 2.17),
    ("Berlin", 52.52, 13.40),
    ("Dublin", 53.35, -6.26),
    ("Edinburgh", 55.95, -3.19),
    ("Helsinki", 60.17, 24.94),
    ("Lisbon", 38.72, -9.14),
    ("London", 51.51, -0.13),
    ("Madrid", 40.42, -3.70),
    ("Milan", 45.46, 9.19),
    ("Munich", 48.14, 11.58),
    ("Oslo", 59.91, 10.75),
    ("Paris", 48.86, 2.35),
    ("Prague", 50.08, 14.44),
    ("Rome", 41.90, 12.50),
    ("Stockholm", 59.33, 18.07),
    ("Vienna", 48.21, 16.37),
    ("Warsaw", 52.23, 21.01),
    ("Zurich", 47.38, 8.54),
)
AIRLINES = (
    ("Aer Lingus", "EI"),
    ("Air France", "AF"),
    ("British Airways", "BA"),
    ("Finnair", "AY"),
    ("Iberia", "IB"),
    ("KLM", "KL"),
    ("Lufthansa", "LH"),
    ("SAS", "SK"),
    ("Swiss", "LX"),
    ("TAP Air Portugal", "TP"),
)
CABINS = {"economy": 1.0, "premium_economy": 1.6, "business": 3.2, "first": 5.5}
CABIN_WEIGHTS = (60, 20, 15, 5)
FIRST_NAMES = (
    "Amelia", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas",
    "Katarzyna", "Luca", "Maja", "Nils", "Olivia", "Pedro", "Rosa", "Sven", "Tereza", "Yusuf",
)  # fmt: skip
LAST_NAMES = (
    "Andersen", "Bauer", "Costa", "Dubois", "Eriksson", "Fischer", "Garcia", "Horvath", "Ivanova",
    "Jansen", "Kowalski", "Lombardi", "Moreau", "Novak", "O'Brien", "Petrov", "Rossi", "Schmidt",
)  # fmt: skip

BOOKING_SCHEMA: JSON = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Flight booking",
    "type": "object",
    "properties": {
        "departure_city": {"type": "string", "minLength": 1},
        "arrival_city": {"type": "string", "minLength": 1},
        "date": {"type": "string", "format": "date"},
        "airline": {"type": "string", "minLength": 1},
        "flight_number": {"type": "string", "pattern": "^[A-Z0-9]{2}[0-9]{1,4}$"},
        "cabin": {"type": "string", "enum": list(CABINS)},
        "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
        "lead_passenger": {
            "type": "object",
            "properties": {
                "first_name": {"type": "string", "minLength": 1},
                "last_name": {"type": "string", "minLength": 1},
            },
            "required": ["first_name", "last_name"],
            "additionalProperties": False,
        },
        "price": {"type": "number", "exclusiveMinimum": 0},
    },
    "required": [
        "departure_city",
        "arrival_city",
        "date",
        "airline",
        "flight_number",
        "cabin",
        "passengers",
        "lead_passenger",
        "price",
    ],
    "additionalProperties": False,
}

INSTRUCTION = (
    "Generate one flight booking for a trip between two European cities as one JSON object: departure "
    "and arrival city, travel date (YYYY-MM-DD), airline and its flight number, cabin class, number of "
    "passengers, the lead passenger's first and last name, and the total price in euros."
)
RUBRIC = (
    "Is the arrival city different from the departure city?",
    "Does the flight number start with the airline's two-letter code?",
    "Is the total price plausible for the route, the cabin class and the number of passengers?",
    "Is the lead passenger's name a plausible person's name?",
)


def _km(a: tuple[str, float, float], b: tuple[str, float, float]) -> float:
    """Great-circle distance (haversine, Earth radius 6371 km)."""
    lat1, lon1, lat2, lon2 = map(math.radians, (a[1], a[2], b[1], b[2]))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def booking_records(seed: int = SEED, n: int = N_BOOKINGS) -> list[JSON]:
    """The demo bookings: deterministic in `seed`, every one valid against BOOKING_SCHEMA."""
    rng = random.Random(seed)
    start = dt.date(2026, 1, 1)
    records = []
    for _ in range(n):
        dep, arr = rng.sample(CITIES, 2)
        airline, code = rng.choice(AIRLINES)
        cabin = rng.choices(list(CABINS), weights=CABIN_WEIGHTS)[0]
        passengers = rng.choices(range(1, 7), weights=(40, 30, 10, 10, 6, 4))[0]
        fare = (39.0 + 0.11 * _km(dep, arr)) * CABINS[cabin] * rng.uniform(0.85, 1.25)
        records.append(
            {
                "departure_city": dep[0],
                "arrival_city": arr[0],
                "date": (start + dt.timedelta(days=rng.randrange(365))).isoformat(),
                "airline": airline,
                "flight_number": f"{code}{rng.randrange(100, 9999)}",
                "cabin": cabin,
                "passengers": passengers,
                "lead_passenger": {
                    "first_name": rng.choice(FIRST_NAMES),
                    "last_name": rng.choice(LAST_NAMES),
                },
                "price": round(fare * passengers, 2),
            }
        )
    return records


def render_files() -> dict[str, bytes]:
    """The exact bytes of the shipped demo files, by file name."""
    jsonl = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in booking_records())
    schema = json.dumps(BOOKING_SCHEMA, indent=2, ensure_ascii=False) + "\n"
    return {"booking.jsonl": jsonl.encode(), "booking.schema.json": schema.encode()}


def write_files(dest: Path | None = None) -> list[Path]:
    """Rewrite the demo files (into the package's data/demo unless `dest` is given)."""
    dest = dest or Path(__file__).resolve().parents[1].joinpath(*DEMO_PACKAGE_DIR)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name, data in render_files().items():
        (dest / name).write_bytes(data)
        written.append(dest / name)
    return written


def _packaged(name: str) -> SourceFile:
    res = resources.files("bench").joinpath(*DEMO_PACKAGE_DIR, name)
    if not res.is_file():
        raise DataError(f"demo file {name} is missing from the installed package (reinstall aod-bench)")
    return SourceFile(f"demo/{name}", res.read_bytes())


@dataclass(frozen=True)
class DemoTask:
    """Loader for `demo/<name>`: records and schema come from package resources, not a data dir."""

    name: str
    title: str
    instruction: str
    rubric: tuple[str, ...]
    family: str = "demo"
    version: str = "1"
    needs_data_dir: bool = False

    @property
    def options_doc(self) -> dict[str, str]:
        return {}

    def variants(self, data_dir: Path | None) -> list[str]:
        return [self.name]

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        check_options(f"demo/{self.name}", options, self.options_doc)
        records_file = _packaged(f"{self.name}.jsonl")
        schema_file = _packaged(f"{self.name}.schema.json")
        return TaskSource(
            records=loads_jsonl(records_file.data, records_file.relpath),
            instruction=self.instruction,
            rubric=self.rubric,
            files=[records_file, schema_file],
            title=self.title,
            schema=loads_lenient(schema_file.data, schema_file.relpath),
            meta={"generator": "bench.tasks.demo.booking_records", "generator_seed": SEED},
        )


BOOKING = DemoTask("booking", "Flight booking", INSTRUCTION, RUBRIC)


if __name__ == "__main__":  # pragma: no cover - maintenance entry point
    for path in write_files():
        print(f"wrote {path}")
