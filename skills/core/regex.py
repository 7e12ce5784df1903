"""Regular expressions that a client or a pipeline supplies, matched in linear time (RE2).

Python's `re` backtracks: `(a+)+$` against forty `a`s and a `!` runs for longer than the
universe, inside one C call that holds the GIL, so no timeout, no other client and not even
SIGTERM gets a turn. RE2 (`google-re2`) never backtracks: time is linear in the text, memory is
capped when the pattern is compiled. It has no backreferences or lookaround; a pattern that
needs them is refused with a hint rather than run.

Use `compile_pattern` wherever the pattern comes from outside the server's own code.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Protocol

import re2

__all__ = ["MAX_PATTERN", "Match", "Pattern", "PatternError", "compile_pattern"]

MAX_PATTERN = 10_000
"""Longest pattern accepted, in characters."""
_MAX_MEM = 16 << 20
"""Bytes RE2 may use for one compiled pattern (a huge repetition fails to compile instead)."""

HINT = "patterns use RE2 syntax: Python's `re` without backreferences (\\1) or lookaround ((?=...), (?<=...))"


class PatternError(ValueError):
    """A pattern RE2 cannot compile; the message says why, `HINT` how to write it."""


class Match(Protocol):
    """A match of a `Pattern`, as `re.Match` for what is used here."""

    def group(self, group: int | str = 0, /) -> str | None: ...
    def span(self, group: int | str = 0) -> tuple[int, int]: ...


class Pattern(Protocol):
    """A compiled RE2 pattern: `search`, `match` and `fullmatch` as in `re`, in linear time."""

    def search(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None: ...
    def match(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None: ...
    def fullmatch(self, text: str, pos: int | None = None, endpos: int | None = None) -> Match | None: ...


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # an error is raised to the caller, not printed on the server's stderr
    options.max_mem = _MAX_MEM
    return options


_OPTIONS = _options()


@lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Pattern:
    """A compiled RE2 pattern with `search`, `match` and `fullmatch` as in `re`."""
    if len(pattern) > MAX_PATTERN:
        raise PatternError(f"the pattern has {len(pattern):,} characters, more than {MAX_PATTERN:,}")
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        text = reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
        raise PatternError(text) from None
