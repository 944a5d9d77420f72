"""`score_cell`: score one cell's samples with a list of registered metrics (the runner's entry point).

Each metric is looked up in `bench.registry.METRICS` and called with one shared `CellView`, so
extraction, validation, tokenization and embedding happen once per cell whatever the metric list.
Metrics that need a model (meta `needs`) get NaN, with the reason in `info["unavailable"]`, when no
resources are given; everything else never touches a model.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

from bench.errors import BenchError
from bench.registry import METRICS
from bench.types import JSON, MetricResources, Sample, TaskSpec
from metrics.cell import NAN, CellView, MissingResourceError
from metrics.structure import InvalidSchemaError


@dataclass
class CellScore:
    """Flat metric values (NaN when undefined), one row per sample (input order), and provenance."""

    values: dict[str, float]
    rows: list[JSON]
    info: JSON = field(default_factory=dict)


def score_cell(
    samples: list[Sample], spec: TaskSpec, names: list[str], resources: MetricResources | None = None
) -> CellScore:
    """Score `samples` of one cell against `spec` with the metrics `names` (unknown names raise)."""
    cell = CellView(samples, spec, resources)
    values: dict[str, float] = {}
    versions: dict[str, int] = {}
    unavailable: dict[str, str] = {}
    errors: dict[str, str] = {}
    for name in names:
        fn = METRICS.get(name)
        meta = METRICS.meta(name)
        versions[name] = int(meta.get("version", 1))
        if meta.get("needs") and resources is None:
            values[name] = NAN
            unavailable[name] = f"needs {', '.join(meta['needs'])}; no model resources given"
            continue
        try:
            value = float(fn(cell))
        except MissingResourceError as exc:
            value, unavailable[name] = NAN, str(exc)
        except (BenchError, InvalidSchemaError):  # the user's input (a bad schema, a bad setting): loud
            raise
        except Exception as exc:  # a metric's bug must not throw away the cell's generations
            value = NAN
            errors[name] = f"{type(exc).__name__}: {exc}"
            warnings.warn(f"metric {name!r} raised {errors[name]}; scored NaN for this cell", stacklevel=2)
        values[name] = value if math.isfinite(value) else NAN
    info: JSON = dict(cell.info)
    info.update(
        {
            "metric_versions": versions,
            "n_samples": len(cell.samples),
            "n_scored": cell.n,
            "n_parsed": len(cell.records),
            "harness_failures": cell.harness_failures,
            "structure": _field_errors(cell),
        }
    )
    if unavailable:
        info["unavailable"] = unavailable
    if errors:  # in cell.json under scoring.metric_errors; `bench rescore` recomputes after a fix
        info["metric_errors"] = errors
    rows = [{**j.row(), **cell.row_extras.get(pos, {})} for pos, j in enumerate(cell.judged)]
    return CellScore(values=values, rows=rows, info=info)


def _field_errors(cell: CellView) -> JSON:
    from metrics.validity import field_errors

    return field_errors(cell)
