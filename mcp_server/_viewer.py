"""The run viewer: a web page at `/runs` showing the runs of the server's state, live.

Served by the HTTP transport on its own port (mounted beside `/mcp`) and by `orchestrator ui`
for stdio users; both read the same run store (state.sqlite or PostgreSQL), so a run started by
any client, replica or worker shows up. The page is plain HTML, CSS and JavaScript shipped in the
package (`mcp_server/viewer/`), loaded from this server only: it works offline, and its Content
Security Policy allows no other origin and no inline script. Every value of a run reaches the
page as JSON and is put in the document as text, never as markup.

Who may look: the same rules as `/mcp`. The Host header must name this server and a browser's
Origin must be this server (DNS rebinding); with a bearer token, a request carries it
(`Authorization: Bearer`) or the session cookie a browser gets by posting the token once to the
login form (HttpOnly, SameSite=Strict, path `/runs`) — a token never travels in a URL, so it is
never in a log or the browser's history. State-changing requests (cancel, answer) are POSTs
that carry the page's CSRF token. The viewer shows every run of the state: whoever holds the
token can already call every tool.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import anyio
import anyio.to_thread

if TYPE_CHECKING:
    from mcp_types import CallToolResult
    from starlette.requests import Request
    from starlette.responses import Response

    from pipelines.service import PipelineService
    from pipelines.storage.runs import RunRecord, RunStore

__all__ = ["COOKIE", "Viewer", "viewer_for"]

log = logging.getLogger("mcp_server.viewer")

COOKIE = "orchestrator_viewer"
SESSION_SECONDS = 12 * 3600
"""How long a browser stays logged in."""
VALUE_BYTES = 64 * 1024
"""A run's inputs or result larger than this (as JSON) is shown as a preview."""
POLL = 0.5
"""How often a live page's stream looks at the store for changes (seconds)."""
STREAM_SECONDS = 15
"""A live stream ends after this and the browser reconnects by itself (no connection outlives
a server that is stopping by more than this)."""
MAX_ARTIFACTS = 200
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_STATIC = {"viewer.js": "text/javascript", "viewer.css": "text/css"}
Call = Callable[[str, dict[str, Any]], Awaitable["CallToolResult"]]


def _asset(name: str) -> str:
    return resources.files("mcp_server").joinpath("viewer", name).read_text(encoding="utf-8")


class Viewer:
    """The ASGI app of `/runs` (mount it at `/runs`)."""

    def __init__(
        self,
        store: Callable[[], RunStore],
        *,
        pipelines: PipelineService | None = None,
        call: Call | None = None,
        tools: Callable[[], set[str]] = set,
        token: str | None = None,
        hosts: Sequence[str] = (),
        origins: Sequence[str] = (),
    ) -> None:
        from starlette.routing import Route, Router

        self.store = store
        self.pipelines = pipelines
        self.call = call
        self.tools = tools
        """The names of the published tools: `cancel_run` / `answer_run` enable the page's buttons."""
        self._token = token.encode() if token else None
        self._hosts = list(hosts)
        self._origins = list(origins)
        self._secret = secrets.token_bytes(32)
        self._sessions: dict[str, float] = {}
        self.router = Router(
            routes=[
                Route("/", self.page, methods=["GET"]),
                Route("/login", self.login, methods=["POST"]),
                Route("/static/{name}", self.static, methods=["GET"]),
                Route("/api/runs", self.list_runs, methods=["GET"]),
                Route("/api/runs/{run_id}", self.run, methods=["GET"]),
                Route("/api/runs/{run_id}/artifacts/{path:path}", self.artifact, methods=["GET"]),
                Route("/api/runs/{run_id}/cancel", self.cancel, methods=["POST"]),
                Route("/api/runs/{run_id}/answer", self.answer, methods=["POST"]),
                Route("/api/events", self.events, methods=["GET"]),
            ]
        )

    # -- the gate --------------------------------------------------------------------------------
    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        from starlette.responses import PlainTextResponse

        raw: list[tuple[bytes, bytes]] = scope.get("headers") or []
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}
        if not _matches(headers.get("host", ""), self._hosts):
            await _secured(PlainTextResponse("Invalid Host header", 421))(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and not _matches(origin, self._origins):
            await _secured(PlainTextResponse("Invalid Origin header", 403))(scope, receive, send)
            return
        scope = {**scope, "viewer.session": self._session_of(headers)}
        await self.router(scope, receive, send)

    def _session_of(self, headers: dict[str, str]) -> str | None:
        """The caller's session: `open` without a token, `bearer` with the right header, the
        cookie's id while it is valid; None: not logged in."""
        if self._token is None:
            return "open"
        given = headers.get("authorization", "").encode()
        if hmac.compare_digest(given, b"Bearer " + self._token):
            return "bearer"
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and self._sessions.get(value, 0) > time.time():
                return value
        return None

    def _csrf(self, session: str) -> str:
        return hmac.new(self._secret, session.encode(), hashlib.sha256).hexdigest()

    def _allowed(self, request: Request, *, post: bool = False) -> Response | None:
        """None when the request may go on, else the refusal."""
        from starlette.responses import JSONResponse

        session = request.scope.get("viewer.session")
        if session is None:
            return _secured(JSONResponse(_refusal("log in first", "open /runs and enter the server's token"), 401))
        if post and not hmac.compare_digest(request.headers.get("x-csrf-token", ""), self._csrf(session)):
            return _secured(JSONResponse(_refusal("missing or wrong CSRF token", "reload the page"), 403))
        return None

    # -- pages -----------------------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        from starlette.responses import HTMLResponse

        session = request.scope.get("viewer.session")
        if session is None:
            return _secured(HTMLResponse(_asset("login.html")))
        return _secured(HTMLResponse(_asset("index.html").replace("{{csrf}}", self._csrf(session))))

    async def login(self, request: Request) -> Response:
        from starlette.responses import HTMLResponse, RedirectResponse

        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > 4096:
                break
        given = parse_qs(body[:4096].decode("utf-8", "replace")).get("token", [""])[0].encode()
        if self._token is None:
            return _secured(RedirectResponse("/runs/", 303))
        if not hmac.compare_digest(given, self._token):
            client = request.client.host if request.client else "?"
            log.warning("run viewer: a login with a wrong token from %s", client)
            page = _asset("login.html").replace("<!--problem-->", '<p class="problem">That token is not right.</p>')
            return _secured(HTMLResponse(page, 401))
        now = time.time()
        self._sessions = {k: v for k, v in self._sessions.items() if v > now}
        session = secrets.token_urlsafe(32)
        self._sessions[session] = now + SESSION_SECONDS
        response = RedirectResponse("/runs/", 303)
        response.set_cookie(
            COOKIE,
            session,
            max_age=SESSION_SECONDS,
            path="/runs",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return _secured(response)

    async def static(self, request: Request) -> Response:
        from starlette.responses import PlainTextResponse, Response

        name = request.path_params["name"]
        if name not in _STATIC:
            return _secured(PlainTextResponse("not found", 404))
        return _secured(Response(_asset(name), media_type=_STATIC[name]))

    # -- data ------------------------------------------------------------------------------------
    async def list_runs(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        refused = self._allowed(request)
        if refused is not None:
            return refused
        from typing import get_args

        from pipelines.storage.runs import RunStatus

        asked = request.query_params.get("status") or None
        status = next((s for s in get_args(RunStatus) if s == asked), None)
        if asked is not None and status is None:  # no run has a status we do not know
            return _secured(JSONResponse({"runs": []}))
        pipeline = request.query_params.get("pipeline") or None
        store = self.store()
        records = await anyio.to_thread.run_sync(lambda: store.list(200, pipeline, status=status))
        return _secured(JSONResponse({"runs": [_summary(r) for r in records]}))

    async def run(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        refused = self._allowed(request)
        if refused is not None:
            return refused
        run_id = request.path_params["run_id"]
        store = self.store()
        record = await anyio.to_thread.run_sync(store.get, run_id)
        if record is None:
            return _secured(JSONResponse(_refusal(f"no run {run_id[:64]}", "pick one from the list"), 404))
        steps = await anyio.to_thread.run_sync(store.steps, run_id)
        tools = self.tools()
        status = str(record.status)  # `waiting`: a run whose `ask` step waits for an answer
        live = status in ("running", "queued", "waiting")
        detail = {
            "run": {**_summary(record), "inputs": _bounded(record.inputs), "result": _bounded(record.result)},
            "steps": [s.as_dict() for s in steps],
            "graph": self._graph(record),
            "artifacts": await anyio.to_thread.run_sync(_artifacts, record),
            "actions": {
                "cancel": live and "cancel_run" in tools and self.call is not None,
                "answer": status == "waiting" and "answer_run" in tools and self.call is not None,
            },
        }
        return _secured(JSONResponse(json.loads(json.dumps(detail, default=str))))

    def _graph(self, record: RunRecord) -> list[dict[str, Any]] | None:
        if self.pipelines is None or record.kind != "pipeline":
            return None
        from pipelines.language.describe import graph

        try:
            skill = self.pipelines.pipeline(record.pipeline)
        except Exception:  # why: a pipeline since removed or broken: the page shows the steps without a graph
            return None
        return graph(skill.spec)

    async def artifact(self, request: Request) -> Response:
        from starlette.responses import FileResponse, JSONResponse

        refused = self._allowed(request)
        if refused is not None:
            return refused
        store = self.store()
        record = await anyio.to_thread.run_sync(store.get, request.path_params["run_id"])
        root = Path(record.artifacts).resolve() if record is not None and record.artifacts else None
        target = (root / request.path_params["path"]).resolve() if root is not None else None
        if root is None or target is None or not target.is_relative_to(root) or not target.is_file():
            return _secured(JSONResponse(_refusal("no such artifact", "pick one from the run's list"), 404))
        response = FileResponse(target, media_type="application/octet-stream", filename=target.name)
        return _secured(response)

    # -- actions ---------------------------------------------------------------------------------
    async def cancel(self, request: Request) -> Response:
        return await self._act(request, "cancel_run", {})

    async def answer(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        body = await request.body()
        try:
            answer = json.loads(body[:65536]).get("answer")
        except (ValueError, AttributeError):
            return _secured(JSONResponse(_refusal('the answer must be JSON {"answer": ...}', ""), 400))
        return await self._act(request, "answer_run", {"answer": answer})

    async def _act(self, request: Request, tool: str, arguments: dict[str, Any]) -> Response:
        from starlette.responses import JSONResponse

        refused = self._allowed(request, post=True)
        if refused is not None:
            return refused
        if self.call is None or tool not in self.tools():
            return _secured(JSONResponse(_refusal(f"this server has no {tool}", ""), 404))
        result = await self.call(tool, {"run_id": request.path_params["run_id"], **arguments})
        data: Any = result.structured_content
        if data is None:  # an error envelope travels as text beside an output schema it does not fit
            text = "".join(getattr(c, "text", "") for c in result.content)
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if not isinstance(data, dict):
                data = {"text": text}
        return _secured(JSONResponse(data, 400 if result.is_error else 200))

    # -- live ------------------------------------------------------------------------------------
    async def events(self, request: Request) -> Response:
        from starlette.responses import StreamingResponse

        refused = self._allowed(request)
        if refused is not None:
            return refused
        run_id = request.query_params.get("run") or None
        store = self.store()

        def signature() -> str:
            rows = [(r.run_id, r.status, r.ended, json.dumps(r.progress)) for r in store.list(200)]
            if run_id is not None:
                rows += [(s.path, s.status, s.ended, None) for s in store.steps(run_id)]
            return hashlib.sha256(repr(rows).encode()).hexdigest()

        async def stream() -> AsyncIterator[str]:
            yield "retry: 1000\n\n"
            last = None
            ends = time.monotonic() + STREAM_SECONDS
            while time.monotonic() < ends:
                now = await anyio.to_thread.run_sync(signature)
                if now != last:
                    last = now
                    yield f"event: change\ndata: {json.dumps({'at': time.time()})}\n\n"
                await anyio.sleep(POLL)

        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        return _secured(StreamingResponse(stream(), media_type="text/event-stream", headers=headers))


def _matches(value: str, allowed: Sequence[str]) -> bool:
    """`value` is one of `allowed`, or one with any port where `allowed` says `name:*`."""
    if value in allowed:
        return True
    return any(a.endswith(":*") and value.startswith(a[:-1]) and value[len(a) - 1 :].isdigit() for a in allowed)


def _secured(response: Response) -> Response:
    response.headers["content-security-policy"] = CSP
    response.headers["x-content-type-options"] = "nosniff"
    response.headers["referrer-policy"] = "same-origin"  # not no-referrer: a form POST would then send `Origin: null`
    response.headers["x-frame-options"] = "DENY"
    response.headers.setdefault("cache-control", "no-store")
    return response


def _refusal(message: str, hint: str) -> dict[str, Any]:
    return {"error": {"message": message, "hint": hint}}


def _summary(record: RunRecord) -> dict[str, Any]:
    data = record.as_dict()
    for key in ("inputs", "result", "owner", "artifacts"):
        data.pop(key, None)
    data["duration"] = (record.ended or time.time()) - record.started
    return data


def _bounded(value: Any) -> Any:
    text = json.dumps(value, default=str, ensure_ascii=False)
    if len(text.encode()) <= VALUE_BYTES:
        return value
    return {"truncated": True, "bytes": len(text.encode()), "preview": text[:2000]}


def _artifacts(record: RunRecord) -> list[dict[str, Any]]:
    if not record.artifacts:
        return []
    root = Path(record.artifacts)
    found: list[dict[str, Any]] = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            path = Path(folder) / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            found.append({"path": path.relative_to(root).as_posix(), "bytes": size})
            if len(found) >= MAX_ARTIFACTS:
                return found
    return found


def viewer_for(server: Any, *, token: str | None, hosts: Sequence[str], origins: Sequence[str]) -> Viewer | None:
    """The viewer of an `OrchestratorServer` (None when it has no pipelines, hence no runs)."""
    pipelines = server.pipelines
    if pipelines is None:
        return None

    async def call(name: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call a run meta tool (`cancel_run`, `answer_run`) on behalf of the run's owner: the
        viewer is its server's operator's view, who may act on every run."""
        from mcp_types import CallToolResult, TextContent

        from pipelines.storage.runs import LOCAL, STARTED_BY_KEY

        skill = server.catalog.tool(name)
        record = await anyio.to_thread.run_sync(pipelines.store.get, str(arguments.get("run_id")))
        ctx = server.skill_context(skill, None)
        ctx.extras[STARTED_BY_KEY] = (record.started_by if record is not None else None) or LOCAL
        value = await skill.run(arguments, ctx)
        if isinstance(value, CallToolResult):
            return value
        text = json.dumps(value, default=str)
        return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)

    return Viewer(
        lambda: pipelines.store,
        pipelines=pipelines,
        call=call,
        tools=lambda: {s.name for s in server.catalog.tools() if s.kind == "meta"},
        token=token,
        hosts=hosts,
        origins=origins,
    )
