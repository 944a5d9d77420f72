"""Problems found in a suite: one small typed value per error, so that every error is reported in one pass.

Why a value and not an exception per error: `bench validate` must list all the typos of a suite at once,
each with the file, line and key it concerns. Checks return `Problem`s; `SuiteProblems` carries them all
to the CLI, which prints one `error:` line per problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.errors import SuiteError


def printable(text: str) -> str:
    """Text safe for any terminal and UTF-8 file: NUL, other control characters and lone surrogates
    become escapes (a suite may hold them in names; printing them raw crashes or corrupts output)."""
    out = []
    for ch in text:
        o = ord(ch)
        if ch in "\t" or (o >= 32 and o != 127 and not 0xD800 <= o <= 0xDFFF):
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)


def fmt_loc(loc: tuple[Any, ...]) -> str:
    """('systems', 'ar', 'params') -> 'systems.ar.params'; ('tasks', 0, 'name') -> 'tasks[0].name'."""
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


@dataclass(frozen=True)
class Problem:
    """One error in a suite: where it is (file, 1-based line or None, dotted key or '') and what is wrong."""

    file: str
    line: int | None
    key: str
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        key = f" key {self.key!r}:" if self.key else ""
        return printable(f"{where}:{key} {self.message}")


class SuiteProblems(SuiteError):
    """A suite with one or more problems; str() is one rendered problem per line."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(p.render() for p in self.problems))
