"""MultiWOZ 2.2 database entities (`multiwoz_2.2/db/<service>_db.json` + `schema.json`) as JSON records.

Each record is one entity of the Cambridge venue/timetable database that MultiWOZ dialogues are
grounded in, as upstream stores it (lower-case names, numbers as strings, hotel `price` object,
`location` [lat, lon] pair), with two cleaning rules:

* `id` is dropped: it is the database's row key, carries no meaning a generator could get right, and
  would only add a memorisation signal to field_overlap.
* A field whose value is `"?"` (the dataset's "unknown", 70 such values in attraction) is dropped from
  that record, so unknown means absent and the field becomes optional in the schema. Keeping `"?"` would
  teach systems to emit a placeholder and make the references fail the placeholder rubric.

Slots of `schema.json` map onto record fields by name (case and spaces ignored: `train-arriveby` ->
`arriveBy`, `attraction-entrancefee` -> `entrance fee`). A slot marked `is_categorical` gives its
`possible_values` as the field's enum (plus any value the records use that the list lacks, e.g. the
database's own spelling "mutliple sports"); a non-categorical slot is free text (no enum inferred).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.errors import DataError
from bench.types import JSON

from .base import TaskSource, check_options, loads_lenient, read_source

SCHEMA_FILE = "multiwoz_2.2/schema.json"
UNKNOWN = "?"
DROPPED_FIELDS = ("id",)

_INSTRUCTIONS = {
    "train": (
        "Generate one train connection from the timetable of the MultiWOZ 2.2 travel-booking dataset "
        "(trains to and from Cambridge, UK): departure and destination stations, day of travel, departure "
        "time (leaveAt) and arrival time (arriveBy) as HH:MM, journey duration in minutes, ticket price in "
        "pounds and a train ID such as TR1234, as one JSON object."
    ),
    "hotel": (
        "Generate one hotel or guesthouse in Cambridge, UK, as listed in the MultiWOZ 2.2 travel-booking "
        "database: name, type, area of town, address, postcode, phone, star rating, price range, room prices "
        "in pounds per night (single/double/family), parking and internet, and its [latitude, longitude], "
        "as one JSON object."
    ),
    "restaurant": (
        "Generate one restaurant in Cambridge, UK, as listed in the MultiWOZ 2.2 travel-booking database: "
        "name, cuisine (food), area of town, price range, address, postcode, phone, [latitude, longitude], "
        "and optionally a short introduction and a signature dish, as one JSON object."
    ),
    "attraction": (
        "Generate one tourist attraction in Cambridge, UK, as listed in the MultiWOZ 2.2 travel-booking "
        "database: name, type (museum, college, park, ...), area of town, address, postcode, phone, "
        "[latitude, longitude], and where known the entrance fee, price range and opening hours, as one "
        "JSON object."
    ),
}

_RUBRICS = {
    "train": (
        "Is the departure station different from the destination station?",
        "Is the arrival time (arriveBy) later than the departure time (leaveAt) on a 24-hour clock?",
        "Does the duration match the difference between arriveBy and leaveAt?",
        "Is the price a plausible train fare in pounds for this route?",
        "Is the trainID of the form TR followed by four digits?",
    ),
    "hotel": (
        "Is the price range (cheap, moderate, expensive) consistent with the room prices?",
        "Is the place a plausible hotel or guesthouse in Cambridge, UK (name, address, postcode)?",
        "Are the coordinates inside or near Cambridge, UK (latitude about 52.2, longitude about 0.1)?",
        "Is the phone number a plausible UK number?",
    ),
    "restaurant": (
        "Is the cuisine (food) consistent with the restaurant's name, introduction and signature dish?",
        "Is the place a plausible restaurant in Cambridge, UK (name, address, postcode)?",
        "Are the coordinates inside or near Cambridge, UK (latitude about 52.2, longitude about 0.1)?",
        "Is the phone number a plausible UK number?",
    ),
    "attraction": (
        "Is the attraction type consistent with its name?",
        "Is the entrance fee consistent with the price range?",
        "Are the opening hours written as a sensible sentence about days and times?",
        "Are the coordinates inside or near Cambridge, UK (latitude about 52.2, longitude about 0.1)?",
    ),
}

SERVICES = tuple(_INSTRUCTIONS)
#: The rubric questions per service (public: metrics/rubrics/multiwoz.py answers some of them in code).
RUBRICS = _RUBRICS


def _norm(name: str) -> str:
    return name.lower().replace(" ", "").replace("_", "")


def slot_vocabulary(schema_doc: list[JSON], service: str) -> tuple[dict[str, list[str]], set[str]]:
    """(categorical slot -> possible_values, non-categorical slots), keyed by normalised slot name."""
    for entry in schema_doc:
        if entry.get("service_name") == service:
            categorical: dict[str, list[str]] = {}
            free: set[str] = set()
            for slot in entry.get("slots", []):
                name = _norm(str(slot["name"]).split("-", 1)[-1])
                values = slot.get("possible_values") or []
                if slot.get("is_categorical") and values:
                    categorical[name] = [str(v) for v in values]
                else:
                    free.add(name)
            return categorical, free
    raise DataError(f"{SCHEMA_FILE}: no service {service!r}")


def clean_entity(entity: JSON) -> JSON:
    """The record for one db entity: row key dropped, unknown ("?") fields dropped."""
    return {k: v for k, v in entity.items() if k not in DROPPED_FIELDS and v != UNKNOWN}


@dataclass(frozen=True)
class MultiWOZService:
    """Loader for `multiwoz/<service>`; one instance per service registered in the task registry."""

    service: str
    family: str = "multiwoz"
    version: str = "1"
    needs_data_dir: bool = True

    @property
    def options_doc(self) -> dict[str, str]:
        return {}

    def variants(self, data_dir: Path | None) -> list[str]:
        ok = data_dir is not None and (data_dir / f"multiwoz_2.2/db/{self.service}_db.json").is_file()
        return [self.service] if ok else []

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        name = f"multiwoz/{self.service}"
        check_options(name, options, self.options_doc)
        assert data_dir is not None
        db_file = read_source(data_dir, f"multiwoz_2.2/db/{self.service}_db.json", name)
        schema_file = read_source(data_dir, SCHEMA_FILE, name)
        entities = loads_lenient(db_file.data, db_file.relpath)
        if not isinstance(entities, list) or not all(isinstance(e, dict) for e in entities):
            raise DataError(f"{db_file.relpath}: expected a JSON list of objects")
        records = [clean_entity(e) for e in entities]
        slot_cats, slot_free = slot_vocabulary(
            loads_lenient(schema_file.data, schema_file.relpath), self.service
        )
        fields = {k for r in records for k in r}
        categorical = {f: slot_cats[_norm(f)] for f in fields if _norm(f) in slot_cats}
        free_text = frozenset(f for f in fields if _norm(f) in slot_free)
        unknown_dropped = sum(1 for e in entities for v in e.values() if v == UNKNOWN)
        return TaskSource(
            records=records,
            instruction=_INSTRUCTIONS[self.service],
            rubric=_RUBRICS[self.service],
            files=[db_file, schema_file],
            title=f"MultiWOZ 2.2 {self.service} entity",
            categorical=categorical,
            free_text=free_text,
            meta={"unknown_values_dropped": unknown_dropped, "dropped_fields": list(DROPPED_FIELDS)},
        )


TRAIN = MultiWOZService("train")
HOTEL = MultiWOZService("hotel")
RESTAURANT = MultiWOZService("restaurant")
ATTRACTION = MultiWOZService("attraction")
