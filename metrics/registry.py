"""Registers every built-in metric lazily ("module:attr"), with the metadata reports and suites read.

Meta keys: `better` ("up" / "down" / None for diagnostics without a direction), `family`, `needs` (models
the metric calls: "embedder", "scorer"), `summary` (one line for `bench list metrics`), `version`
(bumped when a definition changes, recorded with every score so re-scoring is traceable).
Importing this module imports nothing but the registry.
"""

from __future__ import annotations

from bench.registry import METRICS

_BUILTINS: list[tuple[str, str, str | None, str, tuple[str, ...], str]] = [
    # name, "module:function", better, family, needs, summary
    (
        "parse_rate",
        "metrics.validity:parse_rate",
        "up",
        "structure",
        (),
        "share of samples holding a parseable JSON object",
    ),
    (
        "schema_valid",
        "metrics.validity:schema_valid",
        "up",
        "structure",
        (),
        "share of samples valid under the task's JSON Schema (Draft 2020-12)",
    ),
    (
        "tsr",
        "metrics.validity:tsr",
        "up",
        "structure",
        (),
        "task success: schema-valid and the default rubric (with the family's code checks) passes",
    ),
    (
        "tsr_judge",
        "metrics.validity:tsr_judge",
        "up",
        "structure",
        (),
        "tsr and the LLM judge's yes on every rubric question (NaN without a judge)",
    ),
    (
        "missing_required",
        "metrics.validity:missing_required",
        "down",
        "structure",
        (),
        "share of parsed records missing a required key (per-field counts in info)",
    ),
    (
        "type_violations",
        "metrics.validity:type_violations",
        "down",
        "structure",
        (),
        "share of parsed records with a value of the wrong type",
    ),
    (
        "enum_violations",
        "metrics.validity:enum_violations",
        "down",
        "structure",
        (),
        "share of parsed records with a value outside its enum/const",
    ),
    (
        "truncation_rate",
        "metrics.validity:truncation_rate",
        "down",
        "structure",
        (),
        "share of samples cut off before the JSON closed",
    ),
    (
        "harness_failures",
        "metrics.validity:harness_failures",
        None,
        "structure",
        (),
        "samples lost to backend errors/timeouts (excluded from denominators)",
    ),
    (
        "field_overlap",
        "metrics.memorization:field_overlap",
        "down",
        "memorization",
        (),
        "share of (path, value) leaves also found in the references",
    ),
    (
        "novelty",
        "metrics.memorization:novelty",
        "up",
        "memorization",
        (),
        "share of word 3-grams absent from the references",
    ),
    (
        "diversity",
        "metrics.lexical:distinct_2",
        "up",
        "diversity",
        (),
        "distinct-2: unique / all word bigrams over the cell",
    ),
    (
        "distinct_1",
        "metrics.lexical:distinct_1",
        "up",
        "diversity",
        (),
        "unique / all word unigrams over the cell",
    ),
    (
        "distinct_2",
        "metrics.lexical:distinct_2",
        "up",
        "diversity",
        (),
        "unique / all word bigrams over the cell (same as diversity)",
    ),
    (
        "distinct_3",
        "metrics.lexical:distinct_3",
        "up",
        "diversity",
        (),
        "unique / all word trigrams over the cell",
    ),
    (
        "self_bleu",
        "metrics.lexical:self_bleu",
        "down",
        "diversity",
        (),
        "mean BLEU-4 of each record against the cell's other records (0..1)",
    ),
    (
        "entropy",
        "metrics.lexical:entropy",
        "up",
        "diversity",
        (),
        "Shannon entropy (nats) of the cell's word unigrams",
    ),
    (
        "similarity",
        "metrics.semantic:similarity",
        "up",
        "semantic",
        ("embedder",),
        "mean max cosine of each record to the holdout",
    ),
    (
        "perplexity",
        "metrics.perplexity:perplexity",
        "down",
        "fluency",
        ("scorer",),
        "exp(NLL per token) of compact JSON under the scorer LM",
    ),
    (
        "bleu",
        "metrics.reference:bleu",
        "up",
        "reference",
        ("embedder",),
        "sacrebleu corpus BLEU vs each record's nearest holdout record (x100)",
    ),
    (
        "rouge_l",
        "metrics.reference:rouge_l",
        "up",
        "reference",
        ("embedder",),
        "ROUGE-L F1 (stemmed) vs nearest holdout record (x100)",
    ),
    (
        "meteor",
        "metrics.reference:meteor",
        "up",
        "reference",
        ("embedder",),
        "nltk METEOR vs nearest holdout record (x100; WordNet variant in info)",
    ),
]

#: Metrics scored when a suite names none: every paper metric plus the structure diagnostics.
DEFAULT_METRICS: list[str] = [
    "parse_rate",
    "schema_valid",
    "tsr",
    "field_overlap",
    "similarity",
    "diversity",
    "distinct_1",
    "distinct_3",
    "self_bleu",
    "novelty",
    "entropy",
    "perplexity",
    "bleu",
    "rouge_l",
    "meteor",
    "missing_required",
    "type_violations",
    "enum_violations",
    "truncation_rate",
    "harness_failures",
]

#: Metrics computable from stored samples alone (no embedder, no scorer).
MODEL_FREE_METRICS: list[str] = [name for name, _, _, _, needs, _ in _BUILTINS if not needs]

#: Definitions changed since version 1. tsr 2: the family code checks of metrics/rubrics/ are part of it.
_VERSIONS: dict[str, int] = {"tsr": 2, "tsr_judge": 2}

for _name, _ref, _better, _family, _needs, _summary in _BUILTINS:
    METRICS.register(
        _name,
        _ref,
        better=_better,
        family=_family,
        needs=_needs,
        summary=_summary,
        version=_VERSIONS.get(_name, 1),
    )

# Opt-in synthetic-data quality metrics (docs/metrics.md, "Quality"): they need the `[quality]` extra
# (mauve-text, prdc, sdmetrics, rapidfuzz, scikit-learn), so they are in neither list above.
_QUALITY: list[tuple[str, str, str | None, tuple[str, ...], str]] = [
    ("mauve", "metrics.fidelity:mauve", "up", ("embedder",), "MAUVE of the records against the holdout"),
    ("precision", "metrics.fidelity:precision", "up", ("embedder",), "k-NN precision (Naeem et al.)"),
    ("recall", "metrics.fidelity:recall", "up", ("embedder",), "k-NN recall (Naeem et al.)"),
    ("density", "metrics.fidelity:density", "up", ("embedder",), "k-NN density (Naeem et al.)"),
    ("coverage", "metrics.fidelity:coverage", "up", ("embedder",), "k-NN coverage of the holdout"),
    ("marginal_fidelity", "metrics.fidelity:marginal_fidelity", "up", (), "SDMetrics KS/TV complement"),
    ("pair_fidelity", "metrics.fidelity:pair_fidelity", "up", (), "SDMetrics contingency similarity"),
    (
        "dcr_share_closer_to_train",
        "metrics.privacy:dcr_share_closer_to_train",
        None,
        ("embedder",),
        "share of records closer to a reference than to the holdout (0.5 ideal)",
    ),
    (
        "near_copy_rate",
        "metrics.privacy:near_copy_rate",
        "down",
        (),
        "records within 0.1 edits of a reference",
    ),
    ("tstr", "metrics.utility:tstr", "up", (), "train on synthetic, test on real: accuracy"),
    ("tstr_ratio", "metrics.utility:tstr_ratio", "up", (), "TSTR accuracy over train-on-real accuracy"),
]

#: The quality table's columns (reports), in this order.
QUALITY_METRICS: list[str] = [name for name, *_ in _QUALITY]

for _name, _ref, _better, _needs, _summary in _QUALITY:
    METRICS.register(_name, _ref, better=_better, family="quality", needs=_needs, summary=_summary, version=1)

# Opt-in tool-call metrics for `bfcl/<category>` (docs/metrics.md, "Tool calls"): BFCL's AST semantics and
# a failure taxonomy; meaningful only on BFCL tasks, so in neither default list.
#: The failure taxonomy of tool calls (metrics/toolcalls.py classifies into these, in this order).
TOOLCALL_FAILURE_CLASSES = (
    "invalid_syntax",
    "wrong_function",
    "missing_required",
    "unexpected_argument",
    "wrong_type",
    "wrong_value",
    "hallucinated_call",
    "call_count_mismatch",
)
_TOOLCALLS: list[tuple[str, str, str | None, str]] = [
    ("ast_accuracy", "metrics.toolcalls:ast_accuracy", "up", "BFCL AST accuracy on call-expecting items"),
    ("irrelevance_accuracy", "metrics.toolcalls:irrelevance_accuracy", "up", "no call on irrelevance items"),
] + [
    (f"failure_{k}", f"metrics.toolcalls:failure_{k}", "down", f"share of tool-call samples failing as {k}")
    for k in TOOLCALL_FAILURE_CLASSES
]

#: The tool-call table's columns (reports), in this order.
TOOLCALL_METRICS: list[str] = [name for name, *_ in _TOOLCALLS]

for _name, _ref, _better, _summary in _TOOLCALLS:
    METRICS.register(_name, _ref, better=_better, family="toolcalls", needs=(), summary=_summary, version=1)

# Opt-in multi-turn tool-call metrics for `bfcl/multi_turn_base` (metrics/multiturn.py): BFCL's state
# checker, and the DLLM Agent study's rounds and tool invocations per solved item.
MULTI_TURN_FAILURE_CLASSES = (
    "invalid_episode",
    "force_terminated",
    "empty_turn",
    "state_mismatch",
    "response_mismatch",
)
_MULTITURN: list[tuple[str, str | None, str]] = [
    ("multi_turn_accuracy", "up", "share of episodes passing BFCL's multi-turn state and response checks"),
    ("rounds_per_solved", "down", "mean model queries per solved episode"),
    ("tool_calls_per_solved", "down", "mean tool invocations per solved episode"),
    ("rounds_per_item", None, "mean model queries per episode"),
    ("tool_calls_per_item", None, "mean tool invocations per episode"),
    ("tool_error_rate", "down", "share of tool invocations that raised in a backend"),
    ("invalid_step_rate", "down", "share of model steps with no decodable call record"),
] + [(f"mt_failure_{k}", "down", f"share of episodes failing as {k}") for k in MULTI_TURN_FAILURE_CLASSES]

#: The multi-turn table's columns (reports), in this order.
MULTI_TURN_METRICS: list[str] = [name for name, *_ in _MULTITURN]

for _name, _better, _summary in _MULTITURN:
    METRICS.register(
        _name,
        f"metrics.multiturn:{_name}",
        better=_better,
        family="toolcalls",
        needs=(),
        summary=_summary,
        version=1,
    )

# Opt-in JSONSchemaBench metrics (Geng et al. 2025; metrics/jsonschemabench.py): for per-item tasks
# (`jsonschemabench/<split>`), so in neither default list; bootstrap 95% intervals go to the cell info.
_JSONSCHEMABENCH: list[tuple[str, str | None, str]] = [
    ("declared_coverage", "up", "share of samples whose engine compiled the schema (meta.declared)"),
    ("empirical_coverage", "up", "share of samples valid against their item's schema (2020-12, formats)"),
    ("compliance", "up", "empirical coverage over the declared samples"),
    ("compile_seconds", "down", "mean grammar compile time per schema"),
    ("ttft_seconds", "down", "mean time to first token (NaN where the backend does not stream)"),
    ("tpot_seconds", "down", "mean seconds per output token (includes prompt processing)"),
    ("tokens_per_s", "up", "output tokens per generation second"),
]
for _name, _better, _summary in _JSONSCHEMABENCH:
    METRICS.register(
        _name,
        f"metrics.jsonschemabench:{_name}",
        better=_better,
        family="jsonschemabench",
        needs=(),
        summary=_summary,
        version=1,
    )
