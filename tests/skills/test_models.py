"""Models (SPEC 6): the registry, the Anthropic API and the client's sampling, through real edges.

Two stand-ins, both real: a local HTTP server speaking the Messages API (`AnthropicStub`, the
real `anthropic` SDK pointed at it with ANTHROPIC_BASE_URL) and MCP clients whose sampling
callback is a scripted model, in both protocol eras. Model calls are made by small python skills
written into tmp_path, through tool calls of our server.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp_types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ErrorData,
    SamplingCapability,
    SamplingToolsCapability,
    TextContent,
    ToolUseContent,
)
from pydantic import TypeAdapter, ValidationError

from adapters.models import (
    ModelRegistryError,
    ModelService,
    NoModelProviderError,
    ProviderAccess,
    UnknownModelError,
    load_registry,
    read_registry_file,
)
from mcp_server import create_server
from skills import Home
from skills.core.home import DEFAULT_MODELS_FILE
from skills.core.models import ModelAccess
from tests.fixtures.anthropic_stub import AnthropicStub
from tests.helpers import raised_by, write_skill

KEY = "sk-ant-test-0123456789abcdef-never-shown"
ERAS = ["legacy", "auto"]  # handshake era (2025-11-25) and 2026-07-28
SAMPLING_ERAS = ["legacy", "auto"]

ASK = """
async def ask(question, ctx, model=None, system=None, temperature=None):
    access = ctx.extras["model"]
    done = await access.complete([{"role": "user", "content": question}], system=system, model=model,
                                 temperature=temperature)
    return {"text": done.text, "provider": done.provider, "model": done.model,
            "stop_reason": done.stop_reason, "usage": access.usage.as_dict()}
"""

AGENT = """
async def agent(question, ctx):
    access = ctx.extras["model"]
    tools = [{"name": "add", "description": "Add two integers",
              "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}]
    messages = [{"role": "user", "content": question}]
    for _ in range(4):
        done = await access.complete(messages, tools=tools, system="Use the add tool for sums.")
        if done.stop_reason != "tool_use":
            return {"text": done.text, "usage": access.usage.as_dict()}
        messages.append({"role": "assistant", "content": done.content})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": str(c["input"]["a"] + c["input"]["b"])}
            for c in done.tool_calls()]})
    return {"text": "gave up", "usage": access.usage.as_dict()}
"""

FAN_OUT = """
import anyio

async def fan_out(words, ctx):
    access = ctx.extras["model"]
    answers = {}

    async def one(word):
        step = access.child()
        answers[word] = (await step.complete([{"role": "user", "content": f"define {word}"}], model="validation")).text

    async with anyio.create_task_group() as tg:
        for word in words:
            tg.start_soon(one, word)
    return {"answers": [answers[w] for w in words], "usage": access.usage.as_dict()}
"""


def _skill(root: Path, name: str, fn: str, impl: str, properties: dict[str, Any], required: list[str]) -> None:
    contract = {
        "inputs": {"type": "object", "properties": properties, "required": required},
        "run": {"python": f"impl:{fn}"},
        "timeout": 20,
    }
    write_skill(root, name, description=f"Test skill {name} that asks a model.", contract=contract, impl=impl)


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "model-skills"
    text = {"type": "string"}
    props = {"question": text, "model": text, "system": text, "temperature": {"type": "number"}}
    _skill(root, "ask", "ask", ASK, props, ["question"])
    _skill(root, "agent", "agent", AGENT, {"question": text}, ["question"])
    _skill(root, "fan-out", "fan_out", FAN_OUT, {"words": {"type": "array", "items": text}}, ["words"])
    return root


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Iterator[AnthropicStub]:
    with AnthropicStub() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        yield server


class ScriptedModel:
    """A client's model: answers in order (a callable answer gets the request), records requests."""

    def __init__(self, *answers: Any) -> None:
        self.answers: deque[Any] = deque(answers)
        self.seen: list[CreateMessageRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        self.seen.append(params)
        answer = self.answers.popleft()
        return answer(params) if callable(answer) else answer


def said(text: str, model: str = "client-model") -> CreateMessageResult:
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text), model=model)


def data_of(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


def serve(skills_dir: Path) -> Any:
    """Our server with the test skills (pipelines left out: nothing here needs them)."""
    return create_server(skill_dirs=[skills_dir], pipelines=False)


def client(
    server: Any, mode: str, model: ScriptedModel | None = None, *, tools: bool = False, max_rounds: int = 10
) -> Client:
    caps = SamplingCapability(tools=SamplingToolsCapability()) if tools else None
    return Client(
        server,
        mode=mode,
        sampling_callback=model,  # type: ignore[arg-type]
        sampling_capabilities=caps,
        input_required_max_rounds=max_rounds,
    )


# -- registry ---------------------------------------------------------------------------------
def test_the_shipped_registry_maps_roles_to_current_claude_models_known_to_the_sdk() -> None:
    from anthropic.types.model_param import ModelParam

    registry = load_registry()
    sdk_ids = set(ModelParam.__args__[0].__args__)  # type: ignore[attr-defined]
    assert registry.resolve("orchestrator") == "claude-sonnet-5-5"
    assert registry.resolve("review") == "claude-opus-5-5"
    assert registry.resolve("validation") == "claude-haiku-5-5"
    assert registry.resolve(None) == "claude-sonnet-5-5"
    assert registry.resolve("claude-opus-5-5") == "claude-opus-5-5"
    assert set(registry.models) <= sdk_ids
    assert {"orchestrator", "review", "validation", "claude-haiku-4-5"} <= registry.known()
    assert registry.providers == ("anthropic", "sampling")
    assert registry.price("review") == (4.0, 20.0)
    assert registry.cost("orchestrator", 1_000_000, 100_000) == pytest.approx(2.0 + 1.0)
    # Haiku's long-context tier
    assert registry.cost("validation", 1000, 1000) == pytest.approx((1000 * 0.10 + 1000 * 0.50) / 1e6)
    assert registry.cost("validation", 200_000, 1000) == pytest.approx((200_000 * 0.50 + 1000 * 2.50) / 1e6)


def test_an_unknown_model_is_an_error_with_did_you_mean() -> None:
    registry = load_registry()
    with pytest.raises(UnknownModelError) as caught:
        registry.resolve("reveiw")
    assert "unknown model 'reveiw'" in str(caught.value)
    assert "did you mean 'review'?" in caught.value.hint
    with pytest.raises(UnknownModelError, match="did you mean 'claude-opus-5-5'"):
        registry.resolve("claude-opus-5.5")


def test_install_writes_the_registry_once_and_keeps_the_users_edits(tmp_path: Path) -> None:
    home = Home(tmp_path / "h")
    assert "models/registry.yaml" in home.install().created
    path = home.models_dir / "registry.yaml"
    assert path.read_text() == DEFAULT_MODELS_FILE.read_text()
    path.write_text("roles: {orchestrator: claude-haiku-5-5}\n")
    assert "models/registry.yaml" in home.install().kept
    assert path.read_text() == "roles: {orchestrator: claude-haiku-5-5}\n"


def test_the_home_registry_is_layered_over_the_defaults(tmp_path: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    (models / "registry.yaml").write_text(
        "roles:\n  orchestrator: claude-haiku-5-5\n  summaries: my-model\n"
        "providers: [sampling]\n"
        "models:\n  my-model: {input: 1.5, output: 3, max_tokens: 100}\n"
    )
    registry = load_registry(tmp_path)
    assert registry.problems == []
    assert registry.source == models / "registry.yaml"
    assert registry.resolve(None) == "claude-haiku-5-5"
    assert registry.resolve("summaries") == "my-model"
    assert registry.resolve("review") == "claude-opus-5-5"  # the defaults still apply
    assert registry.price("my-model") == (1.5, 3.0)
    assert registry.info("summaries").max_tokens == 100
    assert registry.providers == ("sampling",)


def _pydantic_says(kind: Any, value: Any) -> str:
    """pydantic's own words for `value` that is not a `kind` (the registry passes them on after the line)."""
    return raised_by(lambda: TypeAdapter(kind).validate_python(value), ValidationError).errors()[0]["msg"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("roles: [orchestrator\n", "line 2, column 1: not valid YAML"),
        (
            "models:\n  cheap:\n    input: free\n    output: 1\n",
            f"line 3: models.cheap.input: {_pydantic_says(float, 'free')}",
        ),
        ("roles:\n  review: claude-opus-55\n", "line 2: role 'review' names the unknown model 'claude-opus-55'"),
        ("models:\n  m: {input: 1, output: 2, max_token: 5}\n", "line 2: unknown key 'max_token'"),
        (
            "providers: [anthropic, openai]\n",
            f"line 1: providers.1: {_pydantic_says(Literal['anthropic', 'sampling'], 'openai')}",
        ),
    ],
)
def test_a_broken_home_registry_is_reported_by_line_and_the_defaults_apply(
    tmp_path: Path, text: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "models" / "registry.yaml"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ModelRegistryError) as caught:
        read_registry_file(path, base=read_registry_file(DEFAULT_MODELS_FILE))
    assert expected in str(caught.value)
    if "max_token" in text:
        assert caught.value.hint == "did you mean 'max_tokens'?"
    if "opus-55" in text:
        assert caught.value.hint == "did you mean 'claude-opus-5-5'?"
    with caplog.at_level(logging.ERROR, logger="adapters.models"):
        registry = load_registry(tmp_path)
    assert registry.resolve("review") == "claude-opus-5-5" and registry.source is None
    assert expected in str(registry.problems[0])
    assert f"{path} cannot be used, the shipped model defaults apply instead" in caplog.text


async def test_the_server_rereads_the_registry_when_the_file_changes(home: Path, skills_dir: Path) -> None:
    server = serve(skills_dir)
    assert server.models.registry.resolve(None) == "claude-sonnet-5-5"
    (home / "models" / "registry.yaml").write_text("roles: {orchestrator: claude-haiku-5-5}\n")
    assert server.models.registry.resolve(None) == "claude-haiku-5-5"


# -- the Anthropic API ------------------------------------------------------------------------
async def test_a_call_goes_to_the_anthropic_api_with_usage_and_cost(stub: AnthropicStub, skills_dir: Path) -> None:
    stub.reply("Paris.", input_tokens=1200, output_tokens=300, thinking="the capital...")
    async with Client(serve(skills_dir)) as mcp:
        result = await mcp.call_tool(
            "ask", {"question": "Capital of France?", "system": "Be brief.", "model": "review"}
        )
    data = data_of(result)
    assert data["text"] == "Paris."
    assert data["provider"] == "anthropic" and data["model"] == "claude-opus-5-5"
    assert data["usage"] == {
        "input_tokens": 1200,
        "output_tokens": 300,
        "total_tokens": 1500,
        "cost_usd": pytest.approx((1200 * 4.0 + 300 * 20.0) / 1e6),
        "calls": 1,
        "estimated": False,  # counted by the provider
    }
    (request,) = stub.requests
    assert request["path"] == "/v1/messages"
    assert any(KEY in value for value in request["headers"].values())  # the key reached the API (only there)
    assert request["body"] == {
        "model": "claude-opus-5-5",
        "max_tokens": 8192,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Capital of France?"}],
    }


async def test_tool_use_blocks_round_trip_through_the_api(stub: AnthropicStub, skills_dir: Path) -> None:
    stub.reply("Let me add.", tool_uses=[{"id": "toolu_1", "name": "add", "input": {"a": 2, "b": 40}}], thinking="hm")
    stub.reply("The sum is 42.", input_tokens=50, output_tokens=7)
    async with Client(serve(skills_dir)) as mcp:
        data = data_of(await mcp.call_tool("agent", {"question": "2 + 40?"}))
    assert data["text"] == "The sum is 42."
    assert data["usage"]["calls"] == 2 and data["usage"]["input_tokens"] == 60
    second = stub.requests[1]["body"]
    assert second["tools"][0]["name"] == "add"
    assert second["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig-1"},  # echoed back unchanged, as the API wants
            {"type": "text", "text": "Let me add."},
            {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 2, "b": 40}},
        ],
    }
    assert second["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"}],
    }


async def test_a_transient_overload_is_retried(stub: AnthropicStub, skills_dir: Path) -> None:
    stub.fail(529, "overloaded_error", "Overloaded")
    stub.fail(500, "api_error", "Internal error")
    stub.reply("fine now")
    async with Client(serve(skills_dir)) as mcp:
        data = data_of(await mcp.call_tool("ask", {"question": "hello"}))
    assert data["text"] == "fine now"
    assert len(stub.requests) == 3
    assert data["usage"]["calls"] == 1


async def test_a_lasting_failure_is_one_clear_error_without_the_key(
    stub: AnthropicStub, skills_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stub.fail(529, "overloaded_error", f"Overloaded (key {KEY})", times=4)
    stub.fail(401, "authentication_error", "invalid x-api-key")
    caplog.set_level(logging.DEBUG)
    async with Client(serve(skills_dir)) as mcp:
        overloaded = await mcp.call_tool("ask", {"question": "hello"})
        rejected = await mcp.call_tool("ask", {"question": "hello"})
    assert overloaded.is_error and rejected.is_error
    assert "the Anthropic API answered 529 after 3 retries (overloaded_error: Overloaded (key ***))" in text_of(
        overloaded
    )
    assert "try again later" in text_of(overloaded)
    assert len(stub.requests) == 5
    assert "the Anthropic API answered 401 (authentication_error: invalid x-api-key)" in text_of(rejected)
    assert "ANTHROPIC_API_KEY was rejected" in text_of(rejected)
    for text in (text_of(overloaded), text_of(rejected), caplog.text):
        assert KEY not in text
    assert "AnthropicProvider(key=set" in repr(ModelService().access().providers[0])


async def test_temperature_goes_to_the_clients_model_but_not_to_the_api(stub: AnthropicStub) -> None:
    stub.reply("a")
    access = ModelService().access()
    await access.complete([{"role": "user", "content": "x"}], model="claude-haiku-4-5", temperature=0.2)
    assert "temperature" not in stub.requests[0]["body"]  # this SDK's Messages API takes no sampling parameters
    assert access.usage.calls == 1


async def test_the_anthropic_sdk_is_not_imported_at_server_start() -> None:
    import subprocess
    import sys

    code = "import sys; from mcp_server import create_server; create_server(); print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the client's sampling --------------------------------------------------------------------
@pytest.mark.parametrize("mode", SAMPLING_ERAS)
async def test_without_a_key_the_clients_model_answers_through_sampling(mode: str, skills_dir: Path) -> None:
    model = ScriptedModel(said("Paris, says the client."))
    async with client(serve(skills_dir), mode, model) as mcp:
        arguments = {"question": "Capital of France?", "system": "Be brief.", "model": "review", "temperature": 0.3}
        result = await mcp.call_tool("ask", arguments)
    data = data_of(result)
    assert data["text"] == "Paris, says the client."
    assert data["provider"] == "sampling" and data["model"] == "client-model"
    # Sampling reports no token counts: estimated at about 4 characters a token (+4 per message).
    usage = data["usage"]
    assert usage["estimated"] is True and usage["calls"] == 1
    assert usage["input_tokens"] == -(-len("Be brief." + "Capital of France?") // 4) + 4
    assert usage["output_tokens"] == -(-len("Paris, says the client.") // 4)
    assert usage["cost_usd"] > 0  # priced as the asked-for model (the registry's `review` role)
    (params,) = model.seen
    assert params.system_prompt == "Be brief."
    assert params.max_tokens == 8192 and params.temperature == 0.3
    assert [m.content for m in params.messages] == [TextContent(type="text", text="Capital of France?")]
    assert params.model_preferences is not None and params.model_preferences.hints is not None
    assert [h.name for h in params.model_preferences.hints] == ["claude-opus-5-5", "opus"]


@pytest.mark.parametrize("mode", SAMPLING_ERAS)
async def test_tool_use_through_sampling_in_both_eras(mode: str, skills_dir: Path) -> None:
    use = ToolUseContent(type="tool_use", id="call-1", name="add", input={"a": 2, "b": 40})
    model = ScriptedModel(
        CreateMessageResultWithTools(role="assistant", content=[use], model="client-model", stop_reason="toolUse"),
        lambda params: said(f"The sum is {params.messages[-1].content_as_list[0].content[0].text}."),
    )
    async with client(serve(skills_dir), mode, model, tools=True) as mcp:
        data = data_of(await mcp.call_tool("agent", {"question": "2 + 40?"}))
    assert data["text"] == "The sum is 42."
    assert data["usage"]["calls"] == 2
    first, second = model.seen
    assert first.tools is not None and first.tools[0].name == "add"
    assert [m.role for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1].content_as_list == [use]
    (result,) = second.messages[2].content_as_list
    assert result.type == "tool_result" and result.tool_use_id == "call-1"


async def test_parallel_model_calls_share_one_round_in_the_2026_era(skills_dir: Path) -> None:
    model = ScriptedModel(*[lambda p: said(p.messages[0].content.text.upper())] * 3)  # type: ignore[union-attr]
    async with client(serve(skills_dir), "auto", model, max_rounds=1) as mcp:  # more than one round would fail
        data = data_of(await mcp.call_tool("fan-out", {"words": ["ant", "bee", "cat"]}))
    assert data["answers"] == ["DEFINE ANT", "DEFINE BEE", "DEFINE CAT"]
    assert data["usage"]["calls"] == 3
    assert len(model.seen) == 3  # each asked once; the replays were answered from the call's state


async def test_a_client_that_declines_to_sample_fails_the_call_clearly(skills_dir: Path) -> None:
    model = ScriptedModel(ErrorData(code=-1, message="User rejected sampling request"))
    async with client(serve(skills_dir), "legacy", model) as mcp:
        result = await mcp.call_tool("ask", {"question": "may I?"})
    assert result.is_error
    assert "the client refused the sampling request: User rejected sampling request" in text_of(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_tools_need_the_clients_sampling_tools_capability(mode: str, skills_dir: Path) -> None:
    async with client(serve(skills_dir), mode, ScriptedModel()) as mcp:
        result = await mcp.call_tool("agent", {"question": "2 + 40?"})
    assert result.is_error
    assert "sampling: the client's sampling does not take tools (no sampling.tools capability)" in text_of(result)


@pytest.mark.parametrize("mode", ERAS)
async def test_with_neither_provider_the_call_fails_saying_how_to_get_one(mode: str, skills_dir: Path) -> None:
    async with client(serve(skills_dir), mode) as mcp:
        result = await mcp.call_tool("ask", {"question": "anyone?"})
    assert result.is_error
    text = text_of(result)
    assert "no model provider can answer this call" in text
    assert "anthropic: ANTHROPIC_API_KEY is not set" in text
    assert "sampling: the client did not declare the sampling capability" in text
    assert "set ANTHROPIC_API_KEY, or call it from a client that supports sampling" in text


async def test_without_a_client_only_the_api_is_asked() -> None:
    access = ModelService().access()
    with pytest.raises(NoModelProviderError, match="sampling: no MCP client is connected to this call"):
        await access.complete([{"role": "user", "content": "x"}])


# -- provider order and usage -----------------------------------------------------------------
@pytest.mark.parametrize("mode", ERAS)
async def test_with_a_key_the_api_answers_even_when_the_client_samples(
    mode: str, stub: AnthropicStub, skills_dir: Path
) -> None:
    stub.reply("from the API")
    model = ScriptedModel(said("from the client"))
    async with client(serve(skills_dir), mode, model) as mcp:
        data = data_of(await mcp.call_tool("ask", {"question": "who?"}))
    assert data["text"] == "from the API" and data["provider"] == "anthropic"
    assert model.seen == []


async def test_the_registry_can_put_sampling_first(home: Path, stub: AnthropicStub, skills_dir: Path) -> None:
    server = serve(skills_dir)
    (home / "models" / "registry.yaml").write_text("providers: [sampling, anthropic]\n")
    model = ScriptedModel(said("from the client"))
    async with client(server, "legacy", model) as mcp:
        data = data_of(await mcp.call_tool("ask", {"question": "who?"}))
    assert data["provider"] == "sampling"
    assert stub.requests == []


async def test_a_child_access_counts_its_own_usage_and_adds_it_to_its_parent(stub: AnthropicStub) -> None:
    stub.reply("one", input_tokens=100, output_tokens=10)
    stub.reply("two", input_tokens=1000, output_tokens=20)
    run = ModelService().access()
    assert isinstance(run, ModelAccess) and isinstance(run, ProviderAccess)
    step = run.child()
    agent = step.child()
    await step.complete([{"role": "user", "content": "a"}], model="validation")
    await agent.complete([{"role": "user", "content": "b"}], model="validation")
    assert (agent.usage.calls, step.usage.calls, run.usage.calls) == (1, 2, 2)
    assert step.usage.input_tokens == run.usage.input_tokens == 1100
    assert agent.usage.cost_usd == pytest.approx((1000 * 0.10 + 20 * 0.50) / 1e6)
    assert run.usage.cost_usd == pytest.approx((1100 * 0.10 + 30 * 0.50) / 1e6)
    assert run.known() >= {"validation", "claude-haiku-5-5"} and run.resolve("validation") == "claude-haiku-5-5"


def test_a_pipeline_naming_an_unknown_model_is_reported_and_a_known_role_is_accepted(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "pipelines").mkdir(parents=True)
    step = "steps:\n  - id: files\n    skill: list-files\n    parameters: {directory: .}\n"
    (home / "pipelines" / "odd-model.yaml").write_text(f"id: odd-model\nmodel: gpt-4\n{step}")
    (home / "pipelines" / "review-model.yaml").write_text(f"id: review-model\nmodel: review\n{step}")
    server = create_server(home=home)
    assert server.catalog.find("review-model") is not None
    assert server.catalog.find("odd-model") is None
    reported = [str(p.error) for p in server.catalog.problems() if p.path.name == "odd-model.yaml"]
    assert reported and "gpt-4" in reported[0]
