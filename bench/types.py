"""Core value types shared by every layer: tasks, systems, backends, metrics and the run store.

This module is the contract between `bench` (the core) and its implementations in `systems/`,
`metrics/` and `reports/`. It imports nothing heavy so that `bench list` stays instant.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

JSON = dict[str, Any]


# --------------------------------------------------------------------------------------------- tasks
@dataclass(frozen=True)
class TaskItem:
    """One item of a per-item task: a JSONSchemaBench schema, a BFCL question. Each has its own schema and
    instruction; sample i of a cell answers item i (modulo the number of items) and names it in
    `meta.item_id`, so anyone can re-check a score item by item."""

    id: str
    schema: JSON
    instruction: str
    meta: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    """Everything a system may see about one task (plus the holdout, which only metrics may read).

    `references` are the "training" records a system may condition on and that memorization metrics
    compare against; `holdout` is never shown to a system and feeds similarity and BLEU/ROUGE/METEOR.
    The split is fixed by `split_seed`, never by the run seed, so a generator trained on a task's
    references is trained once per task.
    """

    name: str
    instruction: str
    schema: JSON
    references: tuple[JSON, ...]
    holdout: tuple[JSON, ...]
    rubric: tuple[str, ...] = ()
    fingerprint: str = ""
    split_seed: int = 0
    meta: JSON = field(default_factory=dict)
    items: tuple[TaskItem, ...] = ()  # per-item tasks only; empty for record-generation tasks

    def item_for(self, index: int) -> TaskItem | None:
        """The item sample `index` answers (None for a task without items)."""
        return self.items[index % len(self.items)] if self.items else None

    def for_sample(self, index: int) -> TaskSpec:
        """The task as sample `index` sees it: for a per-item task its item's schema and instruction
        (the same object for a task without items, so callers can use it unconditionally)."""
        item = self.item_for(index)
        if item is None:
            return self
        from dataclasses import replace

        return replace(
            self,
            schema=item.schema,
            instruction=item.instruction,
            items=(),
            meta={**self.meta, **item.meta, "item_id": item.id},
        )

    def describe(self) -> JSON:
        """Small, JSON-ready description stored in manifests (no records)."""
        return {
            "name": self.name,
            "fingerprint": self.fingerprint,
            "split_seed": self.split_seed,
            "n_references": len(self.references),
            "n_holdout": len(self.holdout),
            "schema": self.schema,
            "rubric": list(self.rubric),
            **({"n_items": len(self.items)} if self.items else {}),
        }


# ------------------------------------------------------------------------------------------- samples
class SampleStatus(enum.StrEnum):
    """Outcome of one sample. Harness failures (backend_error, timeout) never count against a model."""

    OK = "ok"
    INVALID_JSON = "invalid_json"
    SCHEMA_VIOLATION = "schema_violation"
    TRUNCATED = "truncated"
    BACKEND_ERROR = "backend_error"
    TIMEOUT = "timeout"

    @property
    def is_harness_failure(self) -> bool:
        return self in (SampleStatus.BACKEND_ERROR, SampleStatus.TIMEOUT)


@dataclass
class Sample:
    """One generated output as the system returned it (raw text; parsing happens in metrics).

    `finish_reason` is the backend's word ("stop", "length", "error", ...); "length" lets metrics tell
    truncation apart from malformed JSON. `error` is set only for harness failures.
    """

    index: int
    text: str
    finish_reason: str | None = None
    error: str | None = None
    status: SampleStatus | None = None  # only set by systems for harness failures
    meta: JSON = field(default_factory=dict)

    def to_json(self) -> JSON:
        d = asdict(self)
        d["status"] = self.status.value if self.status else None
        return d

    @classmethod
    def from_json(cls, d: JSON) -> Sample:
        status = d.get("status")
        return cls(
            index=int(d.get("index", 0)),
            text=d.get("text", ""),
            finish_reason=d.get("finish_reason"),
            error=d.get("error"),
            status=SampleStatus(status) if status else None,
            meta=d.get("meta") or {},
        )


@dataclass
class Usage:
    """Resource accounting of one cell; mergeable so systems can add up their backends' calls."""

    generator_calls: int = 0
    agent_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    nfe: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    cache_hits: int = 0
    cache_misses: int = 0
    judge_calls: int = 0  # the share of agent_calls made by a judge (AoD's judge cluster)

    def add_call(
        self,
        tokens_in: int,
        tokens_out: int,
        cached: bool,
        nfe: int = 0,
        cost_usd: float = 0.0,
        agent: bool = False,
    ) -> None:
        """Count one model call. A call counts whether or not the cache answered it: call counts say what
        a system asked for (budgets compare on them), so they must not depend on the cache's state."""
        if agent:
            self.agent_calls += 1
        else:
            self.generator_calls += 1
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.nfe += nfe
        self.cost_usd += cost_usd
        self.cache_hits += int(cached)
        self.cache_misses += int(not cached)

    def add(self, other: Usage) -> Usage:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)
        return self

    def to_json(self) -> JSON:
        return asdict(self)


@dataclass
class GenerationResult:
    """What `System.generate` returns: n samples, a per-step trace (agents, optimizers) and usage."""

    samples: list[Sample]
    trace: list[JSON] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


# ------------------------------------------------------------------------------------------ backends
@dataclass(frozen=True)
class SamplingParams:
    """Decoding settings; every field takes part in the call-cache key."""

    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    num_beams: int = 1
    stop: tuple[str, ...] = ()
    repeat_penalty: float = 1.0
    json_schema: JSON | None = None  # grammar-constrained decoding when the backend supports it
    extra: tuple[tuple[str, Any], ...] = ()  # backend-specific knobs, hashable
    stop_at_record: bool = False
    """End generation once the output holds a complete record (`metrics.extract.record_complete`).
    Backends that can stop mid-generation honour it (llama_cpp, hf); others generate to `stop`/`max_tokens`."""

    def to_json(self) -> JSON:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["extra"] = dict(self.extra)
        if not self.stop_at_record:
            del d["stop_at_record"]  # absent when off, so call-cache keys of earlier runs stay valid
        return d


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt to a text backend. `messages` are chat turns; a backend applies its chat template.

    `seed` and `sample_index` make every call reproducible and uniquely cacheable.
    """

    messages: tuple[tuple[str, str], ...]  # ((role, content), ...)
    params: SamplingParams
    seed: int
    sample_index: int = 0

    @staticmethod
    def chat(
        user: str, params: SamplingParams, seed: int, sample_index: int = 0, system: str | None = None
    ) -> GenerationRequest:
        msgs: list[tuple[str, str]] = []
        if system:
            msgs.append(("system", system))
        msgs.append(("user", user))
        return GenerationRequest(tuple(msgs), params, seed, sample_index)


@dataclass
class Completion:
    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None
    seconds: float = 0.0
    cost_usd: float = 0.0
    nfe: int = 0
    cached: bool = False
    error: str | None = None

    def to_json(self) -> JSON:
        return asdict(self)


@runtime_checkable
class TextBackend(Protocol):
    """One model runtime that turns chat requests into text (llama.cpp, HF, OpenAI API, LLaDA sampler).

    `identity()` returns everything that determines outputs (backend kind, model id or file hash,
    quantization, dtype); it is part of the call-cache key. Transport settings are not.
    """

    def identity(self) -> JSON: ...

    def generate(self, requests: list[GenerationRequest]) -> list[Completion]: ...


@runtime_checkable
class LogProbScorer(Protocol):
    """A model that can score text: returns (total negative log-likelihood in nats, token count)."""

    def identity(self) -> JSON: ...

    def nll(self, texts: list[str]) -> list[tuple[float, int]]: ...


@runtime_checkable
class Embedder(Protocol):
    def identity(self) -> JSON: ...

    def encode(self, texts: list[str]) -> Any:  # numpy array (n, d), L2-normalised
        ...


# ------------------------------------------------------------------------------------------- systems
class RunContext(Protocol):
    """What the runner hands a system: model roles resolved by the profile, the call cache, dirs."""

    profile_name: str
    cache_dir: str

    def backend(self, role: str) -> TextBackend:
        """The (cached, shared) backend serving a role such as 'generator', 'optimizer', 'judge'."""
        ...

    def model_spec(self, role: str) -> JSON: ...

    def embedder(self) -> Embedder: ...

    def scorer(self) -> LogProbScorer: ...


@runtime_checkable
class System(Protocol):
    """A generator under evaluation: returns n samples for a task with a given seed."""

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult: ...


class MetricResources(Protocol):
    """Models a metric may need, created lazily and shared across cells (the runner's context)."""

    def embedder(self) -> Embedder: ...

    def scorer(self) -> LogProbScorer: ...
