"""The run as an MCP App (SEP-1865): `ui://orchestrator/run`, named by the tools that start runs.

Hosts that render MCP Apps show the HTML resource `ui://orchestrator/run`
(`text/html;profile=mcp-app`) beside the result of any tool whose `_meta.ui.resourceUri` names
it: every pipeline tool and the long meta tools. The app reads the run id from the tool result
the host hands it (`ui/notifications/tool-result`) and follows the run by calling `get_run`
through the host (`tools/call` over the host bridge) until it ends. Hosts without apps ignore
the `_meta` key and the resource: nothing changes for them. The page is one self-contained file
(`mcp_server/viewer/app.html`): a host loads it into a sandboxed frame with no other origin.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

__all__ = ["RUN_APP_MIME", "RUN_APP_URI", "run_app_html", "ui_meta"]

RUN_APP_URI = "ui://orchestrator/run"
RUN_APP_MIME = "text/html;profile=mcp-app"


@cache
def run_app_html() -> str:
    return resources.files("mcp_server").joinpath("viewer", "app.html").read_text(encoding="utf-8")


def ui_meta(names_app: bool) -> dict[str, Any] | None:
    """A tool's `_meta` naming the run app (and the flat key older hosts read), or None."""
    if not names_app:
        return None
    return {"ui": {"resourceUri": RUN_APP_URI}, "ui/resourceUri": RUN_APP_URI}
