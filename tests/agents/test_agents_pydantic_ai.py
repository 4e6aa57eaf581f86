"""`sandboxkit.agents.pydantic_ai` against real Pydantic AI: an `Agent` on a scripted
`FunctionModel`, with the kit's toolset, over the emulator."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.tools import ToolDefinition

import sandboxkit
from sandboxkit.agents.pydantic_ai import toolset
from sandboxkit.emulator import Emulator

from ..agents_adapters_support import CALLS, FINAL, check_scene, stage


class Script:
    """A model function that asks for `CALLS` one per turn, then answers `FINAL`; it keeps
    the messages and the tool definitions of each turn."""

    def __init__(self, calls: list[tuple[str, Any]]) -> None:
        self.calls = calls
        self.seen: list[list[ModelMessage]] = []
        self.shown: list[list[ToolDefinition]] = []

    async def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = len(self.seen)
        self.seen.append(list(messages))
        self.shown.append(list(info.function_tools))
        if turn < len(self.calls):
            name, arguments = self.calls[turn]
            return ModelResponse(parts=[ToolCallPart(name, arguments, tool_call_id=f"call-{turn}")])
        return ModelResponse(parts=[TextPart(FINAL)])


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """Every tool return the model was given, in order."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def test_an_agent_writes_reads_and_sees_refusals_as_tool_results(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """An agent run writes a file, reads it back, and gets two hostile paths back as
    `invalid_path` results it reads; no secret is anywhere the model saw."""
    scene = await stage(emulator, emulator_client)
    script = Script(CALLS)
    agent = Agent(FunctionModel(script.respond), toolsets=[toolset(scene.kit)])
    result = await agent.run("Write notes.txt")
    assert result.output == FINAL
    parts = returns(script.seen[-1])
    assert [p.tool_call_id for p in parts] == [f"call-{i}" for i in range(4)]
    outputs = [json.loads(p.model_response_str()) for p in parts]
    seen = ModelMessagesTypeAdapter.dump_json(result.all_messages()).decode()
    seen += json.dumps([[repr(d) for d in turn] for turn in script.shown], ensure_ascii=False)
    check_scene(scene, outputs, seen)


async def test_each_tool_is_shown_as_written_with_its_hints(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """The model is shown every tool of the kit with the kit's JSON Schema; the hints are
    in each definition's metadata as MCP names them."""
    scene = await stage(emulator, emulator_client)
    script = Script([])
    await Agent(FunctionModel(script.respond), toolsets=[toolset(scene.kit, id="kit")]).run("hi")
    [shown] = script.shown
    assert [(d.name, d.description, d.parameters_json_schema) for d in shown] == [
        (t.name, t.description, dict(t.input_schema)) for t in scene.kit.tools
    ]
    [write] = [d for d in shown if d.name == "write_file"]
    assert write.metadata == {
        "annotations": {
            "title": "Write a file",
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": True,
            "openWorldHint": False,
        }
    }


@pytest.mark.parametrize(
    "arguments",
    [
        {"sandbox": "dev"},  # remote missing
        {"sandbox": "dev", "remote": 7},
        {"sandbox": "nowhere", "remote": "a"},
        '{"sandbox": "dev", "remote": "a", "zzz": 1}',
        "[1, 2]",
    ],
)
async def test_bad_arguments_are_results_not_retries(
    emulator: Emulator, emulator_client: sandboxkit.Client, arguments: Any
) -> None:
    """Arguments the kit refuses (missing, mistyped, unknown, no object, an unknown
    sandbox) are answered as the tool's result, many times over, never spending the
    run's retries nor ending it; nothing is sent."""
    scene = await stage(emulator, emulator_client)
    script = Script([("read_file", arguments)] * 4)
    result = await Agent(FunctionModel(script.respond), toolsets=[toolset(scene.kit)]).run("go")
    assert result.output == FINAL
    outputs = [json.loads(p.model_response_str()) for p in returns(script.seen[-1])]
    assert len(outputs) == 4
    for output in outputs:
        assert output["error"]["code"] in ("invalid_argument", "unknown_sandbox"), output
    assert emulator.journal_for("files.download") == []
