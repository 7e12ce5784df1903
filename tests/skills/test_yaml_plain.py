"""The fast reader of plain YAML (`skills._yaml_plain`) against the full bounded loader.

Loading 1,000 python skills reads 1,000 skill.yaml files; the fast reader makes that ~4x
cheaper. It may decline any text (the full loader then reads it), but whatever it reads must
be exactly what the full loader gives, value and type, and it must never read a text the full
loader refuses: the user would lose the error with its line and column. Hypothesis generates
skill.yaml-like documents in the styles people write (PyYAML's dumps, hand-written block style
with comments, quotes and small flow collections) and breaks them with YAML's own indicators.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st
from mcp import Client

from mcp_server import create_server
from skills.core._yaml_plain import FALLBACK, read_plain
from skills.core.checks import _read_front_lines, read_front_matter
from skills.core.yamltext import MAX_TEXT, YAMLError, compose_yaml, load_yaml, read_bounded, read_small
from tests._fuzz import fuzz
from tests.helpers import write_skill

_KEYS = [
    "inputs", "outputs", "run", "python", "type", "properties", "required", "description", "items",
    "enum", "default", "additionalProperties", "minimum", "maxLength", "$ref", "format", "a", "b",
    "sum", "x-tag", "a.b", "snake_case", "models", "timeout", "yes", "on", "null", "true", "Y", "_",
]  # fmt: skip
"""Keys of a skill.yaml, and words YAML reads as something else than a string when unquoted."""
_WORDS = [
    "object", "string", "integer", "number", "boolean", "array", "impl:add", "First addend.", "a + b",
    "yes", "No", "on", "OFF", "null", "~", "Null", "true", "False", "1", "-1", "+1", "012", "0o17",
    "0x1F", "0b101", "1_000", "1:30", "190:20:30", "1.5", "-.5", "1e3", "1.0e+3", ".inf", "-.Inf",
    ".nan", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-13-45", "<<", "=", "---", "...",
    "a: b", "a:b", "a #b", "a#b", "a:", "-a", "- a", "?a", ":a", "'q'", '"dq"', "[a]", "{b}", "a, b",
    "don't", "é ü", "日本", "x" * 70, "1" * 5000, "#", "%x", "@x", "`x", "!x", "&x", "*x", "|", ">",
]  # fmt: skip
"""Scalars as written: strings, and texts YAML resolves to bools, numbers, dates, or refuses."""

scalars = st.one_of(
    st.sampled_from(_WORDS),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)
contracts = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(_KEYS), children, max_size=5),
    max_leaves=30,
)
"""Data shaped like a skill.yaml: mappings of known keys, lists, scalars of every kind."""


def _dump(data: Any, flow: bool | None, width: int, indent: int) -> str:
    return yaml.safe_dump(
        data, sort_keys=False, allow_unicode=True, default_flow_style=flow, width=width, indent=indent
    )


dumped = st.builds(
    _dump, contracts, st.sampled_from([False, None]), st.sampled_from([80, 20, 1000]), st.sampled_from([2, 4])
)
"""PyYAML's own block-style dumps (as bench/_common.py and tests/helpers.py write skill.yaml)."""


@st.composite
def _written(draw: st.DrawFn, depth: int = 0, indent: int = 0) -> str:
    """A block mapping written by hand: plain, quoted or flow values, comments, indentless lists."""
    pad = " " * indent
    lines = []
    for key in draw(st.lists(st.sampled_from(_KEYS), min_size=1, max_size=4)):
        kind = draw(st.sampled_from(["plain", "single", "double", "flow", "seq", "map", "empty"]))
        word = draw(st.sampled_from(_WORDS[:60]))
        comment = draw(st.sampled_from(["", "", " # note", "  #x"]))
        if kind == "plain":
            lines.append(f"{pad}{key}: {word}{comment}")
        elif kind == "single":
            lines.append(f"{pad}{key}: '{word.replace(chr(39), chr(39) * 2)}'{comment}")
        elif kind == "double":
            escaped = word.replace("\\", "\\\\").replace('"', '\\"') + draw(st.sampled_from(_ESCAPES))
            lines.append(f'{pad}{key}: "{escaped}"{comment}')
        elif kind == "flow":
            items = draw(
                st.lists(st.sampled_from(["a", "'b c'", '"d"', "1", "true", "{type: string}", "[]"]), max_size=3)
            )
            if draw(st.booleans()):
                lines.append(f"{pad}{key}: [{', '.join(items)}]{comment}")
            else:
                lines.append(f"{pad}{key}: {{{', '.join(f'k{i}: {v}' for i, v in enumerate(items))}}}{comment}")
        elif kind == "seq":
            step = draw(st.sampled_from([0, 2]))
            lines.append(f"{pad}{key}:{comment}")
            lines += [f"{pad}{' ' * step}- {w}" for w in draw(st.lists(st.sampled_from(_WORDS[:40]), max_size=3))]
        elif kind == "map" and depth < 3:
            lines.append(f"{pad}{key}:")
            lines.append(draw(_written(depth + 1, indent + draw(st.sampled_from([2, 4])))))
        else:
            lines.append(f"{pad}{key}:{comment}")
        if draw(st.integers(0, 5)) == 0:
            lines.append(draw(st.sampled_from(["", f"{pad}# a comment", "   "])))
    return "\n".join(lines)


written = st.builds(
    lambda start, body, end: start + body + end,
    st.sampled_from(["", "---\n", "# c\n---\n"]),
    _written(),
    st.sampled_from(["", "\n"]),
)
_ESCAPES = ["", "\\n", "\\t", "\\/", "\\x41"]
_BREAKERS = [
    ": ", ":", "- ", "-", "#", " #", "'", '"', "[", "]", "{", "}", ",", "&a ", "*a", "!!str ", "|", ">",
    "? ", "\n", "\n  ", "  ", "\t", "\r", "\\", "...", "---", "%", "@", "`", "\ufeff", "\x85", "\u2028",
]  # fmt: skip


@st.composite
def broken(draw: st.DrawFn) -> str:
    """A plausible document with YAML indicators inserted, removed or replaced at random places."""
    text = draw(st.one_of(dumped, written))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 3))
        text = text[:at] + draw(st.sampled_from(["", *_BREAKERS])) + text[at + cut :]
    return text


def _typed(value: Any) -> Any:
    """`value` with every type spelled out: 1 == True == 1.0 in Python, not in a schema."""
    if isinstance(value, dict):
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return ("float", "nan")
    if isinstance(value, datetime.datetime):
        return ("datetime", value.isoformat())
    return (type(value).__name__, value)


def _full(text: str) -> Any:
    """The full loader's answer: its data, or the error it reports."""
    try:
        return compose_yaml(text)[1]
    except YAMLError as exc:
        return exc


def _agrees(text: str) -> bool:
    """The fast reader declines `text` or reads exactly what the full loader reads; True if it read it."""
    fast = read_plain(text)
    if fast is FALLBACK:
        return False
    full = _full(text)
    assert not isinstance(full, YAMLError), f"read {text!r} that the full loader refuses: {full}"
    assert _typed(fast) == _typed(full), text
    return True


@fuzz(600)
@given(dumped)
def test_pyyaml_dumps_read_as_the_full_loader_reads_them(text: str) -> None:
    _agrees(text)


@fuzz(600)
@given(written)
def test_hand_written_documents_read_as_the_full_loader_reads_them(text: str) -> None:
    _agrees(text)


@fuzz(1500)
@given(broken())
def test_broken_documents_are_never_read_where_the_full_loader_reports_an_error(text: str) -> None:
    _agrees(text)


def test_the_common_shapes_are_read_by_the_fast_reader() -> None:
    """The shapes skill.yaml files have are read here, not sent on to the slower loader."""
    texts = [
        _dump({"inputs": {"type": "object", "properties": {"a": {"type": "integer", "description": "A."}},
               "required": ["a"], "additionalProperties": False}, "run": {"python": "impl:add"}}, False, 80, 2),
        "# a skill\ninputs:\n  type: object\n  required: [a, b]  # both\n  properties:\n"
        "    a: {type: string, description: 'the \"a\", it''s a text'}\n    b:\n      type: integer\n"
        "      default: 3\n      enum:\n        - 1\n        - 3\nrun:\n  python: impl:run\n  timeout: 1.5\n",
        '---\ndescription: "one\\ttwo"\nitems:\n- name: a\n  one: yes\n-\n- [x, {y: 2001-12-14}]\n',
        'list: [a,\n  "b c",\n  d e]\nquoted: "folded\n  line"\n',
    ]  # fmt: skip
    for text in texts:
        assert _agrees(text), text


def test_what_the_fast_reader_leaves_to_the_full_loader() -> None:
    """Shapes it declines: the full loader reads them (or reports them with their position)."""
    declined = [
        "a: &x 1\nb: *x\n", "a: |\n  text\n", "a: >\n  text\n", "a: !!str 1\n", "a: b\n  c\n", "? a\n: b\n",
        "a: 'x\n\n  y'\n", 'a: "\\x41"\n', "a:\tb\n", "a: b\r\n", "1: a\n", "on: a\n", '"a": 1\n', "a: [b,]\n",
        "a: {b}\n", "a: 1\n---\nb: 2\n", "%YAML 1.1\n---\na: 1\n", "a: " + "1" * 5000 + "\n", "a: 2001-13-45\n",
        "", "# only a comment\n", "plain text\n", "[" * 60 + "]" * 60 + "\n", "a: x\n  - y\n", "<<: {a: 1}\n",
    ]  # fmt: skip
    for text in declined:
        assert read_plain(text) is FALLBACK, text
        _full(text)  # whatever it is, the full loader answers without crashing
    assert load_yaml("a: x\n  - y\n") == {"a": "x - y"}
    assert read_plain("a: 1\n" * 60_000) is FALLBACK  # over the reader's own size bound


async def test_a_contract_read_by_either_reader_publishes_the_same_tool(tmp_path: Path) -> None:
    """The same contract written in the plain shape and in a shape only the full loader reads
    (an anchor, a literal block) publishes identical input and output schemas."""
    contract = {
        "inputs": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "description": "How many."},
                   "loud": {"type": "boolean", "default": True}}, "required": ["n"]},
        "outputs": {"type": "object", "properties": {"n": {"type": "integer", "description": "How many."}}},
        "run": {"python": "impl:go"},
    }  # fmt: skip
    impl = "def go(n, loud=True):\n    return {'n': n}\n"
    plain = write_skill(tmp_path, "plain-shape", contract=contract, impl=impl)
    full = write_skill(tmp_path, "full-shape", contract=contract, impl=impl)
    text = (plain / "skill.yaml").read_text()
    assert read_plain(text) is not FALLBACK
    anchored = text.replace("description: How many.", "description: &d How many.", 1)
    anchored = anchored.replace("description: How many.", "description: *d").replace(
        "type: object", "type: |-\n    object", 1
    )
    assert read_plain(anchored) is FALLBACK and load_yaml(anchored) == load_yaml(text)
    (full / "skill.yaml").write_text(anchored)
    server = create_server(home=tmp_path / "home", skill_dirs=[tmp_path], builtin=False, pipelines=False)
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["plain-shape"].input_schema == tools["full-shape"].input_schema
        assert tools["plain-shape"].output_schema == tools["full-shape"].output_schema
        assert tools["plain-shape"].input_schema["properties"]["loud"]["default"] is True
        result = await client.call_tool("plain-shape", {"n": 3})
        assert result.structured_content == {"n": 3}


_PIECES = [
    b"---\n", b"---\r\n", b"---", b"  ---\n", b"--- \n", b"name: x\n", b"description: caf\xc3\xa9\n", b"\r", b"\r\n",
    b"\n", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"# body\n", b"\n---\n", b"x" * 3000, b"\x00", b"\xe2\x80\xa8",
]  # fmt: skip
"""Pieces of a SKILL.md or skill.yaml as bytes: markers, line breaks of each kind, bad UTF-8, a BOM."""


def _outcome(read: Any, path: Path) -> Any:
    try:
        return read(path)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        return type(exc), str(exc)


def _text_mode(path: Path) -> str:
    with path.open(encoding="utf-8") as fh:
        return fh.read(MAX_TEXT + 1)


@fuzz(400)
@given(
    st.lists(
        st.sampled_from([b"---\n", b""]) | st.lists(st.sampled_from(_PIECES), max_size=4).map(b"".join), max_size=6
    ).map(b"".join)
)
def test_files_read_in_one_call_read_as_the_text_mode_reader_reads_them(tmp_path: Path, data: bytes) -> None:
    """SKILL.md and skill.yaml are read whole in one system call when small: the text, the body
    line and every error (not UTF-8, no closing `---`) are the text-mode line reader's."""
    path = tmp_path / "SKILL.md"
    path.write_bytes(data)
    assert _outcome(read_front_matter, path) == _outcome(_read_front_lines, path)
    assert _outcome(read_bounded, path) == _outcome(_text_mode, path)


def test_big_and_special_files_take_the_text_mode_reader(tmp_path: Path) -> None:
    big = tmp_path / "big.md"
    big.write_bytes(b"---\nname: x\n---\n" + b"body line\n" * 10_000 + b"\xff")  # bad UTF-8 far in the body
    assert read_small(big) is None and read_front_matter(big) == ("name: x\n", 4)
    crlf = tmp_path / "crlf.md"
    crlf.write_bytes(b"---\r\nname: x\r\n---\r\nbody\r\n")
    assert read_small(crlf) is None and read_front_matter(crlf) == ("name: x\n", 4)
    assert read_small(tmp_path) is None and read_small(tmp_path / "missing") is None
    assert read_small(crlf.with_name("small.md")) is None
    (tmp_path / "small.md").write_text("---\nname: x\n---\n")
    assert read_small(tmp_path / "small.md") == "---\nname: x\n---\n"
