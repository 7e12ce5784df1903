"""A scripted model at the process edge, for the meta tools that ask a model.

`Script` holds the answers in the order they will be asked for and records every request.
It answers through the MCP client's sampling callback: the server's sampling provider sends
`sampling/createMessage` to the client (handshake era) or pauses the call with an
input-required result the client answers and retries (2026-07-28), so the real protocol path
is exercised. In the 2026-07-28 era a call is replayed with the answers so far, so a request
the script already answered is answered again from the record, not from the queue.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import yaml
from mcp import Client
from mcp_types import ToolListChangedNotification

from mcp_server import create_server


@dataclass
class Request:
    """One question the model was asked."""

    system: str
    messages: list[dict[str, Any]]
    model: str | None

    @property
    def prompt(self) -> str:
        """The last user message's text."""
        content = self.messages[-1]["content"]
        return content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)


@dataclass
class Script:
    """Answers in order (a dict or list is sent as its JSON text); every request, recorded."""

    answers: deque[str] = field(default_factory=deque)
    requests: list[Request] = field(default_factory=list)

    @classmethod
    def of(cls, *answers: Any) -> Script:
        return cls(deque(a if isinstance(a, str) else json.dumps(a) for a in answers))

    def answer(self, request: Request) -> str:
        self.requests.append(request)
        if not self.answers:
            raise AssertionError(f"the script has no answer left for: {request.prompt[:300]!r}")
        return self.answers.popleft()

    @property
    def left(self) -> int:
        return len(self.answers)

    async def sampling(self, context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        messages = [{"role": m.role, "content": _text(m.content)} for m in params.messages]
        hints = params.model_preferences.hints if params.model_preferences else None
        text = self.answer(Request(params.system_prompt or "", messages, hints[0].name if hints else None))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=text), model="scripted"
        )


def _text(content: Any) -> str:
    blocks = content if isinstance(content, list) else [content]
    return "".join(getattr(b, "text", "") for b in blocks)


def roles(home: Path) -> dict[str, str]:
    """Role -> model id, as the home's model registry says (the hint a sampling request carries)."""
    data = yaml.safe_load((home / "models" / "registry.yaml").read_text())
    return dict(data["roles"])


@dataclass
class Session:
    client: Client
    changes: anyio.abc.ObjectReceiveStream[str]
    server: Any

    async def tool_names(self) -> set[str]:
        return {t.name for t in (await self.client.list_tools()).tools}

    async def list_changed(self) -> None:
        with anyio.fail_after(5):
            assert await self.changes.receive() == "tools/list_changed"


@asynccontextmanager
async def connect(home: Path, script: Script, *, mode: str = "legacy", **server_options: Any) -> AsyncIterator[Session]:
    """A client (handshake era by default) whose sampling answers from `script`, on a server of `home`."""
    server = create_server(home=home, **server_options)
    send, receive = anyio.create_memory_object_stream[str](20)

    async def on_message(message: Any) -> None:
        if isinstance(message, ToolListChangedNotification):
            send.send_nowait("tools/list_changed")

    try:
        async with Client(
            server,
            mode=mode,
            sampling_callback=script.sampling,
            message_handler=on_message,  # type: ignore[arg-type]
        ) as client:
            yield Session(client, receive, server)
    finally:
        send.close()
        receive.close()
