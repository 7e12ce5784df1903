"""Cursors for long lists (tools, resources, prompts, skills, a directory's children).

A cursor is opaque to the client and cannot be forged: it carries the list it belongs to and
the offset of the next page, signed with a key made when the server starts. A cursor from
another list, another server run, or edited by hand is -32602 (invalid params) with a message
that says to list again from the start. A list that changes between pages (a skill added)
is read on from the same offset: a client that must see one consistent snapshot lists again
after `notifications/tools/list_changed`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

__all__ = ["DEFAULT_PAGE_SIZE", "Pager"]

T = TypeVar("T")

DEFAULT_PAGE_SIZE = 500
"""Items a list answers at once: the 1,200-skill corpus is 3 pages of tools/list (~470 KB each)."""
_MAX_CURSOR = 200
"""Longest cursor read (ours are about 40 characters)."""


class Pager:
    """Cuts lists into pages and reads the cursors it issued."""

    def __init__(self, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.page_size = page_size
        self._key = secrets.token_bytes(16)

    def page(self, kind: str, items: Sequence[T], cursor: str | None) -> tuple[list[T], str | None]:
        """The page of `items` that `cursor` asks for (the first without one), and the next cursor."""
        start = self.offset(kind, cursor)
        end = start + self.page_size
        return list(items[start:end]), (self._cursor(kind, end) if end < len(items) else None)

    def offset(self, kind: str, cursor: str | None) -> int:
        """Where the page of `cursor` starts; -32602 for a cursor this server did not issue for `kind`."""
        if cursor is None:
            return 0
        if len(cursor) <= _MAX_CURSOR:
            offset, _, mac = cursor.partition(".")
            if offset.isdigit() and hmac.compare_digest(mac, self._mac(kind, offset)):
                return int(offset)
        raise MCPError(
            code=INVALID_PARAMS,
            message=f"invalid cursor for {kind}: it was not issued by this server for this list (or the server "
            "restarted); list again without a cursor",
        )

    def _cursor(self, kind: str, offset: int) -> str:
        return f"{offset}.{self._mac(kind, str(offset))}"

    def _mac(self, kind: str, offset: str) -> str:
        digest = hmac.new(self._key, f"{kind}\0{offset}".encode(), hashlib.sha256).digest()[:12]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
