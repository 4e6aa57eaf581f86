"""`sandboxkit.agents.langchain` against real langchain-core: a scripted chat model with
`bind_tools`, its tool calls run by the tools' `ainvoke`, over the emulator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

import sandboxkit
from sandboxkit.agents.langchain import tools
from sandboxkit.emulator import Emulator

from ..agents_adapters_support import CALLS, FINAL, check_scene, stage


class ScriptedChatModel(BaseChatModel):
    """A chat model that asks for `CALLS` one per turn, then answers `FINAL`; it keeps the
    messages and the tools (as `bind_tools` formats them) of each turn."""

    seen: list[list[BaseMessage]] = Field(default_factory=list)
    shown: list[Any] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self, tools: Sequence[Any], **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        # As a provider's chat model does: the tools in OpenAI's format, bound as a kwarg.
        return self.bind(tools=[convert_to_openai_tool(tool) for tool in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        turn = len(self.seen)
        self.seen.append(list(messages))
        self.shown.append(kw.get("tools"))
        if turn < len(CALLS):
            name, arguments = CALLS[turn]
            call = {"name": name, "args": arguments, "id": f"call-{turn}", "type": "tool_call"}
            message = AIMessage(content="", tool_calls=[call])
        else:
            message = AIMessage(content=FINAL)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return self._generate(messages, stop, **kw)


async def run_agent(kit_tools: list[BaseTool], model: ScriptedChatModel) -> list[BaseMessage]:
    """The tool-calling loop of an agent: ask the model, run each call it makes, repeat."""
    bound = model.bind_tools(kit_tools)
    by_name = {tool.name: tool for tool in kit_tools}
    messages: list[BaseMessage] = [HumanMessage("Write notes.txt")]
    while True:
        reply = await bound.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for call in reply.tool_calls:
            messages.append(await by_name[call["name"]].ainvoke(call))


async def test_an_agent_writes_reads_and_sees_refusals_as_error_tool_messages(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Through `bind_tools` and `ainvoke`, a model writes a file, reads it back, and gets
    two hostile paths back as `invalid_path` ToolMessages with status "error"; no secret is
    anywhere the model saw."""
    scene = await stage(emulator, emulator_client)
    model = ScriptedChatModel()
    messages = await run_agent(tools(scene.kit), model)
    assert messages[-1].content == FINAL
    results = [m for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert [m.status for m in results] == ["success", "success", "error", "error"]
    assert [m.tool_call_id for m in results] == [f"call-{i}" for i in range(4)]
    outputs = [json.loads(m.text) for m in results]
    seen = json.dumps(
        [[m.model_dump() for turn in model.seen for m in turn], model.shown],
        default=repr,
        ensure_ascii=False,
    )
    check_scene(scene, outputs, seen)


async def test_the_model_is_shown_each_tool_s_schema_as_written(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """`bind_tools` shows every tool of the kit, by its name and description, with the
    kit's own JSON Schema as its parameters."""
    scene = await stage(emulator, emulator_client)
    shown = [convert_to_openai_tool(tool)["function"] for tool in tools(scene.kit)]
    assert shown == [
        {"name": t.name, "description": t.description, "parameters": dict(t.input_schema)}
        for t in scene.kit.tools
    ]


async def test_hostile_argument_names_are_refused_by_the_kit_not_the_call(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Arguments named like the tool's own parameters (`self`, `run_manager`, `config`)
    reach the kit, which answers `invalid_argument`; none breaks the call."""
    scene = await stage(emulator, emulator_client)
    [listing] = [tool for tool in tools(scene.kit) if tool.name == "list_sandboxes"]
    for name in ("self", "run_manager", "config", "callbacks", "args"):
        call = {"name": "list_sandboxes", "args": {name: 1}, "id": "c", "type": "tool_call"}
        message = await listing.ainvoke(call)
        assert isinstance(message, ToolMessage) and message.status == "error"
        assert json.loads(message.text)["error"]["code"] == "invalid_argument", message
    ok = await listing.ainvoke(
        {"name": "list_sandboxes", "args": {}, "id": "c", "type": "tool_call"}
    )
    assert json.loads(ok.text)["sandboxes"] == [{"name": "dev", "root": "/home/user"}]


async def test_invoke_refuses_and_names_ainvoke(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """The tools are async only: `invoke` raises NotImplementedError naming `ainvoke`."""
    scene = await stage(emulator, emulator_client)
    [listing] = [tool for tool in tools(scene.kit) if tool.name == "list_sandboxes"]
    with pytest.raises(NotImplementedError, match="ainvoke"):
        listing.invoke({})
