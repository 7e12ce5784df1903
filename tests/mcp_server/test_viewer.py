"""The run viewer: `/runs` on the HTTP transport and `orchestrator ui`, in a real headless Chromium.

The runs are real (`orchestrator run` in the same home); the server is a real subprocess; the
browser is Chromium driven over the DevTools protocol (tests/_browser.py). The browser tests
skip when no Chromium is installed; the HTTP-level checks of the gate (token, cookie, Host,
Origin, CSRF) need none.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests._browser import CHROMIUM, chromium
from tests._http import ORCHESTRATOR, http_server
from tests.helpers import write_skill

TOKEN = "viewer-test-token-123"
HOSTILE = '<script>window.pwned = 1</script>"><img src=x onerror="window.pwned = 2">'
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")


def _home_with_pipelines(home: Path) -> None:
    skills = home / "skills"
    write_skill(
        skills,
        "boom",
        contract={"run": {"python": "impl:boom"}},
        impl="def boom():\n    raise ValueError('the <b>disk</b> is full')\n",
    )
    write_skill(
        skills,
        "evil",
        contract={"run": {"python": "impl:evil"}},
        impl=f"def evil():\n    return {{'html': {HOSTILE!r}}}\n",
    )
    write_skill(
        skills, "fine", contract={"run": {"python": "impl:fine"}}, impl="def fine():\n    return {'ok': True}\n"
    )
    folder = home / "pipelines"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "breaks.yaml").write_text(
        "id: breaks\nsteps:\n  - id: prepare\n    skill: fine\n  - id: explode\n    skill: boom\n"
    )
    (folder / "hostile.yaml").write_text("id: hostile\nsteps:\n  - id: render\n    skill: evil\n")
    (folder / "quick.yaml").write_text("id: quick\nsteps:\n  - id: only\n    skill: fine\n")


async def _run(home: Path, pipeline: str) -> str:
    """Run a pipeline with `orchestrator run --json` in `home`; its run id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"ORCHESTRATOR_HOME": str(home)}
    done = await anyio.run_process([str(ORCHESTRATOR), "run", pipeline, "--json"], env=env, check=False)
    text = done.stdout.decode()
    match = re.search(r'"run_id": "([0-9a-f]+)"', text) or re.search(r"run ([0-9a-f]{12})", done.stderr.decode())
    assert match, (text, done.stderr.decode())
    return match[1]


@needs_chromium
async def test_a_browser_logs_in_once_then_sees_runs_a_failed_steps_error_and_new_runs_live(
    home: Path, tmp_path: Path
) -> None:
    _home_with_pipelines(home)
    failed = await _run(home, "breaks")
    async with http_server(home, "--auth-token", TOKEN) as served, chromium() as browser:
        base = f"http://127.0.0.1:{served.port}/runs/"
        page = await browser.page()
        await page.goto(base)
        assert await page.evaluate("document.querySelector('form[action=\"/runs/login\"]') !== null")
        await page.evaluate(
            f"document.querySelector('input[name=token]').value = {json.dumps(TOKEN)};"
            "document.querySelector('form').submit()"
        )
        await page.wait_until(f"document.querySelector('tr[data-run=\"{failed}\"]') !== null")
        assert TOKEN not in await page.evaluate("location.href + document.cookie")  # HttpOnly: no script reads it
        row = await page.evaluate(f"document.querySelector('tr[data-run=\"{failed}\"]').innerText")
        assert "breaks" in row and "failed" in row
        (tmp_path / "list.png").write_bytes(await page.screenshot())

        await page.evaluate(f"location.hash = '#run/{failed}'")
        node = "document.querySelector('.node[data-step=\"explode\"]')"
        await page.wait_until(f"{node} !== null && {node}.classList.contains('n-failed')")
        assert await page.evaluate("document.querySelector('.node[data-step=\"prepare\"]').className") == (
            "node n-succeeded"
        )
        error = await page.evaluate("document.getElementById('run-error').innerText")
        assert "skill_failed" in error and "the <b>disk</b> is full" in error  # shown as text, tags and all
        step = await page.evaluate("document.querySelector('details[data-path=\"explode\"]').innerText")
        assert "failed" in step
        assert await page.evaluate("document.querySelectorAll('#timeline .lane').length") == 2

        await page.evaluate("location.hash = ''; window.notReloaded = true")
        await page.wait_until("document.getElementById('live').textContent === 'live'")
        rows = await page.evaluate("document.querySelectorAll('#runs tbody tr').length")
        new = await _run(home, "quick")
        await page.wait_until(f"document.querySelector('tr[data-run=\"{new}\"]') !== null")  # no reload: pushed
        assert await page.evaluate("window.notReloaded === true")
        assert await page.evaluate("document.querySelectorAll('#runs tbody tr').length") == rows + 1


@needs_chromium
async def test_step_outputs_full_of_markup_are_shown_as_text_and_never_run(home: Path) -> None:
    _home_with_pipelines(home)
    run_id = await _run(home, "hostile")
    async with http_server(home) as served, chromium() as browser:
        page = await browser.page()
        await page.goto(f"http://127.0.0.1:{served.port}/runs/#run/{run_id}")
        await page.wait_until("document.querySelector('details[data-path=\"render\"]') !== null")
        await page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        text = await page.evaluate("document.getElementById('steps').innerText")
        assert "<script>window.pwned = 1</script>" in text and 'onerror=\\"window.pwned = 2\\"' in text
        assert await page.evaluate("document.querySelectorAll('main img, main script').length") == 0
        assert await page.evaluate("typeof window.pwned") == "undefined"


async def test_the_viewer_keeps_the_transports_gate(home: Path) -> None:
    _home_with_pipelines(home)
    await _run(home, "quick")
    async with http_server(home, "--auth-token", TOKEN) as served:
        base = f"http://127.0.0.1:{served.port}"
        async with httpx2.AsyncClient(base_url=base, follow_redirects=False) as http:
            assert (await http.get("/runs/api/runs")).status_code == 401
            page = await http.get("/runs/")
            assert page.status_code == 200 and 'method="post"' in page.text and TOKEN not in page.text
            assert "default-src 'none'" in page.headers["content-security-policy"]
            assert (await http.post("/runs/login", data={"token": "wrong"})).status_code == 401
            assert (await http.get("/runs/", headers={"host": "evil.example"})).status_code == 421
            foreign = await http.get("/runs/api/runs", headers={"origin": "http://evil.example"})
            assert foreign.status_code == 403
            login = await http.post("/runs/login", data={"token": TOKEN})
            assert login.status_code == 303
            cookie = login.headers["set-cookie"].lower()
            assert "httponly" in cookie and "samesite=strict" in cookie and "path=/runs" in cookie
            session = re.match(r"orchestrator_viewer=([^;]+)", login.headers["set-cookie"])
            assert session is not None
            jar = {"cookie": f"orchestrator_viewer={session[1]}"}
            runs = (await http.get("/runs/api/runs", headers=jar)).json()["runs"]
            assert [r["pipeline"] for r in runs] == ["quick"]
            csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', (await http.get("/runs/", headers=jar)).text)
            assert csrf is not None
            refused = await http.post(f"/runs/api/runs/{runs[0]['run_id']}/cancel", headers=jar)
            assert refused.status_code == 403  # no CSRF token
            assert "CSRF" in refused.json()["error"]["message"]
            mcp = await http.post("/mcp", headers=jar, json={})
            assert mcp.status_code == 401  # the viewer's cookie opens the viewer only
    assert TOKEN not in served.stderr()


async def test_orchestrator_ui_serves_the_same_runs_to_stdio_users(home: Path) -> None:
    _home_with_pipelines(home)
    run_id = await _run(home, "breaks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"ORCHESTRATOR_HOME": str(home)}
    async with await anyio.open_process(
        [str(ORCHESTRATOR), "ui", "--port", "0"], env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE
    ) as process:
        try:
            said = ""
            assert process.stderr is not None
            with anyio.fail_after(60):
                while (found := re.search(r"http://127\.0\.0\.1:(\d+)/runs/", said)) is None:
                    said += (await process.stderr.receive()).decode()
            async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{found[1]}") as http:
                detail: dict[str, Any] = (await http.get(f"/runs/api/runs/{run_id}")).json()
                page = await http.get("/runs/")
        finally:
            process.terminate()
    assert detail["run"]["status"] == "failed"
    assert [n["id"] for n in detail["graph"]] == ["prepare", "explode"]
    failed = [s for s in detail["steps"] if s["status"] == "failed"]
    assert [s["path"] for s in failed] == ["explode"] and failed[0]["error"]["error"]["type"] == "skill_failed"
    assert '<script src="/runs/static/viewer.js">' in page.text


def test_runs_show_prints_every_step_with_its_status_and_error(home: Path, tmp_path: Path) -> None:
    _home_with_pipelines(home)
    run_id = anyio.run(_run, home, "breaks")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")} | {"ORCHESTRATOR_HOME": str(home)}
    shown = subprocess.run(
        [str(ORCHESTRATOR), "runs", "show", run_id], env=env, capture_output=True, text=True, timeout=60
    )
    lines = [line.split() for line in shown.stdout.split("steps:\n", 1)[1].split("\n\n", 1)[0].splitlines()]
    assert [(parts[0], parts[1]) for parts in lines] == [("succeeded", "prepare"), ("failed", "explode")]
    assert "skill_failed:" in shown.stdout and "the <b>disk</b> is full" in shown.stdout
    data = json.loads(
        subprocess.run(
            [str(ORCHESTRATOR), "runs", "show", run_id, "--json"], env=env, capture_output=True, text=True, timeout=60
        ).stdout
    )
    assert [(s["path"], s["status"]) for s in data["steps"]] == [("prepare", "succeeded"), ("explode", "failed")]
    assert all(isinstance(s["duration"], float) for s in data["steps"])


async def test_a_running_run_is_cancelled_from_the_viewer_with_its_csrf_token(home: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    write_skill(
        home / "skills",
        "slow",
        contract={"run": {"python": "impl:slow"}},
        impl=f"import time, pathlib\ndef slow():\n    while not pathlib.Path({str(release)!r}).exists():\n"
        "        time.sleep(0.05)\n    return 1\n",
    )
    (home / "pipelines").mkdir(parents=True, exist_ok=True)
    (home / "pipelines" / "long.yaml").write_text("id: long\nsteps:\n  - id: wait\n    skill: slow\n")
    answered: list[Any] = []
    async with http_server(home) as served, anyio.create_task_group() as tg:

        async def start() -> None:
            http = create_mcp_http_client()
            async with http, Client(streamable_http_client(served.url, http_client=http)) as client:
                answered.append(await client.call_tool("long", {}))

        tg.start_soon(start)
        base = f"http://127.0.0.1:{served.port}"
        async with httpx2.AsyncClient(base_url=base) as http:
            with anyio.move_on_after(60):
                while not (runs := _ok(await http.get("/runs/api/runs", params={"status": "running"}), served)["runs"]):
                    await anyio.sleep(0.05)
            assert runs, (answered, served.stderr()[-3000:])
            run_id = runs[0]["run_id"]
            assert (await http.get(f"/runs/api/runs/{run_id}")).json()["actions"]["cancel"] is True
            csrf = re.search(r'name="csrf-token" content="([0-9a-f]+)"', (await http.get("/runs/")).text)
            assert csrf is not None
            done = await http.post(f"/runs/api/runs/{run_id}/cancel", headers={"x-csrf-token": csrf[1]})
            assert done.status_code == 200 and done.json()["cancelled"] is True
            assert (await http.get(f"/runs/api/runs/{run_id}")).json()["run"]["status"] == "cancelled"
        release.touch()
    assert answered and answered[0].is_error


ASK = """id: greet
steps:
  - id: who
    ask: "Who is <b>there</b>?"
    schema:
      type: object
      properties:
        name: {type: string, title: Name, description: "Your name"}
        age: {type: integer}
        colour: {type: string, enum: [red, blue]}
        sure: {type: boolean}
      required: [name]
  - id: after
    skill: fine
outputs: {greeted: "{{ who.name }}", age: "{{ who.age }}", colour: "{{ who.colour }}", sure: "{{ who.sure }}"}
"""


@needs_chromium
async def test_a_browser_answers_a_waiting_runs_question_with_the_fields_of_its_schema(home: Path) -> None:
    _home_with_pipelines(home)
    (home / "pipelines" / "greet.yaml").write_text(ASK)
    async with http_server(home, "--auth-token", TOKEN) as served, chromium() as browser:
        http = create_mcp_http_client(headers={"authorization": f"Bearer {TOKEN}"})
        async with http, Client(streamable_http_client(served.url, http_client=http)) as client:  # no elicitation
            waiting = await client.call_tool("greet", {})
        assert waiting.structured_content is not None and waiting.structured_content["status"] == "waiting"
        run_id = waiting.structured_content["run_id"]

        base = f"http://127.0.0.1:{served.port}/runs/"
        page = await browser.page()
        await page.goto(base)
        await page.evaluate(
            f"document.querySelector('input[name=token]').value = {json.dumps(TOKEN)};"
            "document.querySelector('form').submit()"
        )
        await page.wait_until(f"document.querySelector('tr[data-run=\"{run_id}\"]') !== null")
        await page.evaluate(f"location.hash = '#run/{run_id}'")
        await page.wait_until("!document.getElementById('answer').hidden")
        assert await page.evaluate("document.getElementById('question').innerText") == "Who is <b>there</b>?"
        field = "document.querySelector('#answer [data-field=\"{}\"]')"
        kinds = await page.evaluate(
            "[...document.querySelectorAll('#answer [data-field]')].map(f => [f.dataset.field, f.tagName, f.type])"
        )
        assert kinds == [
            ["name", "INPUT", "text"],
            ["age", "INPUT", "number"],
            ["colour", "SELECT", "select-one"],
            ["sure", "INPUT", "checkbox"],
        ]
        labels = await page.evaluate("document.getElementById('answer').innerText")
        assert "Name" in labels and "Your name" in labels

        # a bad answer: no name, an age that is no integer; the page says why and the run waits on
        await page.evaluate(f"{field.format('age')}.value = '2.5'; document.querySelector('#answer button').click()")
        await page.wait_until("document.getElementById('answer-problem').textContent !== ''")
        problem = await page.evaluate("document.getElementById('answer-problem').textContent")
        assert "does not fit the question's schema" in problem and "still waits for an answer" in problem
        assert "name" in problem and "age" in problem
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{served.port}") as api:
            bearer = {"authorization": f"Bearer {TOKEN}"}
            detail = (await api.get(f"/runs/api/runs/{run_id}", headers=bearer)).json()
            assert detail["run"]["status"] == "waiting"

            await page.evaluate(
                f"{field.format('name')}.value = 'Ada <i>L</i>'; {field.format('age')}.value = '36';"
                f"{field.format('colour')}.value = 'blue'; {field.format('sure')}.checked = true;"
                "document.querySelector('#answer button').click()"
            )
            status = "document.querySelector('#run-status .status')"
            await page.wait_until(f"{status} !== null && {status}.textContent === 'succeeded'")
            assert await page.evaluate("document.getElementById('answer').hidden")
            assert await page.evaluate("document.getElementById('answer-problem').textContent") == ""
            detail = (await api.get(f"/runs/api/runs/{run_id}", headers=bearer)).json()
    assert detail["run"]["status"] == "succeeded"
    result = detail["run"]["result"]
    assert (result["greeted"], result["age"], result["colour"], result["sure"]) == ("Ada <i>L</i>", 36, "blue", True)


def _ok(response: Any, served: Any) -> Any:
    """The JSON of a viewer API answer, which must be a success (else its status, text and the log)."""
    assert response.status_code == 200, (response.status_code, response.text[:500], served.stderr()[-3000:])
    return response.json()
