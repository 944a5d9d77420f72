"""aod-bench core: CLI, suite schema, runner, run store, call cache, tasks, stats."""

__version__ = "0.1.0"
