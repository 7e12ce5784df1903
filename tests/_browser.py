"""Headless Chromium driven over the DevTools protocol (CDP), for the run viewer's tests.

No browser library: Chromium is started with `--remote-debugging-port=0`, says where its
DevTools websocket listens on stderr, and the tests send CDP commands over `websockets` (a
dependency of the test extra). One page per `Browser.page()`; `Page.evaluate` runs JavaScript
in it and `Page.wait_until` polls an expression with a deadline (no sleeps). Tests skip when
no Chromium is installed (`CHROMIUM`).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection, connect

CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)


class Page:
    """One tab, attached through the browser's connection (a CDP session)."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser, self.session = browser, session

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.send(method, session=self.session, **params)

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)
        await self.wait_until("document.readyState === 'complete' && location.href !== 'about:blank'")

    async def evaluate(self, expression: str) -> Any:
        answer = await self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    async def wait_until(self, expression: str, timeout: float = 30) -> Any:
        """The expression's value once it is truthy (checked every 50 ms until `timeout`)."""
        with anyio.fail_after(timeout):
            while True:
                value = await self.evaluate(expression)
                if value:
                    return value
                await anyio.sleep(0.05)

    async def screenshot(self) -> bytes:
        return base64.b64decode((await self.send("Page.captureScreenshot", format="png"))["data"])


class Browser:
    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self._ids = itertools.count(1)
        self._waiting: dict[int, anyio.Event] = {}
        self._answers: dict[int, dict[str, Any]] = {}

    async def _read(self) -> None:
        async for raw in self.socket:
            message = json.loads(raw)
            waiter = self._waiting.pop(message.get("id", -1), None)
            if waiter is not None:
                self._answers[message["id"]] = message
                waiter.set()

    async def send(self, method: str, *, session: str | None = None, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        answered = self._waiting[number] = anyio.Event()
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        await self.socket.send(json.dumps(message))
        with anyio.fail_after(60):
            await answered.wait()
        answer = self._answers.pop(number)
        if "error" in answer:
            raise AssertionError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    async def page(self, width: int = 1200, height: int = 900) -> Page:
        target = (await self.send("Target.createTarget", url="about:blank"))["targetId"]
        session = (await self.send("Target.attachToTarget", targetId=target, flatten=True))["sessionId"]
        page = Page(self, session)
        await page.send("Page.enable")
        await page.send("Runtime.enable")
        await page.send(
            "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
        )
        return page


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium for the duration (killed on the way out, with every process it started:
    its renderers and helpers would otherwise still write into the profile while it is removed)."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = await anyio.open_process(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",  # tests may run as root (CI), where Chromium's sandbox refuses to start
                "--disable-gpu",
                "--no-first-run",
                "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: all of it is killed at the end
        )
        try:
            assert process.stderr is not None
            said = ""
            with anyio.fail_after(60):
                while (found := re.search(r"DevTools listening on (ws://\S+)", said)) is None:
                    said += (await process.stderr.receive()).decode(errors="replace")
            async with connect(found[1], max_size=None) as socket, anyio.create_task_group() as tg:
                browser = Browser(socket)
                tg.start_soon(browser._read)
                tg.start_soon(_drain, process.stderr)
                try:
                    yield browser
                finally:
                    tg.cancel_scope.cancel()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True):
                await process.wait()


async def _drain(stream: Any) -> None:
    """Keep reading Chromium's stderr so that it never blocks on a full pipe."""
    try:
        while True:
            await stream.receive()
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
