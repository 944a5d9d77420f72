"""`CellView`: one cell's samples, parsed once, with every derived view computed lazily and shared.

Every metric is a function `metric(cell: CellView) -> float`. The expensive views (extraction, schema
checks, word lists, embeddings, nearest holdout records) are cached properties, so scoring 16 metrics
extracts each sample once, validates it once, and embeds the cell in one batch; the embedder and the
scorer are only requested when a metric that needs them runs.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from bench.types import JSON, MetricResources, Sample, SampleStatus, TaskSpec
from metrics.extract import Extraction, extract_instance, extract_record
from metrics.records import canonical, values_text, words
from metrics.rubric import Rubric
from metrics.structure import SchemaCheck, check_record, fast_engine_for, validator_for

NAN = float("nan")


class MissingResourceError(RuntimeError):
    """A metric needs a model (embedder or scorer) but the caller gave no resources."""


@dataclass
class Judged:
    """One sample after extraction, validation and the rubric."""

    sample: Sample
    harness_failure: bool
    extraction: Extraction | None
    check: SchemaCheck | None
    rubric_failures: list[str]

    @property
    def status(self) -> SampleStatus:
        if self.harness_failure:
            return self.sample.status or SampleStatus.BACKEND_ERROR
        assert self.extraction is not None
        if self.extraction.status is SampleStatus.OK and self.check is not None and not self.check.valid:
            return SampleStatus.SCHEMA_VIOLATION
        return self.extraction.status

    @property
    def parsed(self) -> bool:
        return self.extraction is not None and self.extraction.record is not None

    @property
    def schema_valid(self) -> bool:
        return self.parsed and self.check is not None and self.check.valid

    @property
    def tsr_pass(self) -> bool:
        return self.schema_valid and not self.rubric_failures

    def row(self) -> JSON:
        ext = self.extraction
        return {
            "index": self.sample.index,
            "status": self.status.value,
            "harness_failure": self.harness_failure,
            "record": ext.record if ext else None,
            "error": self.sample.error if self.harness_failure else (ext.error if ext else None),
            "truncated": bool(ext and ext.truncated),
            "schema_errors": self.check.to_json()["errors"] if self.check else [],
            "schema_messages": self.check.messages if self.check else [],
            "tsr": self.tsr_pass if not self.harness_failure else None,
            "tsr_failures": self._tsr_reasons(),
        }

    def _tsr_reasons(self) -> list[str]:
        if self.harness_failure:
            return []
        if not self.parsed:
            return ["not_parsed"]
        reasons = [] if self.schema_valid else ["schema_invalid"]
        return reasons + self.rubric_failures


# Views of a task's references (rubric, reference n-grams, reference field pairs) are the same for every
# cell of a task: keep them per TaskSpec object (held weakly, so a dropped spec frees its entry).
_PER_SPEC: dict[tuple[int, str], tuple[weakref.ref, Any]] = {}


def per_spec(spec: TaskSpec, name: str, build: Callable[[], Any]) -> Any:
    """`build()` once per (spec object, name); later cells of the same task reuse the result."""
    key = (id(spec), name)
    hit = _PER_SPEC.get(key)
    if hit is not None and hit[0]() is spec:
        return hit[1]
    value = build()
    _PER_SPEC[key] = (weakref.ref(spec, lambda _r, k=key: _PER_SPEC.pop(k, None)), value)
    return value


# Holdout embeddings are the same for every cell of a task: keep a few, keyed by embedder and texts.
_HOLDOUT_CACHE: dict[tuple[str, str], np.ndarray] = {}
_HOLDOUT_CACHE_MAX = 16


class CellView:
    """Lazily computed views of one cell (system x task x seed) for the metric functions."""

    def __init__(self, samples: list[Sample], spec: TaskSpec, resources: MetricResources | None = None):
        self.samples = list(samples)  # input order is kept: rows line up with the caller's samples
        self.spec = spec
        self.resources = resources
        self.info: JSON = {}
        self.row_extras: dict[int, JSON] = {}  # judged position -> extra row fields a metric adds (toolcalls)

    # ----------------------------------------------------------------- structure
    @cached_property
    def rubric(self) -> Rubric:
        from metrics.rubrics import rubric_checks

        return per_spec(
            self.spec,
            "rubric",
            lambda: Rubric(self.spec.schema, self.spec.references, rubric_checks(self.spec)),
        )

    @cached_property
    def validator(self) -> Any:
        """The task schema's bounded Draft 2020-12 validator (raises InvalidSchemaError for a bad schema)."""
        return validator_for(self.spec.schema)

    @cached_property
    def fast_engine(self) -> Any:
        """jsonschema-rs in front of the reference validator (metrics.structure.FastEngine)."""
        return fast_engine_for(self.spec.schema)

    def _check(self, index: int, record: Any) -> SchemaCheck:
        """Validate against the task's schema, or, for a per-item task, against the sample's item's."""
        if not self.spec.items:
            return check_record(record, self.spec.schema, self.validator, self.fast_engine)
        schema = self.spec.for_sample(index).schema
        return check_record(record, schema, validator_for(schema), fast_engine_for(schema))

    def _rubric_for(self, index: int) -> Rubric:
        if not self.spec.items:
            return self.rubric
        item = self.spec.item_for(index)
        return per_spec(self.spec, f"rubric:{item.id}", lambda: Rubric(item.schema, ()))  # type: ignore[union-attr]

    def _extract(self, s: Sample) -> Extraction:
        """The sample's record; for items that take any JSON instance (`meta.any_instance`, JSONSchemaBench),
        a non-object value too, which the item's schema then accepts or rejects."""
        if self.spec.items and self.spec.item_for(s.index).meta.get("any_instance"):  # type: ignore[union-attr]
            return extract_instance(s.text, s.finish_reason)
        return extract_record(s.text, s.finish_reason)

    @cached_property
    def judged(self) -> list[Judged]:
        """One Judged per sample, in input order; "earlier" (for duplicates) means lower sample index."""
        out: list[Judged | None] = [None] * len(self.samples)
        seen: dict[str, int] = {}
        order = sorted(range(len(self.samples)), key=lambda i: (self.samples[i].index, i))
        for i in order:
            s = self.samples[i]
            if s.status is not None and s.status.is_harness_failure:
                out[i] = Judged(s, True, None, None, [])
                continue
            ext = self._extract(s)
            check = self._check(s.index, ext.record) if ext.record is not None else None
            failures: list[str] = []
            if ext.record is not None:
                failures = self._rubric_for(s.index).failures(ext.record)
                key = canonical(ext.record)
                if key in seen:
                    failures.append(f"duplicate_of_sample:{seen[key]}")
                else:
                    seen[key] = s.index
            out[i] = Judged(s, False, ext, check, failures)
        return [j for j in out if j is not None]

    @cached_property
    def scored(self) -> list[Judged]:
        """Samples that count in denominators: everything except harness failures."""
        return [j for j in self.judged if not j.harness_failure]

    @property
    def n(self) -> int:
        return len(self.scored)

    @cached_property
    def harness_failures(self) -> int:
        return sum(j.harness_failure for j in self.judged)

    @cached_property
    def records(self) -> list[JSON]:
        """Parsed records (schema-valid or not), in sample order."""
        return [j.extraction.record for j in self.scored if j.extraction and j.extraction.record is not None]

    def share(self, count: int, denominator: int) -> float:
        return count / denominator if denominator else NAN

    # ----------------------------------------------------------------- lexical
    @cached_property
    def texts(self) -> list[str]:
        return [values_text(r) for r in self.records]

    @cached_property
    def tokens(self) -> list[list[str]]:
        return [words(t) for t in self.texts]

    @cached_property
    def reference_tokens(self) -> list[list[str]]:
        return per_spec(
            self.spec, "reference_tokens", lambda: [words(values_text(r)) for r in self.spec.references]
        )

    def ngram_counts(self, n: int) -> Counter[tuple[str, ...]]:
        key = f"_ngrams_{n}"
        if key not in self.__dict__:
            from metrics.lexical import pooled_ngrams

            self.__dict__[key] = pooled_ngrams(self.tokens, n)
        return self.__dict__[key]

    # ----------------------------------------------------------------- models
    def _resources(self) -> MetricResources:
        if self.resources is None:
            raise MissingResourceError("this metric needs model resources (embedder/scorer); none were given")
        return self.resources

    @cached_property
    def embedder(self) -> Any:
        emb = self._resources().embedder()
        self.info["embedder"] = emb.identity()
        return emb

    @cached_property
    def embeddings(self) -> np.ndarray:
        """One batched encode of the cell's parsed records (values text), L2-normalised rows."""
        if not self.texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.asarray(self.embedder.encode(self.texts), dtype=np.float32)

    @cached_property
    def holdout_texts(self) -> list[str]:
        return [values_text(r) for r in self.spec.holdout]

    @cached_property
    def holdout_embeddings(self) -> np.ndarray:
        if not self.holdout_texts:
            return np.zeros((0, 0), dtype=np.float32)
        ident = json.dumps(self.embedder.identity(), sort_keys=True, default=str)
        digest = hashlib.sha256("\x1e".join(self.holdout_texts).encode("utf-8", "surrogatepass")).hexdigest()
        key = (ident, digest)
        if key not in _HOLDOUT_CACHE:
            if len(_HOLDOUT_CACHE) >= _HOLDOUT_CACHE_MAX:
                _HOLDOUT_CACHE.pop(next(iter(_HOLDOUT_CACHE)))
            _HOLDOUT_CACHE[key] = np.asarray(self.embedder.encode(self.holdout_texts), dtype=np.float32)
        return _HOLDOUT_CACHE[key]

    @cached_property
    def holdout_cosines(self) -> np.ndarray:
        """(records x holdout) cosine matrix; both sides are L2-normalised, so a dot product."""
        return self.embeddings @ self.holdout_embeddings.T

    @cached_property
    def nearest_holdout(self) -> list[int]:
        """Index of each record's most similar holdout record (ties: lowest index)."""
        if not self.records or not self.holdout_texts:
            return []
        return [int(i) for i in np.argmax(self.holdout_cosines, axis=1)]

    @cached_property
    def scorer(self) -> Any:
        sc = self._resources().scorer()
        self.info["scorer"] = sc.identity()
        return sc
