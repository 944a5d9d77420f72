"""Metrics of structured (JSON) generation: one module per family, registered lazily in metrics.registry.

Entry points: `metrics.scoring.score_cell` (the runner and `bench score`), `metrics.extract.extract_record`
(one output -> one record or a classified failure), `metrics.registry.DEFAULT_METRICS`. Importing any of
these loads no model; model-backed metrics ask the caller's resources for an embedder or scorer lazily.
Definitions and choices: docs/metrics.md.
"""
