"""Tasks: datasets in their upstream formats -> JSON records, a derived schema and one seeded split.

Public API (others call these): `load_task`, `list_tasks`, `expand_task_pattern`, `resolve_data_dir`.
Importing this package is cheap: loaders are imported through the task registry on first use.
"""

from .datadir import ENV_VAR, default_cache_dir, resolve_data_dir
from .loading import expand_task_pattern, list_tasks, load_task, resolve_family

__all__ = [
    "ENV_VAR",
    "default_cache_dir",
    "expand_task_pattern",
    "list_tasks",
    "load_task",
    "resolve_data_dir",
    "resolve_family",
]
