"""A reader for the plain shape most YAML files have, several times faster than PyYAML's loader.

A skill.yaml, a front matter, a registry are block mappings and sequences of one-line scalars,
with small one-line flow collections (`required: [a, b]`, `{type: string}`). PyYAML builds
such a file at ~150 µs: libyaml composes a node graph and PyYAML's constructor, in Python,
walks it one node at a time. At 1,000 skills that alone is half the 300 ms start-up budget.
This reader goes over the lines once and builds the data directly (~30 µs).

It reads only what it can read exactly as YAML does, and answers `FALLBACK` for anything
else: anchors, aliases, tags, block scalars (`|`, `>`), multi-line scalars and flow
collections, escapes in double quotes, complex or quoted keys, document markers past a first
`---`, tabs, non-printable characters or other line breaks, non-string keys, a value PyYAML
cannot convert (a 5,000-digit integer), more than `_DEPTH` levels, more than `_TEXT`
characters. The full loader then decides and reports, with its positions and its bounds: a
text read here is within every bound of `skills.core.yamltext` by construction (no alias, at most
`_TEXT` characters, at most `_DEPTH` levels). Plain scalars are resolved by PyYAML's own
resolver and constructors (`yes` is True, `12:30` is 750), so the data is the same.
`tests/skills/test_yaml_plain.py` checks that on generated documents of every shape.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date
from enum import Enum
from functools import lru_cache
from typing import Final, Protocol, TypeAlias, cast

import yaml
from yaml.constructor import SafeConstructor

__all__ = ["FALLBACK", "SCALAR_RESOLVER", "YAML", "Fallback", "Scalar", "ScalarResolver", "read_plain"]

Scalar: TypeAlias = str | int | float | bool | date | bytes | None
"""A YAML scalar as PyYAML's safe loader builds it (`!!binary` gives bytes, a timestamp a date
or datetime); the only kinds of value a mapping key can be."""
YAML: TypeAlias = "dict[Scalar, YAML] | list[YAML] | Scalar | set[Scalar] | tuple[YAML, YAML]"
"""Data of a YAML document. Keys are not always strings (`on:` is True, `1:` is 1), so callers
narrow with isinstance; `!!set` gives a set, `!!omap` and `!!pairs` a list of pairs."""


class Fallback(Enum):
    """The type of `FALLBACK` (an enum member, so that `is FALLBACK` narrows it away)."""

    FALLBACK = "fallback"


FALLBACK: Final = Fallback.FALLBACK
"""What `read_plain` answers for a text outside the shape it reads: use the full loader."""


class ScalarResolver(Protocol):
    """The one method of PyYAML's `Resolver` used here, typed (its stub leaves it untyped)."""

    def resolve(self, kind: type[yaml.Node], value: str, implicit: tuple[bool, bool]) -> str:
        """The tag YAML gives `value` (`tag:yaml.org,2002:str`, `...:int`, ...)."""
        ...


SCALAR_RESOLVER: Final = cast(ScalarResolver, yaml.resolver.Resolver())
"""PyYAML's implicit-tag resolver: what a plain scalar is (a string, a bool, a number, ...)."""

_TEXT = 100_000
"""Longest text read here: at two characters a value, fewer values than `_yaml.MAX_NODES`."""
_DEPTH = 40
"""Deepest nesting read here (block and flow levels each), well within `_yaml.MAX_DEPTH`."""
_CONTINUED = 20
"""Most rows a quoted scalar or a flow collection may go on over."""
_CACHED = 64
"""Longest plain scalar whose reading is cached (every value is immutable: str, int, float, bool, None, date)."""

_UNSAFE = re.compile("[^\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
"""A tab, a carriage return, a YAML line break other than `\\n`, a BOM or a non-printable character."""
_KEY = re.compile(r"([A-Za-z_$][\w$./-]*):(?: (.*))?")
"""`key:` or `key: value` (the value's text still to be read)."""
_DOUBLE = re.compile(r'"((?:[^"\\]|\\[\\"/ntr])*)"(?: +#.*)?')
_SINGLE = re.compile(r"'((?:[^']|'')*)'(?: +#.*)?")
_OPEN = re.compile(r'"(?:[^"\\]|\\[\\"/ntr])*|\'(?:[^\']|\'\')*')
"""A quoted scalar not closed on its line."""
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"\\": "\\", '"': '"', "/": "/", "n": "\n", "t": "\t", "r": "\r"}
"""The escapes read here (others, such as `\\x41` or an escaped line break, go to the full loader)."""
_TAIL = re.compile(r" *| +#.*")
_FLOW = re.compile(
    r"[ \n]*(?:"
    r"([\[\]{},])"  # 1: a bracket or a comma
    r'|"((?:[^"\\]|\\[\\"/ntr])*)"'  # 2: a double-quoted scalar
    r"|'((?:[^']|'')*)'"  # 3: a single-quoted scalar
    r"|(:)(?=[ \n]|$)"  # 4: the `: ` after a key
    r"|((?:[^\s\[\]{},:#'\"!&*|>%@`?-]|-[^\s\[\]{},:#])[^\[\]{},:#]*)"  # 5: a plain scalar
    r")"
)
"""One token of a flow collection: a bracket or comma, a quoted scalar, `: `, a plain scalar."""
_SIMPLE = re.compile(r" *[^\s\[\]{},#&*!|>'\"%@`?:-][^:#]*")
"""A value that can only be a one-line plain scalar: no quote or indicator first, no `:` or `#`."""
_NO_START = frozenset("[]{},#&*!|>'\"%@`?:")
"""Characters that cannot start a plain scalar here (indicators; `-` is checked with what follows)."""

_STR = "tag:yaml.org,2002:str"
_RESOLVER = SCALAR_RESOLVER
_CONSTRUCTOR = SafeConstructor()
_CONSTRUCT: dict[str, Callable[[SafeConstructor, yaml.ScalarNode], Scalar]] = {
    tag: SafeConstructor.yaml_constructors[tag]
    for tag in (
        "tag:yaml.org,2002:null",
        "tag:yaml.org,2002:bool",
        "tag:yaml.org,2002:int",
        "tag:yaml.org,2002:float",
        "tag:yaml.org,2002:timestamp",
    )
}


class _Nothing(Enum):
    """The type of `_NOTHING` (an enum member, so that `is _NOTHING` narrows it away)."""

    NOTHING = "nothing"


_NOTHING: Final = _Nothing.NOTHING
"""No value on the line: it is on the following, more indented lines, or it is null."""
_KEY_LINE, _ITEM_LINE = 0, 1
_Line: TypeAlias = tuple[int, int, str | None, "YAML | _Nothing"]
"""(indent, kind, key, value) of one line."""
_Token: TypeAlias = str | tuple[Scalar, bool]
"""A bracket, a comma or `:` of a flow collection, or a scalar (and whether it went over lines)."""


class _Outside(Exception):
    """The text leaves the shape read here."""


class _Unclosed(_Outside):
    """A quoted scalar or a flow collection goes on past the end of its line."""


def read_plain(text: str) -> YAML | Fallback:
    """The data of `text`, exactly as `yaml.safe_load` gives it, or `FALLBACK`."""
    if len(text) > _TEXT or _UNSAFE.search(text) is not None:
        return FALLBACK
    try:
        lines = _lines(text)
        if not lines:
            return FALLBACK  # an empty document: rare, and the full loader says what it is
        data, end = _block(lines, 0, 1)
    except _Outside:
        return FALLBACK
    return data if end == len(lines) else FALLBACK


def _lines(text: str) -> list[_Line]:
    """(indent, kind, key, value) of each line that holds something; `- key: v` gives two."""
    out: list[_Line] = []
    rows = text.split("\n")
    first = next((i for i, row in enumerate(rows) if row.strip(" ") and not row.lstrip(" ").startswith("#")), 0)
    if rows and rows[first].rstrip(" ") == "---":
        rows[first] = ""  # the optional start of the one document
    at = 0
    while at < len(rows):
        row = rows[at]
        at += 1
        body = row.lstrip(" ")
        if not body or body[0] == "#":
            continue
        indent = len(row) - len(body)
        if body[0] == "-" and (len(body) == 1 or body[1] == " "):
            rest = body[1:].lstrip(" ")
            match = _KEY.fullmatch(rest)
            if match is None:
                value, at = _value(rest, rows, at, indent)
                out.append((indent, _ITEM_LINE, None, value))
                continue
            out.append((indent, _ITEM_LINE, None, _NOTHING))  # `- key: value` opens a mapping in the item
            indent += len(body) - len(rest)
        else:
            match = _KEY.fullmatch(body)
            if match is None:
                raise _Outside
        key = match[1]
        if len(key) > 1000 or type(_plain(key)) is not str:
            raise _Outside  # a key YAML reads as a bool, a number or null (`on:`, `1:`)
        written: str | None = match[2]
        value: YAML | _Nothing
        if written is None:
            value = _NOTHING
        elif _SIMPLE.fullmatch(written) is not None:
            value = _plain(written.strip(" "))  # what `_value` gives, without its checks (the common line)
        else:
            value, at = _value(written, rows, at, indent)
        out.append((indent, _KEY_LINE, key, value))
    return out


def _value(text: str, rows: list[str], at: int, indent: int) -> tuple[YAML | _Nothing, int]:
    """The value that starts with `text`; a quoted scalar or a flow collection may go on over
    the next rows (more indented than `indent`, none blank): they are joined with their line
    breaks, each folded to a space where YAML folds it (inside a scalar)."""
    for more in range(_CONTINUED + 1):
        try:
            return _inline(text), at
        except _Unclosed:
            if more == _CONTINUED or at >= len(rows):
                raise _Outside from None
            row = rows[at]
            body = row.lstrip(" ")
            if not body or len(row) - len(body) <= indent:
                raise _Outside from None
            text = text.rstrip(" ") + "\n" + body.rstrip(" ")
            at += 1
    raise _Outside  # pragma: no cover - the loop returns or raises


def _block(lines: list[_Line], i: int, depth: int) -> tuple[YAML, int]:
    """The mapping or sequence that starts at line `i`, and the index of the line after it."""
    if depth > _DEPTH:
        raise _Outside
    indent, kind = lines[i][0], lines[i][1]
    count = len(lines)
    if kind == _ITEM_LINE:
        items: list[YAML] = []
        while i < count:
            at, kind, _, value = lines[i]
            if at != indent or kind != _ITEM_LINE:
                break  # the caller judges a line indented otherwise, or a key after the sequence
            i += 1
            if value is _NOTHING:
                if i < count and lines[i][0] > indent:
                    value, i = _block(lines, i, depth + 1)
                else:
                    value = None
            items.append(value)
        if i < count and lines[i][0] > indent:
            raise _Outside
        return items, i
    mapping: dict[Scalar, YAML] = {}
    while i < count:
        at, kind, key, value = lines[i]
        if at < indent:
            break
        if at > indent or kind != _KEY_LINE:
            raise _Outside
        i += 1
        if value is _NOTHING:
            # The value is on the lines below: more indented, or a sequence at the key's own indent.
            if i < count and (lines[i][0] > indent or (lines[i][0] == indent and lines[i][1] == _ITEM_LINE)):
                value, i = _block(lines, i, depth + 1)
            else:
                value = None
        mapping[key] = value
    return mapping, i


def _inline(text: str) -> YAML | _Nothing:
    """The value written on a line after `key: ` or `- `, or `_NOTHING`."""
    text = text.strip(" ")
    if not text or text[0] == "#":
        return _NOTHING
    first = text[0]
    if first == '"' or first == "'":
        match = (_DOUBLE if first == '"' else _SINGLE).fullmatch(text)
        if match is None:
            raise _Unclosed if _OPEN.fullmatch(text) else _Outside
        return _unquote(match[1]) if first == '"' else match[1].replace("''", "'").replace("\n", " ")
    if first == "[" or first == "{":
        return _flow(text)
    if first in _NO_START or (first == "-" and (len(text) == 1 or text[1] == " ")):
        raise _Outside
    cut = text.find(" #")
    if cut != -1:
        text = text[:cut].rstrip(" ")
    if ": " in text or text.endswith(":"):
        raise _Outside
    return _plain(text)


def _unquote(text: str) -> str:
    """The text of a double-quoted scalar: its line breaks folded, then its escapes replaced."""
    text = text.replace("\n", " ")
    return _ESCAPE.sub(lambda m: _ESCAPES[m[1]], text) if "\\" in text else text


def _plain(text: str) -> Scalar:
    """A plain scalar as PyYAML reads it: a string, or what its resolver makes of it.

    Short texts (keys, types, names: the same few hundred across 1,000 skills) are resolved
    once; a long one (a description) is not kept, so the cache holds at most ~300 KB.
    """
    return _short(text) if len(text) <= _CACHED else _resolve(text)


@lru_cache(maxsize=4096)
def _short(text: str) -> Scalar:
    return _resolve(text)


def _resolve(text: str) -> Scalar:
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))
    if tag == _STR:
        return text
    construct = _CONSTRUCT.get(tag)
    if construct is None:
        raise _Outside  # `<<` (merge) or `=` (value): the full loader knows them
    try:
        return construct(_CONSTRUCTOR, yaml.ScalarNode(tag, text))
    except (ValueError, OverflowError):
        raise _Outside from None  # the full loader reports it at its position


def _flow(text: str) -> YAML:
    """A flow collection (`[a, "b"]`, `{type: string}`), maybe a comment after it."""
    tokens: list[_Token] = []
    level, pos = 0, 0
    while True:
        match = _FLOW.match(text, pos)
        if match is None:
            rest = text[pos:].lstrip(" \n")
            raise _Unclosed if not rest or _OPEN.fullmatch(rest) else _Outside
        pos = match.end()
        mark = match[1]
        if mark is not None:
            tokens.append(mark)
            if mark in "[{":
                level += 1
                if level > _DEPTH:
                    raise _Outside
            elif mark in "]}":
                level -= 1
                if level == 0:
                    break
        elif match[4] is not None:
            tokens.append(":" if "\n" not in match[0] else ":\n")  # a key's `:` must be on its line
        elif match[2] is not None:
            tokens.append((_unquote(match[2]), "\n" in match[2]))
        elif match[3] is not None:
            tokens.append((match[3].replace("''", "'").replace("\n", " "), "\n" in match[3]))
        else:
            raw = match[5].rstrip(" \n")
            tokens.append((_plain(raw.replace("\n", " ")), "\n" in raw))
    if _TAIL.fullmatch(text, pos) is None:
        raise _Outside
    try:
        value, end = _flow_node(tokens, 0)
    except IndexError:
        raise _Outside from None
    if end != len(tokens):
        raise _Outside
    return value


def _flow_node(tokens: list[_Token], i: int) -> tuple[YAML, int]:
    token = tokens[i]
    if type(token) is tuple:
        return token[0], i + 1
    if token == "[":
        items: list[YAML] = []
        if tokens[i + 1] == "]":
            return items, i + 2
        i += 1
        while True:
            value, i = _flow_node(tokens, i)
            items.append(value)
            if tokens[i] == "]":
                return items, i + 1
            if tokens[i] != "," or tokens[i + 1] == "]":
                raise _Outside  # `[a: b]`, or a trailing comma: the full loader reads those
            i += 1
    if token == "{":
        mapping: dict[Scalar, YAML] = {}
        if tokens[i + 1] == "}":
            return mapping, i + 2
        i += 1
        while True:
            key = tokens[i]
            if type(key) is not tuple or key[1] or type(key[0]) is not str or tokens[i + 1] != ":":
                raise _Outside
            mapping[key[0]], i = _flow_node(tokens, i + 2)
            if tokens[i] == "}":
                return mapping, i + 1
            if tokens[i] != "," or tokens[i + 1] == "}":
                raise _Outside
            i += 1
    raise _Outside
