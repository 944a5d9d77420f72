"""JSONSchemaBench (Geng et al. 2025, arXiv 2501.10868) as a per-item task family: `jsonschemabench/<split>`.

Files: `jsonschemabench/<split>/<name>.json`, one JSON Schema each (the first 100 of each of the ten upstream
splits; ../shared/datasets/README.md). Every schema file is one `TaskItem` whose id is its file name, so
sample i of a cell answers schema i (file-name order) and names it in `meta.schema_id`. The benchmark has no
instance data: references and holdout are empty, and every reference-based metric is NaN.

The instruction is the benchmark's own prompt, "You need to generate a JSON object that matches the schema
below."; the schema follows it in the prompt (systems.prompting.PromptParts). The paper's optional few-shot
examples are hand-written per split in the upstream evaluation code and are not in the data dir, so they are
not offered here (docs/systems-ar.md).

Option `limit: N` keeps the first N schemas in file-name order, so a cell with `samples: N` sees each of
them once; with no limit all files of the split are items.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bench.errors import BenchError, DataError
from bench.registry import UnknownNameError, suggest
from bench.types import JSON, TaskItem

from .base import TaskSource, check_options, loads_lenient, read_source

ROOT = "jsonschemabench"
INSTRUCTION = "You need to generate a JSON object that matches the schema below."
RUBRIC: tuple[str, ...] = ()  # the benchmark judges validity only


def split_files(data_dir: Path, split: str) -> list[str]:
    """The schema file names of one split, in file-name order (the upstream selection order)."""
    return sorted(p.name for p in (data_dir / ROOT / split).glob("*.json"))


@dataclass(frozen=True)
class JSONSchemaBench:
    """Loader for `jsonschemabench/<split>`: one item per schema file of the split."""

    family: str = "jsonschemabench"
    version: str = "1"
    needs_data_dir: bool = True
    options_doc: dict[str, str] = field(
        default_factory=lambda: {"limit": "int: keep only the first N schemas (file-name order)"}
    )

    def variants(self, data_dir: Path | None) -> list[str]:
        if data_dir is None or not (data_dir / ROOT).is_dir():
            return []
        return sorted(p.name for p in (data_dir / ROOT).iterdir() if p.is_dir() and any(p.glob("*.json")))

    def read(self, variant: str, data_dir: Path | None, options: JSON) -> TaskSource:
        name = f"{self.family}/{variant}"
        check_options(name, options, self.options_doc)
        assert data_dir is not None
        known = self.variants(data_dir)
        if variant not in known:
            hint = suggest(variant, known) if known else ""
            raise UnknownNameError(
                f"unknown task {name!r}{hint or '; see `bench list tasks`'}"
                + ("" if known else f" (no {ROOT}/<split>/ folder in the data dir {data_dir})")
            )
        limit = options.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise BenchError(f"task {name!r}: option limit must be a positive integer, got {limit!r}")
        files = split_files(data_dir, variant)[: limit or None]
        sources, items = [], []
        for fname in files:
            relpath = f"{ROOT}/{variant}/{fname}"
            source = read_source(data_dir, relpath, name)
            schema = loads_lenient(source.data, relpath)
            if not isinstance(schema, dict | bool):
                raise DataError(f"{relpath}: a JSON Schema must be an object or a boolean")
            sources.append(source)
            items.append(
                TaskItem(
                    id=fname,
                    schema=schema,  # type: ignore[arg-type]
                    instruction=INSTRUCTION,
                    # any JSON value is an instance here: a schema may allow a string or array root
                    meta={
                        "schema_id": fname,
                        "split": variant,
                        "draft": _draft(schema),
                        "any_instance": True,
                    },
                )
            )
        return TaskSource(
            records=[],
            instruction=INSTRUCTION,
            rubric=RUBRIC,
            files=sources,
            title=f"JSONSchemaBench {variant}",
            meta={"split": variant, "n_schemas_in_split": len(split_files(data_dir, variant))},
            items=tuple(items),
        )


def _draft(schema: object) -> str | None:
    """The `$schema` URI a schema declares (None when it declares none); informational only: every schema
    is judged under Draft 2020-12, as the paper does."""
    return schema.get("$schema") if isinstance(schema, dict) else None


JSONSCHEMABENCH = JSONSchemaBench()
