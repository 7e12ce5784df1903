"""The reference of `http_load.py`: the bare `MCPServer` of `call.py` served over streamable HTTP.

    python bench/_bare_http_server.py PORT

Served by uvicorn exactly as `orchestrator serve --transport http` serves (same log level, same
lifespan handling), with the SDK's defaults for everything else.
"""

from __future__ import annotations

import sys

import uvicorn
from call import bare_server

if __name__ == "__main__":
    app = bare_server().streamable_http_app(host="127.0.0.1")
    print(f"bare: serving http://127.0.0.1:{sys.argv[1]}/mcp", file=sys.stderr, flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", lifespan="on")
