"""aod-bench core: CLI, suite schema, runner, run store, call cache, tasks, stats."""

__version__ = "0.1.0"

# BENCH_PORTABLE_KERNELS=1 pins torch's, MKL's, oneDNN's and numpy's kernels (bench/kernels.py). They
# read the settings once, when they load, so this runs on the first import of bench, before torch.
from bench import kernels as _kernels  # noqa: E402

_kernels.pin()
