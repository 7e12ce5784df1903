"""Our nesting bound on flow collections, found before any YAML parser reads the text.

libyaml (in PyYAML 6.0.4 and later) refuses flow collections nested more than about 1,000 deep,
and its scanner reads ahead of the events `skills.core.yamltext` checks its own bound on: on
`[[[[...` the scanner's refusal came first, in libyaml's words and at libyaml's position, and
what users saw changed with a PyYAML release. So before any parser sees a text that could nest
flow collections past the bound (more `[` and `{` than the bound), this pure-Python scan finds
the first bracket that opens a flow collection too deep, reading the text as YAML does:

- in block context a flow collection starts only where a node starts (a line's first value,
  after `- `, `? `, `key: `, an anchor or a tag); brackets inside plain scalars, quoted scalars,
  comments and block scalars (`|`, `>`) are text;
- in flow context every `[` and `{` outside a quoted scalar or a comment opens a collection,
  as libyaml's scanner counts them.

It reports a position only where the flow depth really passes the bound, so a valid document
is never refused here; a text it cannot make sense of (an unclosed quote) is left to the
parser, which reports it. Linear in the text: every character is looked at a bounded number of
times.
"""

from __future__ import annotations

import re

__all__ = ["deep_flow_bracket"]

_FLOW_MARK = re.compile(r"""[\[\]{}'"#]""")
"""What matters inside a flow collection: brackets, the quotes that may open a quoted scalar, `#`."""
_SINGLE = re.compile(r"'[^']*(?:''[^']*)*'")
"""A single-quoted scalar (`''` is an escaped quote); may span lines."""
_DOUBLE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
"""A double-quoted scalar (backslash escapes); may span lines."""
_PLAIN_END = re.compile(r":(?=[ \t\r\n]|$)|[ \t]#", re.MULTILINE)
"""Where a plain scalar on one line of block context ends: a mapping's `:` or a comment."""
_ANCHOR = re.compile(r"[0-9A-Za-z_-]*")
"""An anchor's name, after its `&`."""
_TAG = re.compile(r"[^ \t\r\n,\[\]{}]*")
"""A tag, after its first `!`."""
_SPACE = " \t\r\n"
_COMMENT_AFTER = _SPACE + "[]{},"
"""In flow context, `#` after one of these (or right after a quoted scalar) starts a comment, as in libyaml."""
_NODE_BEFORE = "[{,:?"
"""In flow context, a quote opens a quoted scalar only after one of these (or a tag/anchor)."""
_LOOK_BACK = 256
"""Longest tag or anchor looked back over to decide whether a quote starts a node."""


def deep_flow_bracket(text: str, limit: int) -> int | None:
    """The index of the first `[` or `{` that opens a flow collection `limit`+1 levels deep, or None."""
    if text.count("[") + text.count("{") <= limit:
        return None
    return _Scan(text, limit).run()


class _Found(Exception):
    """The signal, inside this module only, that the bracket at `index` is too deep."""

    def __init__(self, index: int) -> None:
        self.index = index


def _document_marker(text: str, pos: int) -> bool:
    """Whether a `---` or `...` that starts a line begins at `pos`."""
    return text[pos : pos + 3] in ("---", "...") and text[pos + 3 : pos + 4] in ("", *_SPACE)


class _Scan:
    """One pass over `text`: block context line by line, flow collections by their marks."""

    def __init__(self, text: str, limit: int) -> None:
        self.text = text
        self.limit = limit
        self.nested = False  # whether this document has a block collection yet (else a scalar may continue anywhere)

    def run(self) -> int | None:
        try:
            self._block()
        except _Found as found:
            return found.index
        return None

    def _block(self) -> None:
        """Block context: each line's nodes, skipping block scalars and plain-scalar continuations."""
        text, end = self.text, len(self.text)
        pos = 1 if text.startswith("\ufeff") else 0
        skip_deeper: int | None = None  # lines indented more than this belong to a block or plain scalar
        while pos < end:
            eol = text.find("\n", pos)
            eol = end if eol < 0 else eol
            first = pos
            while first < eol and text[first] == " ":
                first += 1
            indent = first - pos
            content = first
            while content < eol and text[content] in " \t\r":
                content += 1
            if content >= eol:
                pos = eol + 1  # an empty line is inside any block or plain scalar
                continue
            if indent == 0 and _document_marker(text, first):
                skip_deeper = None  # a document marker ends every scalar
            elif skip_deeper is not None and indent > skip_deeper:
                pos = eol + 1
                continue
            skip_deeper = None
            if text[content] == "#" or (text[content] == "%" and indent == 0):
                pos = eol + 1  # a comment line, or a directive (%YAML)
                continue
            pos, skip_deeper = self._line(first, eol, indent)

    def _line(self, pos: int, eol: int, indent: int) -> tuple[int, int | None]:
        """The nodes of one line from `pos`; the next position, and the indent its scalar continues past."""
        text = self.text
        owner = indent - 1 if self.nested else -1  # the column a value on this line belongs to (a dash's, a key's)
        line_start = pos - indent
        node: int | None = None  # the column of the last node begun on this line (a key, when a `:` follows)
        while True:
            while pos < eol and text[pos] in " \t\r":
                pos += 1
            if pos >= eol:
                return eol + 1, None
            char = text[pos]
            after = text[pos + 1] if pos + 1 < len(text) else "\n"
            if char == "#":
                return eol + 1, None
            if pos == line_start and _document_marker(text, pos):
                owner, node, pos, self.nested = -1, None, pos + 3, False
            elif char in "-?" and after in _SPACE:
                owner, node, pos, self.nested = pos - line_start, None, pos + 1, True
            elif char == ":" and after in _SPACE:  # after a key, or an explicit value (`: x` under `? k`)
                owner = pos - line_start if node is None else node
                node, pos, self.nested = None, pos + 1, True
            elif char in "&!":  # an anchor or a tag begins the node it is put on
                node = pos - line_start if node is None else node
                name = (_ANCHOR if char == "&" else _TAG).match(text, pos + 1)
                pos = name.end() if name is not None else pos + 1  # the patterns match the empty name too
            elif char in "[{":
                node = pos - line_start
                closed = self._flow(pos)
                if closed is None:
                    return len(text), None
                pos = closed
                if pos > eol:  # the collection ended on a later line
                    eol = text.find("\n", pos)
                    eol = len(text) if eol < 0 else eol
            elif char in "|>":
                return eol + 1, owner  # a block scalar: lines indented past its owner are its text
            elif char in "'\"":
                node = pos - line_start
                quoted = (_SINGLE if char == "'" else _DOUBLE).match(text, pos)
                if quoted is None:
                    return len(text), None  # unclosed: the parser says where
                pos = quoted.end()
                if pos > eol:
                    eol = text.find("\n", pos)
                    eol = len(text) if eol < 0 else eol
            else:  # a plain scalar: a key (`name:`), else a value that may continue on deeper lines
                stop = _PLAIN_END.search(text, pos, eol)
                if stop is None:
                    return eol + 1, owner
                if text[stop.start()] != ":":
                    return eol + 1, owner  # a comment ends the line
                owner = node = pos - line_start
                pos, self.nested = stop.start() + 1, True

    def _flow(self, pos: int) -> int | None:
        """The position after the flow collection opening at `pos`; None where the text ends first."""
        text = self.text
        depth = 0
        quote_end = -1
        for mark in _FLOW_MARK.finditer(text, pos):
            char, at = mark.group(), mark.start()
            if at < pos:
                continue  # inside a quoted scalar or comment already skipped
            if char in "[{":
                depth += 1
                if depth > self.limit:
                    raise _Found(at)
            elif char in "]}":
                depth -= 1
                if depth == 0:
                    return at + 1
            elif char == "#":
                if at == quote_end or text[at - 1] in _COMMENT_AFTER:  # a comment wherever a token may start
                    newline = text.find("\n", at)
                    pos = len(text) if newline < 0 else newline
                    continue
            elif self._starts_node(at):
                quoted = (_SINGLE if char == "'" else _DOUBLE).match(text, at)
                if quoted is None:
                    return None
                pos = quote_end = quoted.end()
                continue
            pos = at + 1
        return None

    def _starts_node(self, at: int) -> bool:
        """Whether the quote at `at` opens a quoted scalar (not a quote inside a plain one)."""
        text = self.text
        for _ in range(3):  # a node may carry an anchor and a tag before it
            before = at - 1
            while before >= 0 and text[before] in _SPACE:
                before -= 1
            if before < 0 or text[before] in _NODE_BEFORE:
                return True
            if before == at - 1:
                return False  # glued to the text before it: inside a plain scalar
            start = before
            while start > 0 and before - start < _LOOK_BACK and text[start - 1] not in _SPACE + _NODE_BEFORE:
                start -= 1
            if text[start] not in "&!":
                return False
            at = start
        return False
