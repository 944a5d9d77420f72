"""A cell that starts a process of its own runs in a worker process as it does inline.

`llada-grammar` builds each schema's token automaton in a forked child that it can stop at a time
budget (systems/backends/schema_dfa.py). Until 2026-12-06 the pool's workers were daemonic processes,
which multiprocessing forbids to have children, so under `bench run --workers N` (the embedded
profile's default is 2) every `llada-grammar` cell failed with "daemonic processes are not allowed to
have children" while the same cell passed inline. This runs a real `llada-grammar` cell, on a DLM
trained for a few steps, through the process pool.
"""

from __future__ import annotations

import os
from pathlib import Path

from filesuite import no_html  # noqa: F401 (autouse fixture)

from bench.runner import RunOptions, run_suite
from bench.store import RunStore

SUITE = """\
name: grammar-in-a-worker
profile: embedded
seeds: 1
samples: 2
models:
  tiny: {backend: mdlm, model: embedded-mdlm, per_task: true,
         params: {train_steps: 2, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, note_kinds: [], seed: 0}}
tasks:
  - {name: demo/booking, n_references: 12, n_holdout: 8}
systems:
  g: {type: llada, models: {dlm: tiny}, params: {grammar: true}}
metrics: [parse_rate]
"""


def _workers() -> list[int]:
    """This process's children started by the pool (multiprocessing's spawn entry point; not its
    resource tracker, which a spawn context starts once and keeps)."""
    pid = os.getpid()
    path = Path(f"/proc/{pid}/task/{pid}/children")
    kids = [int(x) for x in path.read_text().split()] if path.exists() else []
    out = []
    for kid in kids:
        try:
            if b"spawn_main" in Path(f"/proc/{kid}/cmdline").read_bytes():
                out.append(kid)
        except FileNotFoundError:
            pass
    return out


def test_a_grammar_cell_runs_in_a_worker_process(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE)
    opts = RunOptions(out=str(tmp_path / "run"), workers=1, progress=False, cache_dir=str(tmp_path / "cache"))
    res = run_suite(suite, opts=opts)
    assert not res.failed_cells, res.failed_cells
    (cell,) = list(RunStore(res.run_dir).iter_cells())
    assert cell.status == "ok"
    # the automaton decodes every record as JSON of the schema's shape, even from a 2-step model
    assert cell.metrics["parse_rate"] == 1.0
    # the worker (no longer daemonic) was stopped and joined at the end of the run
    assert _workers() == []
