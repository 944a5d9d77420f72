"""Per-item grammar decoding (JSONSchemaBench): compile each item's schema, generate, record what was declared.

JSONSchemaBench (Geng et al. 2025) scores an engine on schemas it may refuse: *declared coverage* is the
share of schemas the engine compiled, and a refused schema is a scored failure of that engine, never a
crashed run. So here a schema that does not compile becomes a sample with empty text, `meta.declared =
False` and the reason, and the cell goes on with the next item. Every sample names its schema in
`meta.schema_id` and carries the efficiency numbers the benchmark reports (`compile_seconds`, `seconds`,
`tokens_out`), so coverage, compliance and speed can be re-checked sample by sample.

Two compilers (the `grammar` param of `ar-grammar`):
  - `ours`: systems.backends.grammar (bounded strings, so a record always fits the token budget); the
    compile time covers the bound fitting and llama.cpp's parse of the GBNF.
  - `llama_cpp`: llama-cpp-python's own converter (`llama_cpp.llama_grammar.json_schema_to_gbnf`), the peer
    baseline; its GBNF travels in `SamplingParams.extra["gbnf"]` (part of the call-cache key) and the
    llama.cpp backend parses it.
Time to first token is not measured (the backends do not stream); metrics report it NaN with the reason.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from bench.types import (
    Completion,
    GenerationRequest,
    GenerationResult,
    RunContext,
    Sample,
    SampleStatus,
    SamplingParams,
    TaskSpec,
    Usage,
)

COMPILERS = ("ours", "llama_cpp")


def item_meta(spec: TaskSpec, index: int, comp: Completion | None = None) -> dict[str, Any]:
    """What a per-item sample names: its item and schema, plus the backend's timing (empty for a task
    without items). Engines that take any schema (unconstrained `ar`) declare every schema."""
    item = spec.item_for(index)
    if item is None:
        return {}
    meta: dict[str, Any] = {
        "item_id": item.id,
        "schema_id": item.meta.get("schema_id", item.id),
        "declared": True,
    }
    if comp is not None:
        meta.update(seconds=comp.seconds, tokens_out=comp.tokens_out)
    return meta


@dataclass
class Compiled:
    """One item's compile outcome: the decoding settings (None when refused), the time, the reason."""

    params: SamplingParams | None
    seconds: float
    reason: str | None = None


def gbnf_parses(vocab: Any, gbnf: str) -> bool:
    """Whether llama.cpp itself parses this GBNF. llama-cpp-python only parses a grammar when sampling
    starts, and a grammar it cannot parse then crashes the process (a NULL sampler), so every grammar is
    parsed here first, against the loaded model's vocabulary, and freed again."""
    import os

    import llama_cpp

    # In a forked child: llama.cpp's recursive parser overflows the C stack on some deep Github_hard
    # grammars (a segfault), which must refuse the schema, not kill the run.
    if not hasattr(os, "fork"):  # no fork (Windows): parse in process
        sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        return bool(sampler)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            ok = bool(llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root"))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def llama_vocab(backend: Any) -> Any:
    """The loaded model's vocabulary of a llama.cpp backend (None for any other backend)."""
    if str(backend.identity().get("backend", "")) != "llama_cpp":
        return None
    from systems.backends.llama_cpp import _load_llama

    return _load_llama(backend.path, backend.n_ctx, False, backend.n_threads)._model.vocab


def compile_item(
    system: Any, item: TaskSpec, preset: dict | None, compiler: str, llama: bool, vocab: Any = None
) -> Compiled:
    """Compile one item's schema with `compiler`; any failure is a refusal (declared=False), kept with its
    reason: a compiler crash on a real schema is the engine not supporting it, as the benchmark counts it."""
    from systems.ar import ARSystem

    t0 = time.perf_counter()
    try:
        if compiler == "llama_cpp":
            from llama_cpp import LlamaGrammar
            from llama_cpp.llama_grammar import json_schema_to_gbnf

            gbnf = json_schema_to_gbnf(json.dumps(item.schema))
            LlamaGrammar.from_string(gbnf, verbose=False)
            if vocab is not None and not gbnf_parses(vocab, gbnf):
                raise ValueError("llama.cpp cannot parse the converter's GBNF")
            base = ARSystem.sampling(system, item, preset)
            params = replace(base, json_schema=None, extra=(*base.extra, ("gbnf", gbnf)))
        else:
            params = system.sampling(item, preset)
            if llama and params.json_schema is not None:
                from systems.backends.grammar import llama_grammar

                grammar = llama_grammar(params.json_schema)  # cached: the backend reuses it
                if vocab is not None and not gbnf_parses(vocab, grammar._grammar):
                    raise ValueError("llama.cpp cannot parse the compiled GBNF")
    except RecursionError:
        return Compiled(None, time.perf_counter() - t0, "RecursionError: schema too deep for the compiler")
    except Exception as exc:  # noqa: BLE001 - a refusal or a compiler crash: both mean "not declared"
        return Compiled(None, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"[:500])
    return Compiled(params, time.perf_counter() - t0)


def item_requests(
    system: Any, spec: TaskSpec, n: int, seed: int, preset: dict | None = None
) -> tuple[list[GenerationRequest], list[list[int]]]:
    """The requests `ar-grammar` would send on a per-item task (refused schemas send none): what a dry run
    sizes. No backend is needed; llama.cpp's own GBNF parse is left to the run."""
    from systems.prompting import PromptParts

    compiled: dict[str, Compiled] = {}
    requests: list[GenerationRequest] = []
    for i in range(n):
        item = spec.for_sample(i)
        item_id = item.meta["item_id"]
        if item_id not in compiled:
            compiled[item_id] = compile_item(system, item, preset, system.params.grammar, llama=False)
        params = compiled[item_id].params
        if params is not None:
            prompt = PromptParts(item.instruction, item.schema, ()).render()
            requests.append(
                GenerationRequest.chat(prompt, params, seed, i, system=system.params.system_prompt)
            )
    return requests, [[] for _ in requests]


def generate_items(
    system: Any, spec: TaskSpec, n: int, seed: int, ctx: RunContext, compiler: str
) -> GenerationResult:
    """`ar-grammar` on a per-item task: sample i answers item i under that item's own grammar."""
    from systems.prompting import PromptParts

    if compiler not in COMPILERS:
        raise ValueError(f"ar-grammar: unknown grammar {compiler!r}; choose one of {', '.join(COMPILERS)}")
    backend = ctx.backend(system.role)
    preset = ctx.model_spec(system.role).get("sampling")
    vocab = llama_vocab(backend)
    llama = vocab is not None
    compiled: dict[str, Compiled] = {}
    requests: list[tuple[int, GenerationRequest]] = []
    samples: dict[int, Sample] = {}
    for i in range(n):
        item = spec.for_sample(i)
        item_id = item.meta["item_id"]
        if item_id not in compiled:
            compiled[item_id] = compile_item(system, item, preset, compiler, llama, vocab)
        c = compiled[item_id]
        meta = {**item_meta(spec, i), "compile_seconds": c.seconds, "grammar": compiler}
        if c.params is None:
            samples[i] = Sample(i, "", "unsupported", meta={**meta, "declared": False, "refused": c.reason})
            continue
        prompt = PromptParts(item.instruction, item.schema, ()).render()
        requests.append(
            (i, GenerationRequest.chat(prompt, c.params, seed, i, system=system.params.system_prompt))
        )
        samples[i] = Sample(i, "", meta=meta)
    usage = Usage()
    t0 = time.perf_counter()
    bs = system.params.batch_size
    for start in range(0, len(requests), bs):
        batch = requests[start : start + bs]
        for (i, _), comp in zip(batch, backend.generate([r for _, r in batch]), strict=True):
            usage.add_call(comp.tokens_in, comp.tokens_out, comp.cached, cost_usd=comp.cost_usd)
            s = samples[i]
            s.text, s.finish_reason, s.error = comp.text, comp.finish_reason, comp.error
            s.status = SampleStatus.BACKEND_ERROR if comp.error else None
            s.meta.update(seconds=comp.seconds, tokens_out=comp.tokens_out, cached=comp.cached)
    usage.seconds = time.perf_counter() - t0
    refused = {k: c.reason for k, c in compiled.items() if c.params is None}
    trace = [
        {
            "event": "item_grammar",
            "grammar": compiler,
            "model": backend.identity(),
            "n": n,
            "seed": seed,
            "items": len(compiled),
            "declared": len(compiled) - len(refused),
            "refused": refused,
            "compile_seconds": {k: c.seconds for k, c in compiled.items()},
        }
    ]
    return GenerationResult(samples=[samples[i] for i in range(n)], trace=trace, usage=usage)
