"""Reports over the run store: aggregation views, the table model and its LaTeX / Markdown / CSV / HTML
renderers, plots, paired comparison and regression gates. Nothing here imports a model.

`reports.load_run(RUN_DIR)` is the tidy entry point for notebooks (imported lazily: pandas is heavy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    import pandas as pd


def load_run(run_dir: Path | str) -> pd.DataFrame:
    """Tidy frame (system, task, seed, metric, value, status) of a run; see reports.aggregate.load_run."""
    from reports.aggregate import load_run as _load_run

    return _load_run(run_dir)


def __getattr__(name: str) -> Any:
    if name in ("summarize", "write_results_csv"):
        from reports import aggregate

        return getattr(aggregate, name)
    raise AttributeError(name)
