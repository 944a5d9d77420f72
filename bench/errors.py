"""User-facing errors: the CLI prints their message (no traceback) and exits with status 2."""


class BenchError(Exception):
    """An error caused by user input (suite, data dir, CLI flags) that we can explain in one line."""


class SuiteError(BenchError):
    """A malformed suite; the message names the file, line and key."""


class DataError(BenchError):
    """Missing or corrupt dataset files."""


class BackendUnavailable(BenchError):
    """A model/backend cannot be loaded here (missing package, weights, CUDA)."""
