"""Reading a suite's YAML with limits, so that no file can hang, exhaust memory or crash the loader.

PyYAML's safe loader still accepts things that break later stages: an alias bomb (anchors nested ten
deep expand to 10^10 values), a recursive alias (a structure that contains itself), nesting deep enough
for a `RecursionError`, integers too long for `int()`, non-finite floats, dates and binary blobs (not JSON),
and strings with NUL or lone surrogates (not valid in file names or UTF-8 files). Each is found here,
before anything is constructed, and reported as a `Problem` with its line.

Order: (1) size of the file; (2) an event scan (PyYAML's parser is iterative, its composer recursive),
bounding textual depth and the number of aliases; (3) composing the node graph; (4) an iterative walk of
that graph that measures the *expanded* size and depth (aliases counted each time they are used), finds
cycles, and checks every scalar; (5) only then constructing Python data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from bench.problems import Problem

MAX_BYTES = 1_000_000  # a suite is a page of YAML; a megabyte is already absurd
MAX_DEPTH = 48  # nesting levels (a real suite uses under 8)
MAX_ALIASES = 200  # uses of anchors
MAX_VALUES = 100_000  # values after expanding every alias
MAX_INT_DIGITS = 100  # no key of a suite needs a longer integer; Python refuses > 4300 digits

T = "tag:yaml.org,2002:"
PLAIN_TAGS = {T + "str", T + "int", T + "float", T + "bool", T + "null", T + "map", T + "seq", T + "merge"}
_INT_DIGITS = re.compile(r"[0-9a-fA-F]")
_FLOAT_SPECIAL = {".inf", "+.inf", "-.inf", ".nan"}


@dataclass
class Loaded:
    """The result of `load_yaml`: data and root node when there were no problems."""

    data: Any = None
    root: yaml.Node | None = None
    problems: list[Problem] = field(default_factory=list)


def _bad_chars(text: str) -> str | None:
    for ch in text:
        o = ord(ch)
        if o == 0:
            return "a NUL character"
        if 0xD800 <= o <= 0xDFFF:
            return f"a lone surrogate (U+{o:04X})"
        if o < 32 and ch not in "\t\n\r":
            return f"a control character (U+{o:04X})"
    return None


def _label(key: yaml.Node) -> Any:
    return key.value if isinstance(key, yaml.ScalarNode) else "?"


def _children(node: yaml.Node, path: tuple[Any, ...]) -> Iterator[tuple[yaml.Node, tuple[Any, ...], bool]]:
    """(child, its path, is_key) for a node; keys come before their value."""
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield k, (*path, _label(k)), True
            yield v, (*path, _label(k)), False
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            yield v, (*path, i), False


def _scalar_problem(node: yaml.Node, is_key: bool) -> str | None:
    if node.tag not in PLAIN_TAGS:
        kind = node.tag.replace(T, "!!")
        return f"YAML type {kind} is not allowed in a suite (only strings, numbers, booleans, null, lists and mappings); quote the value if it is text"
    if is_key and node.tag not in (T + "str", T + "merge"):
        return f"a key must be a string, got {node.tag.replace(T, '')} {str(node.value)[:40]!r}; quote it"
    if not isinstance(node, yaml.ScalarNode):
        return None
    value = str(node.value)
    if node.tag == T + "str":
        bad = _bad_chars(value)
        return f"text holds {bad}, which no name, path or report can carry" if bad else None
    if node.tag == T + "int":
        digits = len(_INT_DIGITS.findall(value))
        if digits > MAX_INT_DIGITS:
            return f"an integer with {digits} digits is too large (at most {MAX_INT_DIGITS})"
    if node.tag == T + "float" and (value.lower() in _FLOAT_SPECIAL or _overflows(value)):
        return f"{value!r} is not a finite number"
    return None


def _overflows(value: str) -> bool:
    try:
        return not math.isfinite(float(value.replace("_", "")))
    except ValueError:
        return False


def _scan_events(text: str, file: str) -> list[Problem]:
    """Bound nesting and alias uses on the event stream (iterative: safe for any depth)."""
    depth = aliases = 0
    for ev in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                line = ev.start_mark.line + 1
                return [Problem(file, line, "", f"values are nested more than {MAX_DEPTH} levels deep")]
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
        elif isinstance(ev, yaml.AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                line = ev.start_mark.line + 1
                return [
                    Problem(file, line, "", f"more than {MAX_ALIASES} aliases (*name); expand them by hand")
                ]
    return []


def _walk(root: yaml.Node, file: str) -> list[Problem]:
    """Iterative DFS over the node graph: cycles, expanded size and depth, and every scalar."""
    from bench.problems import fmt_loc

    problems: list[Problem] = []
    state: dict[int, int] = {}  # id -> 1 open, 2 done
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, Iterator[tuple[yaml.Node, tuple[Any, ...], bool]], list[int]]] = []

    def line(n: yaml.Node) -> int:
        return n.start_mark.line + 1

    def enter(node: yaml.Node, path: tuple[Any, ...], is_key: bool) -> bool:
        msg = _scalar_problem(node, is_key)
        if msg:
            problems.append(Problem(file, line(node), fmt_loc(path), msg))
        state[id(node)] = 1
        if isinstance(node, yaml.ScalarNode):
            state[id(node)] = 2
            size[id(node)], depth[id(node)] = 1, 0
            return False
        stack.append((node, _children(node, path), []))
        return True

    enter(root, (), False)
    while stack:
        node, it, kids = stack[-1]
        nxt = next(it, None)
        if nxt is None:
            stack.pop()
            state[id(node)] = 2
            size[id(node)] = 1 + sum(size[k] for k in kids)
            depth[id(node)] = 1 + max((depth[k] for k in kids), default=0)
            if size[id(node)] > MAX_VALUES:
                return [
                    Problem(
                        file,
                        line(node),
                        "",
                        f"aliases expand this value to more than {MAX_VALUES:,} values (an alias bomb?)",
                    )
                ]
            if depth[id(node)] > MAX_DEPTH:
                return [
                    Problem(file, line(node), "", f"aliases nest values more than {MAX_DEPTH} levels deep")
                ]
            if stack:
                stack[-1][2].append(id(node))
            continue
        child, path, is_key = nxt
        seen = state.get(id(child))
        if seen == 1:
            return [Problem(file, line(child), fmt_loc(path), "recursive alias: this value contains itself")]
        if seen == 2:
            kids.append(id(child))
            continue
        if not enter(child, path, is_key):
            kids.append(id(child))
    return problems


def load_yaml(text: str, file: str) -> Loaded:
    """Parse suite text with every limit above; `problems` is empty exactly when `data` is usable."""
    if len(text) > MAX_BYTES:
        return Loaded(problems=[Problem(file, None, "", f"the file is larger than {MAX_BYTES:,} characters")])
    try:
        problems = _scan_events(text, file)
        if problems:
            return Loaded(problems=problems)
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return Loaded(root=None, data=None)
            problems = _walk(root, file)
            if problems:
                return Loaded(root=root, problems=problems)
            data = loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return Loaded(
            problems=[Problem(file, mark.line + 1 if mark else None, "", f"invalid YAML: {problem}")]
        )
    except (ValueError, RecursionError, OverflowError) as exc:  # defence in depth: limits above should hold
        return Loaded(
            problems=[Problem(file, None, "", f"cannot read this YAML: {type(exc).__name__}: {exc}")]
        )
    return Loaded(data=data, root=root)
