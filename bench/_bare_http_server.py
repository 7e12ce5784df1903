"""The reference of `http_load.py`: the bare `MCPServer` of `call.py` served over streamable HTTP.

    python bench/_bare_http_server.py PORT [TOOLS.json]

Served by uvicorn exactly as `orchestrator serve --transport http` serves (same log level, same
lifespan handling), with the SDK's defaults for everything else. With TOOLS.json (a list of
tool definitions) its tools/list also holds those tools, never called: a listing as large as
the subject's, so that both servers' clients decode the same tools/list.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import uvicorn
from call import bare_server
from mcp_types import Tool

if __name__ == "__main__":
    server = bare_server()
    if len(sys.argv) > 2:
        extra = [Tool.model_validate(tool) for tool in json.loads(Path(sys.argv[2]).read_text())]
        own = server.list_tools

        async def list_tools() -> list[Tool]:
            return [*(await own()), *extra]

        server.list_tools = list_tools  # type: ignore[method-assign]
    app = server.streamable_http_app(host="127.0.0.1")
    print(f"bare: serving http://127.0.0.1:{sys.argv[1]}/mcp", file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
