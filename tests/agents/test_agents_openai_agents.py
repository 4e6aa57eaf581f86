"""`sandboxkit.agents.openai_agents` against the real OpenAI Agents SDK: a scripted `Model`
run by `Runner.run` under the SDK's defaults (strict schemas), over the emulator."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    Runner,
    Usage,
)
from agents.exceptions import UserError
from agents.strict_schema import ensure_strict_json_schema
from agents.tool_context import ToolContext
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import sandboxkit
from sandboxkit.agents.openai_agents import function_tools, strict_schema, without_nulls
from sandboxkit.emulator import Emulator

from ..agents_adapters_support import CALLS, FINAL, check_scene, stage


class ScriptedModel(Model):
    """A model that asks for `CALLS` one per turn, as a strict-mode model sends them (every
    property, null for those it leaves out), then answers `FINAL`; it keeps what it was
    given each turn."""

    def __init__(self) -> None:
        self.inputs: list[Any] = []
        self.tools: list[Any] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Any],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        turn = len(self.inputs)
        self.inputs.append(copy.deepcopy(input))
        self.tools.append(tools)
        if turn < len(CALLS):
            name, arguments = CALLS[turn]
            [shown] = [t for t in tools if t.name == name]
            strict = {key: arguments.get(key) for key in shown.params_json_schema["properties"]}
            item: Any = ResponseFunctionToolCall(
                id=f"fc-{turn}",
                call_id=f"call-{turn}",
                type="function_call",
                name=name,
                arguments=json.dumps(strict),
            )
        else:
            text = ResponseOutputText(text=FINAL, type="output_text", annotations=[])
            item = ResponseOutputMessage(
                id="msg", type="message", role="assistant", status="completed", content=[text]
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else repr(value)


async def test_a_run_writes_reads_and_sees_refusals_as_tool_outputs(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Under the SDK's defaults a run writes a file, reads it back, and is answered two
    hostile paths as `invalid_path` tool outputs; no secret is anywhere the model saw."""
    scene = await stage(emulator, emulator_client)
    model = ScriptedModel()
    tools = function_tools(scene.kit)
    agent = Agent(name="dev", instructions="Use the sandbox.", model=model, tools=tools)
    # Tracing off only so that no exporter reaches for the network; every other setting is
    # the SDK's default.
    result = await Runner.run(agent, "Write notes.txt", run_config=RunConfig(tracing_disabled=True))
    assert result.final_output == FINAL
    # The last turn's input is the whole conversation: every tool output the model was given.
    outputs = [
        json.loads(item["output"])
        for item in model.inputs[-1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    shown = [
        {"name": t.name, "description": t.description, "schema": t.params_json_schema}
        for t in model.tools[0]
    ]
    seen = json.dumps([model.inputs, shown], default=_plain, ensure_ascii=False)
    check_scene(scene, outputs, seen)


def _keywords(schema: Any) -> set[tuple[str, str]]:
    """Every (keyword, value) of a schema and its parts, `default` and `description` aside,
    the object's own `required` too; a nullable wrapper's null branch left out."""
    found: set[tuple[str, str]] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("properties", "items", "additionalProperties") and isinstance(value, dict):
                parts = value.values() if key == "properties" else [value]
                for part in parts:
                    found |= _keywords(part)
            elif key == "anyOf":
                found |= _keywords(value[0])
            elif key not in ("default", "description", "required"):
                found.add((key, json.dumps(value)))
    return found


async def test_every_tool_is_strict_but_an_open_map_and_keeps_every_bound(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Each FunctionTool is strict, in a form the SDK's own strict check leaves as it is,
    except create_template (its labels are an open map), which is marked non-strict and
    keeps its schema as written; no bound is lost either way."""
    scene = await stage(emulator, emulator_client)
    tools = {tool.name: tool for tool in function_tools(scene.kit)}
    assert list(tools) == [tool.name for tool in scene.kit.tools]
    assert {name for name, tool in tools.items() if not tool.strict_json_schema} == {
        "create_template"
    }
    for tool in scene.kit.tools:
        shown = tools[tool.name].params_json_schema
        assert tools[tool.name].description == tool.description
        assert _keywords(shown) == _keywords(tool.input_schema), tool.name
        if tool.name == "create_template":
            assert shown == tool.input_schema
            continue
        assert ensure_strict_json_schema(copy.deepcopy(shown)) == shown, tool.name
        assert shown["required"] == list(shown["properties"]), tool.name
        for name, rule in tool.input_schema["properties"].items():
            if name not in tool.input_schema["required"]:
                assert shown["properties"][name]["anyOf"][1] == {"type": "null"}
            if "default" in rule:
                said = f"Default: {json.dumps(rule['default'])}."
                assert shown["properties"][name]["description"].endswith(said)
                assert "default" not in json.dumps(shown["properties"][name]["anyOf"])


async def test_the_kit_s_schema_wired_by_hand_fails_the_sdk_s_strict_default(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Why the adapter converts: the schema as written, in a FunctionTool with the SDK's
    default strict mode, is refused (create_template) or silently made all-required
    (read_file: offset may no longer be left out)."""
    scene = await stage(emulator, emulator_client)
    kit_tools = {tool.name: tool for tool in scene.kit.tools}

    async def unused(ctx: ToolContext[Any], text: str) -> str:
        raise AssertionError

    with pytest.raises(UserError, match="additionalProperties should not be set"):
        FunctionTool("t", "d", dict(kit_tools["create_template"].input_schema), unused)
    by_hand = FunctionTool("t", "d", dict(kit_tools["read_file"].input_schema), unused)
    assert by_hand.params_json_schema["properties"]["offset"]["type"] == "integer"
    assert "offset" in by_hand.params_json_schema["required"]


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        # An optional argument's null is its absence; a required one's stays, to be refused.
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": []},
            {"a": None},
            {},
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"a": None},
            {"a": None},
        ),
        # Unknown keys pass untouched (the kit refuses them), and so does what is no object.
        (
            {"type": "object", "properties": {}, "required": []},
            {"x": None},
            {"x": None},
        ),
        ({"type": "object", "properties": {}, "required": []}, [None], [None]),
        # Nested objects, and objects in arrays, the same.
        (
            {
                "type": "object",
                "properties": {
                    "o": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"b": {"type": "integer"}},
                            "required": [],
                        },
                    }
                },
                "required": ["o"],
            },
            {"o": [{"b": None}, {"b": 1}]},
            {"o": [{}, {"b": 1}]},
        ),
    ],
)
def test_without_nulls(schema: dict[str, Any], value: Any, expected: Any) -> None:
    """A strict-mode model's null for an optional argument is taken as absent, nothing else."""
    assert without_nulls(schema, value) == expected


def test_a_map_has_no_strict_form_and_an_array_s_items_are_converted() -> None:
    """An object open to other keys (at any depth) has no strict form; array items are made
    strict like the rest."""
    assert strict_schema({"type": "object", "properties": {}, "required": []}) is None
    items = {
        "type": "object",
        "properties": {"b": {"type": "integer"}},
        "required": [],
        "additionalProperties": False,
    }
    array = {"type": "array", "items": items, "maxItems": 3}
    closed = {"type": "object", "properties": {"a": array}, "additionalProperties": False}
    assert strict_schema(closed) == {
        "type": "object",
        "properties": {
            "a": {
                "anyOf": [
                    {
                        "type": "array",
                        "maxItems": 3,
                        "items": {
                            "type": "object",
                            "properties": {"b": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
                            "required": ["b"],
                            "additionalProperties": False,
                        },
                    },
                    {"type": "null"},
                ]
            }
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    open_items = {**array, "items": {**items, "additionalProperties": True}}
    assert strict_schema({**closed, "properties": {"a": open_items}}) is None


async def test_arguments_that_are_no_json_or_null_where_required_are_tool_outputs(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """Text that is not JSON, and a null for a required argument, answer `invalid_argument`
    as the tool's output; nothing is sent."""
    scene = await stage(emulator, emulator_client)
    [read] = [tool for tool in function_tools(scene.kit) if tool.name == "read_file"]
    for text, said in [
        ("{nope", "not valid JSON"),
        ('{"sandbox": "dev", "remote": null}', "remote"),
        ("[1, 2]", "must be an object"),
    ]:
        ctx = ToolContext(
            context=None, tool_name="read_file", tool_call_id="c", tool_arguments=text
        )
        output = json.loads(await read.on_invoke_tool(ctx, text))
        assert output["error"]["code"] == "invalid_argument", output
        assert said in output["error"]["message"], output
    assert emulator.journal_for("files.download") == []


async def test_an_unexpected_failure_is_an_internal_output_without_its_text(
    emulator: Emulator, emulator_client: sandboxkit.Client, caplog: pytest.LogCaptureFixture
) -> None:
    """An exception the toolkit did not turn into a ToolError (a bug) is still the tool's
    output, code `internal`, its text (which may quote a secret) only in no message."""
    scene = await stage(emulator, emulator_client)
    kit = scene.kit

    async def broken(*args: Any, **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError(f"boom {scene.secrets[0]}")

    kit.call = broken  # type: ignore[method-assign]
    [listing] = [tool for tool in function_tools(kit) if tool.name == "list_sandboxes"]
    ctx = ToolContext(context=None, tool_name="list_sandboxes", tool_call_id="c", tool_arguments="")
    with caplog.at_level("ERROR", logger="sandboxkit.agents"):
        text = await listing.on_invoke_tool(ctx, "")
    output = json.loads(text)
    assert output["error"]["code"] == "internal" and output["error"]["retryable"] is False
    assert scene.secrets[0] not in text and scene.secrets[0] not in caplog.text
    assert "RuntimeError" in caplog.text


async def test_the_sdk_s_responses_model_sends_them_strict(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """What the SDK's own OpenAI Responses model would send: every tool with `strict`
    true and our strict schema as its parameters, but create_template, sent non-strict."""
    from agents.models.openai_responses import Converter

    scene = await stage(emulator, emulator_client)
    converted = Converter.convert_tools(function_tools(scene.kit), handoffs=[])
    sent = {tool["name"]: tool for tool in converted.tools if tool["type"] == "function"}
    assert list(sent) == [tool.name for tool in scene.kit.tools]
    for tool in scene.kit.tools:
        strict = strict_schema(tool.input_schema)
        assert sent[tool.name]["strict"] is (strict is not None), tool.name
        assert sent[tool.name]["parameters"] == (strict or tool.input_schema), tool.name
