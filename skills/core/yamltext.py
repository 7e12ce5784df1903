"""The one YAML reader of the server: libyaml's C speed, with bounds that any text must respect.

Every YAML file the server reads (SKILL.md front matter, skill.yaml, pipelines from files and
from clients, registries) goes through here, because libyaml's C composer recurses once per
nesting level: `[[[[...` 50,000 deep overflows the C stack and the whole process dies with
SIGSEGV, which no `except` can catch. A billion-laughs document (aliases of aliases) is 600
bytes that expand to a billion nodes for anything that walks the data.

So, before composing, a text that *could* break a bound is scanned on libyaml's event stream,
which is produced without recursion: nesting depth, number of nodes with every alias counted
as the nodes it stands for, aliases inside their own anchor (recursive data). Most files
cannot break a bound at all (fewer indicator characters than the depth limit, no anchor,
small) and skip the scan. The commonest shape, a skill.yaml of block mappings and one-line
values, does not reach libyaml at all: `_yaml_plain` reads it within tighter bounds, so 1,000
skills load in well under the 300 ms budget.

A violated bound raises `YAMLLimitError`, a `yaml.MarkedYAMLError`: every call site already
reports YAML errors with their line and column, and reports these the same way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import yaml
from yaml.constructor import ConstructorError, SafeConstructor

from ._yaml_flow import deep_flow_bracket
from ._yaml_plain import FALLBACK, YAML, Scalar, read_plain

if TYPE_CHECKING:
    from yaml._yaml import Mark as _CMark  # the marks libyaml's events carry

    _Base = yaml.CSafeLoader  # the checker sees the C loader; the fallback below has the same methods
else:
    try:
        _Base = yaml.CSafeLoader
    except AttributeError:  # pragma: no cover - PyYAML built without libyaml
        _Base = yaml.SafeLoader

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_TEXT",
    "YAML",
    "Scalar",
    "YAMLError",
    "YAMLLimitError",
    "compose_yaml",
    "describe_yaml_error",
    "load_yaml",
    "mark_of",
    "read_bounded",
    "read_small",
]

MAX_TEXT = 1_048_576
"""Most characters in one YAML document (a hand-written pipeline is rarely above 20,000)."""
MAX_DEPTH = 100
"""Deepest nesting of mappings and sequences (a pipeline of 30 nested loops is about 70)."""
MAX_NODES = 200_000
"""Most values in one document, each alias counted as every value it repeats."""

_SMALL = 65_536
"""Files under this many bytes are read in one system call (`read_small`)."""

_INDICATORS = "[{-:?"
"""Characters of which every mapping or sequence needs at least one: fewer than MAX_DEPTH of
them, and the document cannot nest deeper than MAX_DEPTH."""

YAMLError = yaml.YAMLError


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document beyond one of the bounds above; says which, where, and how to fix it."""

    def __init__(self, problem: str, mark: yaml.Mark | _CMark | None = None) -> None:
        # libyaml's C mark has the fields of `yaml.Mark` that every reader of an error uses
        super().__init__(problem=problem, problem_mark=cast("yaml.Mark | None", mark))


class _Constructs(Protocol):
    """`construct_document` of PyYAML's loaders, typed (its stub leaves `node` untyped)."""

    def construct_document(self, node: yaml.Node) -> YAML:
        """The data `node` stands for."""
        ...


class _Loader(_Base):
    """The C loader whose scalar conversions report a bad value with its position.

    PyYAML's constructors raise a bare `ValueError` for a 5,000-digit integer (Python's
    int-from-text limit) or a date such as 2001-13-45; here that is a YAML error at the value.
    Only those two constructors are wrapped: every other value costs what it cost before.
    """


_Construct = Callable[["_Loader", yaml.ScalarNode], Scalar]


def _positioned(construct: _Construct) -> _Construct:
    def wrapped(loader: _Loader, node: yaml.ScalarNode) -> Scalar:
        try:
            return construct(loader, node)
        except (ValueError, OverflowError) as exc:
            raise ConstructorError(None, None, f"cannot read this value: {exc}", node.start_mark) from None

    return wrapped


for _tag, _construct in (
    ("tag:yaml.org,2002:int", SafeConstructor.construct_yaml_int),
    ("tag:yaml.org,2002:timestamp", SafeConstructor.construct_yaml_timestamp),
):
    _Loader.add_constructor(_tag, _positioned(_construct))


def read_bounded(path: Path) -> str:
    """A text file's content, at most one character past `MAX_TEXT` (the reader then refuses it).

    A multi-gigabyte file dropped where the server reads YAML or JSON is not read into memory.
    """
    text = read_small(path)
    if text is not None:
        return text
    with path.open(encoding="utf-8") as fh:
        return fh.read(MAX_TEXT + 1)


def read_small(path: Path) -> str | None:
    """The text of a small regular file in one `read`, or None: read it as a text file then.

    A third of the CPU time of a text-mode read, which matters for the 2,000 files 1,000 skills
    start with. None (not read here) when the file is missing, special, `_SMALL` bytes or more,
    holds a carriage return (text mode turns `\r\n` into `\n`) or is not UTF-8: the text-mode
    read then gives that file's text, or its error, exactly as before.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size >= _SMALL:
            return None
        data = os.read(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) != info.st_size or b"\r" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def load_yaml(text: str) -> YAML:
    """Parse YAML safely (no tags that build Python objects) within the bounds above.

    The plain shape of most files (block mappings and sequences of one-line scalars, small flow
    collections) is read directly, ~4x faster than building it through PyYAML's constructor;
    anything else, and every error, goes through the full loader.
    """
    data = read_plain(text)
    return compose_yaml(text)[1] if data is FALLBACK else data


def compose_yaml(text: str) -> tuple[yaml.Node | None, YAML]:
    """The node graph (values with their positions) and the plain data of one YAML document."""
    check_bounds(text)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        data = cast(_Constructs, loader).construct_document(node) if node is not None else None
    finally:
        loader.dispose()
    return node, data


def check_bounds(text: str) -> None:
    """Raise `YAMLLimitError` when `text` is too long, too deep, too big or recursive."""
    if len(text) > MAX_TEXT:
        raise YAMLLimitError(
            f"the document has {len(text):,} characters, more than the {MAX_TEXT:,} the server reads; "
            "split it or make it smaller"
        )
    deep = deep_flow_bracket(text, MAX_DEPTH)
    if deep is not None:
        _refuse_deep_flow(text, deep)
    if "&" in text or len(text) > 2 * MAX_NODES or sum(text.count(c) for c in _INDICATORS) >= MAX_DEPTH:
        _scan(text)


def _refuse_deep_flow(text: str, bracket: int) -> None:
    """Refuse flow collections nested past `MAX_DEPTH` at `bracket`, the first too deep by themselves.

    Such a text may be too deep for libyaml too, whose scanner, reading ahead, would refuse it
    first in its own words. So the event scan reads only up to that bracket: with the mappings
    and sequences around them our bound may break sooner, and the scan says where; else (it ends
    in the middle of a collection, a syntax error here) the bracket is where it breaks.
    """
    try:
        _scan(text[: bracket + 1])
    except YAMLLimitError:
        raise
    except yaml.YAMLError:
        pass
    line = text.count("\n", 0, bracket)
    raise _too_deep(yaml.Mark("<unicode string>", bracket, line, bracket - text.rfind("\n", 0, bracket) - 1, None, 0))


def _scan(text: str) -> None:
    """Walk libyaml's event stream (no recursion) and enforce depth, expanded size and no cycles."""
    parser = _Base(text)
    # Per open collection: its anchor, the nodes counted when it opened, the height of its tallest child.
    open_anchors: list[str | None] = []
    open_starts: list[int] = []
    tallest: list[int] = []
    anchors: dict[str | None, tuple[int, int]] = {}  # anchor -> (expanded nodes, height)
    nodes = 0
    try:
        while True:
            event = parser.get_event()
            if isinstance(event, yaml.NodeEvent):  # a scalar, an alias, or the start of a collection
                anchor = event.anchor
                kind = type(event)
                if kind is yaml.ScalarEvent or kind is yaml.AliasEvent:
                    size, height = 1, 1
                    if kind is yaml.AliasEvent:
                        found = anchors.get(anchor)
                        if found is None:
                            if anchor in open_anchors:
                                raise YAMLLimitError(
                                    f"the alias *{anchor} is inside its own anchor &{anchor}: "
                                    "the data would contain itself; repeat the values instead",
                                    event.start_mark,
                                )
                            continue  # an undefined alias: the composer reports it with its position
                        size, height = found
                    elif anchor is not None:
                        anchors[anchor] = (1, 1)
                    nodes += size
                    if tallest:
                        tallest[-1] = max(tallest[-1], height)
                        if len(tallest) + height > MAX_DEPTH:
                            raise _too_deep(event.start_mark)
                else:
                    nodes += 1
                    open_anchors.append(anchor)
                    open_starts.append(nodes)
                    tallest.append(0)
                    if len(tallest) > MAX_DEPTH:
                        raise _too_deep(event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor = open_anchors.pop()
                start = open_starts.pop()
                height = tallest.pop() + 1
                if anchor is not None:
                    anchors[anchor] = (nodes - start + 1, height)
                if tallest:
                    tallest[-1] = max(tallest[-1], height)
            elif type(event) is yaml.StreamEndEvent:
                return
            if nodes > MAX_NODES:
                raise YAMLLimitError(
                    f"the document holds more than {MAX_NODES:,} values (aliases counted as what they repeat); "
                    "make it smaller or use fewer aliases",
                    event.start_mark if event is not None else None,
                )
    finally:
        parser.dispose()


def _too_deep(mark: yaml.Mark | _CMark | None) -> YAMLLimitError:
    return YAMLLimitError(
        f"nested more than {MAX_DEPTH} levels deep (counting what aliases repeat); flatten the structure", mark
    )


def mark_of(error: yaml.YAMLError) -> tuple[int, int] | None:
    """1-based (line, column) of a YAML error, when the parser knows it."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    if mark is None:
        return None
    return mark.line + 1, mark.column + 1


def describe_yaml_error(error: yaml.YAMLError, line_offset: int = 0) -> str:
    """'at line L, column C: problem (while parsing ... started at line K)', in file lines."""
    problem_mark = getattr(error, "problem_mark", None)
    context_mark = getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    text = ""
    if problem_mark is not None:
        text = f"at line {problem_mark.line + 1 + line_offset}, column {problem_mark.column + 1}: "
    text += problem
    context = getattr(error, "context", None)
    if context and context_mark is not None:
        text += f" ({context} that starts at line {context_mark.line + 1 + line_offset})"
    return text
