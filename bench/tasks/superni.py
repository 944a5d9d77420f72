"""Super-NaturalInstructions task files (`super_natural_instructions/tasks/<task>.json`), one task each.

Record: `{"input", "output"}` per instance. Upstream `output` is a list of acceptable outputs; the
record keeps the first one (the canonical answer: all but one of the shipped tasks have exactly one,
task102 CommonGen lists three equally valid sentences), so every family has string leaves that the
lexical metrics treat alike. Option `all_outputs: true` keeps the whole list instead.
The task's `Definition` (plus its categories and domains) becomes the instruction.

Upstream files are Python-flavoured JSON (task244 has `"URL": [NaN]`); they are parsed with NaN mapped
to null, and nothing outside `Instances` and the header text reaches a record or the schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import DataError
from bench.registry import UnknownNameError, suggest
from bench.types import JSON

from .base import TaskSource, check_options, loads_lenient, read_source

TASKS_DIR = "super_natural_instructions/tasks"

RUBRIC = (
    "Is the input a new, self-contained instance of the task described in the instruction?",
    "Is the output the correct answer for this input according to the task definition?",
    "Does the output follow the answer format the task definition asks for?",
)


def _text(value: object) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value if v is not None).strip()
    return "" if value is None else str(value).strip()


def instruction_for(task: str, header: JSON) -> str:
    """The natural-language instruction: what to generate, the domain, then the task's own definition."""
    categories = _text(header.get("Categories")) or "unspecified"
    domains = ", ".join(str(d) for d in header.get("Domains") or [] if d) or "unspecified"
    return (
        f"Generate one new instance of the Super-NaturalInstructions task {task} (category: {categories}; "
        f'domain: {domains}) as one JSON object with an "input" for the task and the correct "output" '
        f"for that input. Task definition: {_text(header.get('Definition'))}"
    )


@dataclass(frozen=True)
class SuperNI:
    """Loader for `superni/<task>`: every task file in the data dir is one task."""

    family: str = "superni"
    version: str = "1"
    needs_data_dir: bool = True
    options_doc: dict[str, str] = field(
        default_factory=lambda: {"all_outputs": "bool: keep every acceptable output as a list"}
    )

    def variants(self, data_dir: Path | None) -> list[str]:
        if data_dir is None or not (data_dir / TASKS_DIR).is_dir():
            return []
        return sorted(p.stem for p in (data_dir / TASKS_DIR).glob("task*.json"))

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        name = f"superni/{variant}"
        check_options(name, options, self.options_doc)
        assert data_dir is not None
        relpath = f"{TASKS_DIR}/{variant}.json"
        if not variant or ("/" in variant) or not (data_dir / relpath).is_file():
            known = self.variants(data_dir)
            if known:
                raise UnknownNameError(
                    f"unknown task {name!r}{suggest(variant, known) or '; see `bench list tasks`'}"
                )
        source = read_source(data_dir, relpath, name)
        doc = loads_lenient(source.data, relpath)
        instances = doc.get("Instances") if isinstance(doc, dict) else None
        if not isinstance(instances, list) or not instances:
            raise DataError(f"{relpath}: no Instances")
        keep_all = bool(options.get("all_outputs", False))
        records: list[JSON] = []
        for inst in instances:
            outputs = [str(o).strip() for o in inst.get("output") or [] if o is not None]
            if not outputs:
                raise DataError(f"{relpath}: instance {inst.get('id')} has no output")
            records.append({"input": _text(inst.get("input")), "output": outputs if keep_all else outputs[0]})
        return TaskSource(
            records=records,
            instruction=instruction_for(variant, doc),
            rubric=RUBRIC,
            files=[source],
            title=f"Super-NaturalInstructions {variant} instance",
            free_text=frozenset({"input"}),
            meta={
                "categories": doc.get("Categories") or [],
                "domains": doc.get("Domains") or [],
                "instance_license": doc.get("Instance License") or [],
            },
        )


SUPERNI = SuperNI()
