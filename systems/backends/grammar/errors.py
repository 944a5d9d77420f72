"""The one error of the grammar compiler."""

from __future__ import annotations

from bench.errors import BenchError


class UnsupportedSchema(BenchError):
    """The schema uses a keyword (or a combination) that cannot be turned into a sound grammar.

    The message names the keyword and its JSON pointer in the schema, so a user knows what to change.
    """
