"""HTTP that stays safe and available: Host/Origin protection beyond loopback, sessions that no
one client can use up, idle sessions reaped, and `--stateless` advertising only what it sends.

Every server is `orchestrator serve --transport http` in a subprocess; clients are raw HTTP
requests (to send exactly the headers an attacker would) and the SDK's own `Client`. A second
client is another source address on this machine (127.0.0.2): to the server, another peer.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client

from tests._http import MCP_HEADERS, TIMEOUT, busy, from_address, http_server, initialize, open_session, ping
from tests.helpers import run_cli, write_skill

ALLOWED = "mcp.example.test"
OTHER = "127.0.0.2"


async def _connects(url: str, *, mode: str = "legacy", address: str | None = None, token: str | None = None) -> None:
    """A real MCP client (from `address`) initializes and calls a tool."""
    headers = {"Authorization": f"Bearer {token}"} if token else None
    http = from_address(address, headers=headers) if address else create_mcp_http_client(headers=headers)
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        result = await client.call_tool("text-stats", {"text": "still served"})
    assert not result.is_error and result.structured_content is not None
    assert result.structured_content["words"] == 2


# -- Host / Origin --------------------------------------------------------------------------
async def test_bound_to_every_interface_it_warns_and_serves_only_the_allowed_host_names(home: Path) -> None:
    options = ("--host", "0.0.0.0", "--allowed-host", ALLOWED, "--auth-token", "t0ken")
    async with http_server(home, *options) as served:
        auth = {"authorization": "Bearer t0ken"}
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(headers=MCP_HEADERS | auth) as raw:

                async def post(**headers: str) -> int:
                    return (await raw.post(served.url, json=initialize(), headers=headers)).status_code

                assert await post(host="evil.example") == 421  # a rebinding name
                assert await post(host=f"evil.example:{served.port}") == 421
                assert await post(host=f"{ALLOWED}:{served.port}") == 200
                assert await post(host=ALLOWED) == 200
                assert await post(host=f"{ALLOWED}:{served.port}", origin="http://evil.example") == 403
                assert await post(host=f"{ALLOWED}:{served.port}", origin=f"https://{ALLOWED}") == 200
                assert await post() == 200  # 127.0.0.1: loopback names are always served

            http = create_mcp_http_client(headers={"Host": f"{ALLOWED}:{served.port}"} | auth)
            async with http, Client(streamable_http_client(served.url, http_client=http), mode="legacy") as client:
                assert (await client.call_tool("text-stats", {"text": "a b"})).structured_content is not None
    said = served.stderr()
    assert "serving beyond loopback on 0.0.0.0" in said
    assert f"Accepted Host names (others get 421): 127.0.0.1, localhost, [::1], {ALLOWED}" in said
    assert "TLS-terminating proxy" in said
    assert "No --auth-token" not in said and "No --allowed-host" not in said


async def test_bound_to_every_interface_without_allowed_hosts_it_serves_loopback_names_and_says_how_to_add(
    home: Path,
) -> None:
    async with http_server(home, "--host", "0.0.0.0") as served:
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(headers=MCP_HEADERS) as raw:
                name = socket.gethostname()
                foreign = await raw.post(served.url, json=initialize(), headers={"host": f"{name}:{served.port}"})
                local = await raw.post(served.url, json=initialize())
    assert foreign.status_code == 421
    assert local.status_code == 200
    said = served.stderr()
    assert "No --allowed-host given" in said and "--allowed-host mcp.example.com" in said
    assert "No --auth-token: anyone who can connect can call every tool" in said


async def test_on_loopback_an_allowed_host_adds_a_proxy_name_without_a_warning(home: Path) -> None:
    async with http_server(home, "--allowed-host", f"{ALLOWED.upper()}:8443") as served:
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient(headers=MCP_HEADERS) as raw:
                proxied = await raw.post(served.url, json=initialize(), headers={"host": f"{ALLOWED}:8443"})
                other_port = await raw.post(served.url, json=initialize(), headers={"host": f"{ALLOWED}:9"})
    assert proxied.status_code == 200
    assert other_port.status_code == 421  # a name given with its port is served on that port only
    assert "beyond loopback" not in served.stderr()


# -- sessions -------------------------------------------------------------------------------
async def test_an_idle_session_is_reaped_while_a_connected_client_stays(home: Path) -> None:
    # 2 s, not less: the connected client's GET stream must open well within it on a busy machine.
    async with http_server(home, "--session-idle-timeout", "2", "--log-level", "INFO") as served:
        with anyio.fail_after(TIMEOUT):
            async with (
                httpx2.AsyncClient() as raw,
                Client(served.url, mode="legacy") as connected,  # keeps its GET stream open
            ):
                opened = await open_session(raw, served.url)
                session = opened.headers["mcp-session-id"]
                assert await ping(raw, served.url, session) == 200
                await served.wait_for(rf"closed HTTP session {session[:12]}: idle for 2 s")
                assert await ping(raw, served.url, session) == 404  # gone: the client must initialize again
                result = await connected.call_tool("text-stats", {"text": "outlived it"})
                assert result.structured_content is not None
            await _connects(served.url)


async def test_one_client_opening_many_sessions_loses_its_own_oldest_idle_ones_not_other_clients(
    home: Path,
) -> None:
    async with http_server(home, "--max-sessions-per-client", "3", "--max-sessions", "5") as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as greedy, from_address(OTHER) as other:
                theirs = (await open_session(other, url)).headers["mcp-session-id"]
                mine = [(await open_session(greedy, url)).headers["mcp-session-id"] for _ in range(6)]
                assert [await ping(greedy, url, s) for s in mine] == [404, 404, 404, 200, 200, 200]
                assert await ping(other, url, theirs) == 200
                await _connects(url, address=OTHER)
                await _connects(url, mode="auto", address=OTHER)


async def test_a_client_whose_sessions_are_all_busy_is_refused_while_a_second_client_connects(home: Path) -> None:
    async with http_server(home, "--max-sessions-per-client", "2") as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as greedy:
                first, second = [(await open_session(greedy, url)).headers["mcp-session-id"] for _ in range(2)]
                async with busy(greedy, url, first), busy(greedy, url, second):
                    refused = await greedy.post(url, json=initialize(), headers=MCP_HEADERS)
                    assert refused.status_code == 429
                    assert "Too many open sessions from your address" in refused.json()["error"]["message"]
                    await _connects(url, address=OTHER)
                    assert await ping(greedy, url, first) == 200  # nothing of theirs was taken
                # Once a session is idle again, it makes room for a new one of the same client (the
                # server notices the closed stream a moment later: poll, bounded by fail_after).
                while (again := await open_session(greedy, url)).status_code == 429:
                    await anyio.sleep(0.05)
                assert again.status_code == 200
                assert sorted([await ping(greedy, url, first), await ping(greedy, url, second)]) == [200, 404]


async def test_a_full_server_takes_room_from_the_heaviest_client_and_refuses_only_when_all_are_busy(
    home: Path,
) -> None:
    async with http_server(home, "--max-sessions", "3", "--max-sessions-per-client", "2") as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as heavy, from_address(OTHER) as light, from_address("127.0.0.3") as late:
                heavy_ids = [(await open_session(heavy, url)).headers["mcp-session-id"] for _ in range(2)]
                light_id = (await open_session(light, url)).headers["mcp-session-id"]
                late_id = (await open_session(late, url)).headers["mcp-session-id"]  # full: heavy pays
                assert [await ping(heavy, url, s) for s in heavy_ids] == [404, 200]
                assert await ping(light, url, light_id) == 200
                async with busy(heavy, url, heavy_ids[1]), busy(light, url, light_id), busy(late, url, late_id):
                    refused = await late.post(url, json=initialize(), headers=MCP_HEADERS)
                    assert refused.status_code == 503
                    assert "limit of 3 open sessions, all busy" in refused.json()["error"]["message"]


async def test_behind_a_local_proxy_forwarded_clients_are_counted_apart_and_an_ipv6_64_is_one_client(
    home: Path,
) -> None:
    options = ("--max-sessions-per-client", "1", "--forwarded-allow-ips", "127.0.0.1")
    async with http_server(home, *options) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            async with httpx2.AsyncClient() as proxy:  # named by --forwarded-allow-ips: its X-Forwarded-For counts

                async def session_of(client: str) -> str:
                    opened = await open_session(proxy, url, {"x-forwarded-for": client})
                    assert opened.status_code == 200
                    return opened.headers["mcp-session-id"]

                first_v4 = await session_of("203.0.113.7")
                other_v4 = await session_of("203.0.113.8")
                first_v6 = await session_of("2001:db8::1")
                other_v6 = await session_of("2001:db8:0:1::1")  # another /64: another client
                same_64 = await session_of("2001:db8::2")  # the same /64: replaces first_v6
                alive = [await ping(proxy, url, s) for s in (first_v4, other_v4, first_v6, other_v6, same_64)]
    assert alive == [200, 200, 404, 200, 200]


async def test_a_request_without_the_token_is_refused_before_it_could_take_a_session(home: Path) -> None:
    options = ("--auth-token", "s3cret", "--max-sessions", "1", "--max-sessions-per-client", "1")
    async with http_server(home, *options) as served:
        url = served.url
        with anyio.fail_after(TIMEOUT):
            auth = {"authorization": "Bearer s3cret"}
            async with httpx2.AsyncClient(headers=auth) as owner, from_address(OTHER) as stranger:
                session = (await open_session(owner, url)).headers["mcp-session-id"]
                async with busy(owner, url, session):
                    # Past the token the server is full and busy (503): a 401 means it never got there.
                    for _ in range(5):
                        assert (await stranger.post(url, json=initialize(), headers=MCP_HEADERS)).status_code == 401
                    assert await ping(owner, url, session) == 200


# -- --stateless capabilities -------------------------------------------------------------------
async def test_stateless_http_promises_list_changed_only_to_the_era_that_can_hear_it(
    home: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    skills.mkdir()
    async with http_server(home, "--stateless", "--skills", str(skills)) as served:
        with anyio.fail_after(TIMEOUT):
            async with Client(served.url, mode="legacy") as legacy, Client(served.url) as modern:
                old = legacy.server_capabilities
                assert old.tools is not None and not old.tools.list_changed
                assert old.prompts is not None and not old.prompts.list_changed
                assert old.resources is not None and not old.resources.list_changed
                new = modern.server_capabilities
                assert new.tools is not None and new.tools.list_changed
                async with modern.listen(tools_list_changed=True) as sub:  # and it is really sent
                    write_skill(tmp_path / "staging", "late-skill").rename(skills / "late-skill")
                    async for event in sub:
                        if isinstance(event, ToolsListChanged):
                            break
                assert "late-skill" in {tool.name for tool in (await legacy.list_tools()).tools}


# -- bad flags --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--allowed-host", "https://mcp.example.com"), "is a URL; give the host name alone"),
        (("--allowed-host", "*"), "no wildcards"),
        (("--max-sessions", "0"), "0 is not 1 or more"),
        (("--session-idle-timeout", "-1"), "not a positive number of seconds"),
        (("--header-timeout", "0"), "not a positive number of seconds"),
        (("--max-connections-per-client", "0"), "0 is not 1 or more"),
        (("--forwarded-allow-ips", "127.0.0.1,proxy.example"), "'proxy.example' is not an IP address or network"),
    ],
)
def test_bad_http_flags_exit_2_saying_what_to_give(flags: tuple[str, ...], says: str, tmp_path: Path) -> None:
    done = run_cli("serve", "--transport", "http", *flags, env=dict(os.environ), cwd=tmp_path, timeout=60)
    assert done.code == 2
    assert says in done.err


def test_http_flags_over_stdio_and_session_limits_without_sessions_are_refused(tmp_path: Path) -> None:
    stdio = ("serve", "--allowed-host", ALLOWED, "--max-sessions", "9", "--forwarded-allow-ips", "127.0.0.1")
    done = run_cli(*stdio, env=dict(os.environ), cwd=tmp_path)
    assert done.code == 2
    assert "--allowed-host, --max-sessions, --forwarded-allow-ips apply to --transport http only" in done.err
    stateless = ("serve", "--transport", "http", "--stateless", "--session-idle-timeout", "5")
    done = run_cli(*stateless, env=dict(os.environ), cwd=tmp_path)
    assert done.code == 2
    assert "--session-idle-timeout limit sessions, which --stateless does not keep" in done.err
