"""Diffusion systems: `llada` (direct generation), `llada-grammar` (the same, decoded under the schema's
token automaton; ours) and `llada-skeleton` (schema-skeleton infilling, ours).

All three take their diffusion LM from the profile's `dlm` role (embedded: the locally trained masked-diffusion
LM; paper: LLaDA-8B-Instruct) and sample with LLaDA's algorithm. `llada` asks for a whole record from a
natural-language prompt (instruction, few-shot references, field list, optional `field: value` hints),
rendered by `systems.skeleton_prompt.render_prompt` so prompt optimizers (AoD) can edit it and call
`generate_from_prompts`. `llada-skeleton` writes the JSON skeleton of the schema onto the canvas and lets
the DLM fill only value slots; its output parses by construction and enums / numbers are constrained.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bench.errors import BenchError
from bench.hashing import stable_hash
from bench.types import (
    GenerationRequest,
    GenerationResult,
    RunContext,
    Sample,
    SampleStatus,
    SamplingParams,
    TaskSpec,
    Usage,
)
from systems.agent_loop import AgentLoopParams, is_multi_turn, run_agent_loop
from systems.params import validate_params
from systems.prompting import sample_rng
from systems.skeleton_prompt import DiffusionPrompt, default_parts, render_prompt
from systems.tool_prompt import is_tool_item, item_prompt

__all__ = [
    "DiffusionPrompt", "LLaDAGrammarSystem", "LLaDAParams", "LLaDASkeletonParams", "LLaDASkeletonSystem",
    "LLaDASystem", "render_prompt",
]  # fmt: skip


class JointPool(BaseModel):
    """Fields whose values are drawn together: each sample takes one row, as one hint per field.

    What a per-field pool cannot do: keep related fields consistent (arriveBy = leaveAt + duration).
    The rows come from records that satisfy the relation (AoD's `vary_together` takes them from the
    references), so every sample's hints agree with each other.
    """

    model_config = ConfigDict(extra="forbid")

    fields: list[str] = Field(min_length=1, description="the fields, in the order of each row")
    rows: list[list[str]] = Field(min_length=1, description="rows of values, one value per field")

    @model_validator(mode="after")
    def _rows_fit(self) -> JointPool:
        bad = [i for i, row in enumerate(self.rows) if len(row) != len(self.fields)]
        if bad:
            raise ValueError(
                f"joint pool rows {bad[:5]} do not have one value per field ({len(self.fields)}: {self.fields})"
            )
        return self


class LLaDAParams(AgentLoopParams):
    """Prompting and LLaDA sampling settings; unset sampler knobs fall back to the backend's defaults
    (and the agent loop's settings, on multi-turn tasks)."""

    model_config = ConfigDict(extra="forbid")

    HASH_OPT_IN: ClassVar[dict[str, Any]] = {"choice_temperature": None}
    """Fields added after cell hashes took the resolved params (bench.cells.resolved_system_params),
    with the value that reproduces the older outputs: left there, they stay out of the hash, so a
    `--resume` of an older run keeps its finished cells."""

    role: str = Field("dlm", description="profile role that serves the diffusion LM")
    k_shots: int = Field(2, ge=0, description="few-shot references in the prompt (drawn per sample)")
    with_fields: bool = Field(True, description="list the schema's top-level fields in the prompt")
    instruction: str | None = Field(None, description="replace the task instruction (prompt editing)")
    notes: list[str] = Field(default_factory=list, description="extra prompt lines (prompt editing)")
    hints: dict[str, str] = Field(
        default_factory=dict, description="`field: value` lines added to every prompt"
    )
    hint_pools: dict[str, list[str]] = Field(
        default_factory=dict,
        description="`field: [values]`: one value per sample, drawn by (seed, sample index), as a hint",
    )
    joint_pools: list[JointPool] = Field(
        default_factory=list,
        description="`[{fields: [..], rows: [[..], ..]}]`: one row per sample, drawn by (seed, index), as hints",
    )
    steps: int | None = Field(None, ge=1, description="denoising steps T (paper: 12)")
    gen_length: int | None = Field(None, ge=1, description="response positions (llada only)")
    block_length: int | None = Field(None, ge=1, description="semi-autoregressive block length")
    remasking: Literal["low_confidence", "random"] | None = Field(None, description="remasking strategy")
    temperature: float | None = Field(None, ge=0, description="Gumbel-noise temperature")
    cfg_scale: float | None = Field(None, ge=0, description="classifier-free guidance scale (0 = off)")
    threshold: float | None = Field(None, gt=0, lt=1, description="Fast-dLLM confidence-threshold commit")
    prefix_cache: bool | None = Field(None, description="Fast-dLLM block-wise prefix cache")
    choice_temperature: float | None = Field(
        None, ge=0, description="MaskGIT's annealed Gumbel noise on which positions commit (0 = off)"
    )
    grammar: bool = Field(
        False,
        description="decode under the task schema's token automaton (DINGO-style Viterbi x0; "
        "systems/backends/schema_dfa.py); the backend must take json_schema requests",
    )
    batch_size: int = Field(16, ge=1, description="requests per backend call (transport only)")

    def knobs(self, skeleton: bool = False) -> dict[str, Any]:
        names = [
            "steps",
            "block_length",
            "remasking",
            "temperature",
            "cfg_scale",
            "threshold",
            "prefix_cache",
            "choice_temperature",
        ]
        if not skeleton:
            names.append("gen_length")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class LLaDASystem:
    """`llada`: the frozen DLM writes the whole record from a natural-language prompt."""

    name = "llada"

    def __init__(self, params: dict | None = None) -> None:
        self.params = validate_params(LLaDAParams, params, self.name)

    def prompt_parts(self, spec: TaskSpec, seed: int, index: int) -> DiffusionPrompt:
        """The prompt of sample `index`: few-shot references drawn from a per-sample RNG."""
        p = self.params
        rng = sample_rng(seed, index, "llada-few-shot")
        k = min(p.k_shots, len(spec.references))
        examples = rng.sample(list(spec.references), k) if k else []
        parts = default_parts(spec, examples, with_fields=p.with_fields)
        item = spec.item_for(index)
        if item is not None and is_tool_item(item.meta):  # BFCL: this sample's own question and functions
            parts.instruction = item_prompt(item.meta)
            parts.examples = []  # the DLM is trained on these prompts without examples (a window cut
            # from the left would drop the request first); systems/tool_prompt.py
        if p.instruction is not None:
            parts.instruction = p.instruction
        parts.notes = list(p.notes)
        parts.hints = with_pool_hints(
            list(p.hints.items()), p.hint_pools, seed, index, [(j.fields, j.rows) for j in p.joint_pools]
        )
        return parts

    def prompts(self, spec: TaskSpec, n: int, seed: int) -> list[str]:
        return [render_prompt(self.prompt_parts(spec, seed, i)) for i in range(n)]

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        if is_multi_turn(spec):  # BFCL multi-turn: the agent loop, the DLM trained on reference rounds
            return self.agent_loop(spec, n, seed, ctx)
        return self.generate_from_prompts(spec, self.prompts(spec, n, seed), seed, ctx)

    def refused_schemas(self, spec: TaskSpec, n: int, backend: Any) -> dict[int, str]:
        """With `grammar`, the samples whose schema the backend cannot decode under, and why.

        The backend says (`schema_refusal`: the schema does not compile, or its automaton does not build
        in time). A task's own schema that is refused is a user error, raised before any generation; on a
        per-item task (JSONSchemaBench) a refused item is a scored sample with no text, as `ar-grammar`
        treats its refusals, and the rest of the cell goes on."""
        if not self.params.grammar:
            return {}
        refusal = getattr(backend, "schema_refusal", None)
        if refusal is None:
            raise BenchError(
                f"`grammar` needs a diffusion backend that decodes under a schema's automaton; "
                f"{type(backend).__name__} does not"
            )
        if not spec.items:
            why = refusal(spec.schema)
            if why is not None:
                raise BenchError(why)
            return {}
        reasons: dict[str, str | None] = {}
        out: dict[int, str] = {}
        for i in range(n):
            schema = spec.for_sample(i).schema
            key = json.dumps(schema)
            if key not in reasons:
                reasons[key] = refusal(schema)
            if reasons[key] is not None:
                out[i] = str(reasons[key])
        return out

    def constrained(self, sp: SamplingParams, spec: TaskSpec, index: int) -> SamplingParams:
        """`sp` with the schema sample `index` answers when `grammar` is on (its item's, per-item tasks)."""
        if not self.params.grammar:
            return sp
        from dataclasses import replace

        return replace(sp, json_schema=spec.for_sample(index).schema)

    def agent_loop(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        """One episode per sample (systems/agent_loop.py) with `DLMPolicy` (systems/agent_steps.py)."""
        from systems.agent_steps import DLMPolicy, step_task

        backend = ctx.backend(self.params.role, task=step_task(spec))  # type: ignore[call-arg]
        knobs = self.params.knobs()
        temperature = knobs.pop("temperature", None)
        sp = SamplingParams(
            temperature=temperature if temperature is not None else _backend_temperature(backend),
            extra=tuple(sorted(knobs.items())),
        )
        return run_agent_loop(spec, n, seed, DLMPolicy(backend, sp), self.params.loop_limits(), self.name)

    def generate_from_prompts(
        self, spec: TaskSpec, prompts: Sequence[str], seed: int, ctx: RunContext
    ) -> GenerationResult:
        """One record per prompt (sample index = position); AoD calls this with its edited prompts."""
        backend = ctx.backend(self.params.role, task=spec)  # type: ignore[call-arg]
        knobs = self.params.knobs()
        if "gen_length" not in knobs and getattr(backend, "gen_length_from_task", False) is True:
            # a pretrained DLM (LLaDA-8B): the canvas from what the task's records need, never a fixed cut
            from systems.gen_limits import dlm_response_shape

            steps = knobs.get("steps") or backend.default_sampler().steps
            gen, block = dlm_response_shape(spec, int(steps))
            knobs["gen_length"] = gen
            knobs.setdefault("block_length", block)
        temperature = knobs.pop("temperature", None)
        sp = SamplingParams(
            temperature=temperature if temperature is not None else _backend_temperature(backend),
            extra=tuple(sorted(knobs.items())),
        )
        refused = self.refused_schemas(spec, len(prompts), backend)
        requests = [
            GenerationRequest.chat(p, self.constrained(sp, spec, i), seed, i)
            for i, p in enumerate(prompts)
            if i not in refused
        ]
        usage = Usage()
        samples: list[Sample] = [
            Sample(i, "", "refused", None, None, {"item_id": spec.for_sample(i).meta.get("item_id"), "grammar_refused": why})
            for i, why in refused.items()
        ]  # fmt: skip
        t0 = time.perf_counter()
        bs = self.params.batch_size
        for start in range(0, len(requests), bs):
            batch = requests[start : start + bs]
            try:
                comps = backend.generate(batch)
            except BenchError:
                raise
            except Exception as exc:  # a harness failure, never a model failure
                for r in batch:
                    samples.append(
                        Sample(
                            r.sample_index,
                            "",
                            "error",
                            f"{type(exc).__name__}: {exc}",
                            SampleStatus.BACKEND_ERROR,
                        )
                    )
                continue
            for r, c in zip(batch, comps, strict=True):
                status = SampleStatus.BACKEND_ERROR if c.error else None
                meta = {"nfe": c.nfe}
                item = spec.item_for(r.sample_index)
                if item is not None:  # a per-item task: the sample names its item
                    meta["item_id"] = item.id
                samples.append(Sample(r.sample_index, c.text, c.finish_reason, c.error, status, meta))
                usage.add_call(c.tokens_in, c.tokens_out, c.cached, c.nfe, c.cost_usd)
        usage.seconds = time.perf_counter() - t0
        samples.sort(key=lambda x: x.index)
        trace = [
            {
                "event": "llada_generate",
                "backend": backend.identity().get("kind"),
                "knobs": dict(sp.extra) | {"temperature": sp.temperature},
                "grammar": self.params.grammar,
                "grammar_refused": len(refused),
                "prompt_0": prompts[0] if prompts else "",
                "n": len(prompts),
                "nfe": usage.nfe,
            }
        ]
        return GenerationResult(samples=samples, trace=trace, usage=usage)


class LLaDAGrammarSystem(LLaDASystem):
    """`llada-grammar` (ours): `llada` decoding under the task schema's token automaton.

    The DINGO-style constraint (Suresh et al. 2025; systems/backends/schema_dfa.py) picks each step's x0
    as the best canvas the schema's regular language accepts, so every record parses and validates
    whatever the model; what the DLM still decides is the content, list lengths and string lengths. The
    same prompt, sampler and budget as `llada`, so the pair isolates what the constraint adds."""

    name = "llada-grammar"

    def __init__(self, params: dict | None = None) -> None:
        super().__init__({"grammar": True, **(params or {})})


def pool_hints(pools: Mapping[str, Sequence[str]], seed: int, index: int) -> list[tuple[str, str]]:
    """One `(field, value)` hint per pooled field for sample `index`: a distributional hint.

    The value is drawn from a private RNG per (seed, sample index), so sample i gets the same value
    whatever else is in the prompt, and different samples get different values (the hint spreads a
    field over its pool instead of pinning one value in every record). Empty pools are skipped.
    """
    rng = sample_rng(seed, index, "llada-hint-pools")
    return [(f, str(rng.choice(list(values)))) for f, values in pools.items() if values]


def joint_hints(
    joint: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]], seed: int, index: int
) -> list[tuple[str, str]]:
    """One row of each joint pool for sample `index`, as `(field, value)` hints (a private RNG per
    (seed, index), like `pool_hints`, so a sample's row does not depend on the rest of the prompt)."""
    rng = sample_rng(seed, index, "llada-joint-pools")
    out: list[tuple[str, str]] = []
    for fields, rows in joint:
        if rows:
            out += list(zip(fields, (str(v) for v in rng.choice(list(rows))), strict=True))
    return out


def with_pool_hints(
    hints: list[tuple[str, str]],
    pools: Mapping[str, Sequence[str]],
    seed: int,
    index: int,
    joint: Sequence[tuple[Sequence[str], Sequence[Sequence[str]]]] = (),
) -> list[tuple[str, str]]:
    """Fixed hints with the pooled fields' drawn values, then each joint pool's drawn row (a drawn
    field replaces its fixed hint)."""
    if not pools and not joint:
        return hints
    drawn = {f for fields, _ in joint for f in fields}
    fixed = [(k, v) for k, v in hints if k not in pools and k not in drawn]
    return (
        fixed
        + pool_hints({f: v for f, v in pools.items() if f not in drawn}, seed, index)
        + joint_hints(joint, seed, index)
    )


def _backend_temperature(backend: Any) -> float:
    """The backend's own default temperature (the request carries one, so it must be explicit)."""
    try:
        return float(backend.default_sampler().temperature)
    except AttributeError:
        return 0.0


class LLaDASkeletonParams(LLaDAParams):
    """`llada` params plus the per-item (JSONSchemaBench) settings of systems.item_skeleton."""

    draws: int = Field(16, ge=1, description="per-item tasks: records drawn from each schema's grammar")
    train_schemas: int = Field(
        10, ge=1, description="per-item tasks: schemas per split whose draws train the shared infiller"
    )
    max_tokens: int = Field(192, ge=16, description="per-item tasks: ar-grammar's budget the bounds fit")


class LLaDASkeletonSystem(LLaDASystem):
    """`llada-skeleton` (ours): the schema's JSON skeleton is on the canvas; the DLM fills value slots.

    Optional keys and array lengths are drawn per sample from the references' frequencies; each slot has a
    token budget; slot-pad tokens are stripped; enum slots may only use pieces of enum values and are
    snapped to the closest one; number slots may only use number characters and fall back to a reference
    value when they do not parse. Every repair is counted in the trace.
    """

    name = "llada-skeleton"

    def __init__(self, params: dict | None = None) -> None:
        self.params = validate_params(LLaDASkeletonParams, {"k_shots": 0, **(params or {})}, self.name)
        if self.params.grammar:
            raise BenchError(
                "llada-skeleton: `grammar` does not apply (the skeleton already fixes the structure); "
                "use llada-grammar for decoding under the schema's token automaton"
            )

    def generate(self, spec: TaskSpec, n: int, seed: int, ctx: RunContext) -> GenerationResult:
        if is_multi_turn(spec):
            raise BenchError(
                "llada-skeleton does not drive the multi-turn agent loop (bfcl/multi_turn_base); use llada"
            )
        if spec.items and not is_tool_item(spec.items[0].meta):
            # schema-only tasks (JSONSchemaBench): skeleton and infiller from the schema; BFCL's tool items
            # take the call-skeleton path in infill_from_prompts
            from systems.item_skeleton import generate_item_skeletons

            return generate_item_skeletons(self, spec, n, seed, ctx)
        return self.infill_from_prompts(spec, self.prompts(spec, n, seed), seed, ctx)

    def infill_from_prompts(
        self, spec: TaskSpec, prompts: Sequence[str], seed: int, ctx: RunContext
    ) -> GenerationResult:
        from systems.skeleton import build_record, segments
        from systems.skeleton_infill import InfillRow, cached_infill

        backend = ctx.backend(self.params.role, task=spec)  # type: ignore[call-arg]
        if not hasattr(backend, "infill"):
            raise BenchError(f"the {self.params.role!r} backend cannot infill skeletons")
        if spec.items and is_tool_item(spec.items[0].meta):  # BFCL: per-item call skeletons, names as enums
            from systems.skeleton_calls import infill_tool_calls

            return infill_tool_calls(spec, prompts, seed, backend, self.params.knobs(skeleton=True))
        plan = backend.skeleton_plan(spec)
        trees, rows, rngs = [], [], []
        for i, prompt in enumerate(prompts):
            rng = sample_rng(seed, i, "skeleton")
            tree = plan.sample(rng)
            plan.shrink(tree, lambda t: backend.skeleton_fits(segments(t)))
            row_seed = int(stable_hash({"seed": seed, "i": i, "salt": "skeleton-noise"}, 8), 16)
            trees.append(tree)
            rngs.append(rng)
            rows.append(InfillRow(prompt, segments(tree), row_seed))
        usage = Usage()
        samples: list[Sample] = []
        repairs_by_kind: dict[str, int] = {}
        t0 = time.perf_counter()
        try:
            results = cached_infill(backend, rows, self.params.knobs(skeleton=True))
        except BenchError:
            raise
        except Exception as exc:
            err = f"{type(exc).__name__}: {exc}"
            samples = [Sample(i, "", "error", err, SampleStatus.BACKEND_ERROR) for i in range(len(rows))]
            return GenerationResult(samples, [{"event": "skeleton_infill", "error": err}], usage)
        for i, (tree, res, rng) in enumerate(zip(trees, results, rngs, strict=True)):
            record, repairs = build_record(tree, res.slot_texts, plan, rng)
            for r in repairs:
                repairs_by_kind[r.kind] = repairs_by_kind.get(r.kind, 0) + 1
            samples.append(
                Sample(
                    i,
                    json.dumps(record, ensure_ascii=False),
                    "stop",
                    meta={"nfe": res.nfe, "repairs": len(repairs)},
                )
            )
            usage.add_call(res.tokens_in, res.tokens_out, res.cached, res.nfe)
        usage.seconds = time.perf_counter() - t0
        trace = [
            {
                "event": "skeleton_infill",
                "knobs": self.params.knobs(skeleton=True),
                "prompt_0": prompts[0] if prompts else "",
                "n": len(prompts),
                "slots": sum(sum(1 for s in r.segs if not isinstance(s, str)) for r in rows),
                "repairs": repairs_by_kind,
                "nfe": usage.nfe,
            }
        ]
        return GenerationResult(samples=samples, trace=trace, usage=usage)
