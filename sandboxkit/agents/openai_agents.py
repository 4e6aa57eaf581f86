"""The toolkit's tools for the OpenAI Agents SDK (`pip install 'sandboxkit-sdk[openai-agents]'`).

`function_tools(kit)` gives each tool of a `Toolkit` as an `agents.FunctionTool`, for
`Agent(tools=...)`. The SDK's default is strict mode, whose schemas have every property
required and no `default`; a tool's schema is given in that form where it says the same
(an optional argument is required but nullable, its default named in its description, and
a null sent for it is taken as absent), and as written, with `strict_json_schema=False`,
where it cannot: an open map (`create_template`'s `labels`) has no strict form. Every bound
stays in the schema, and `Toolkit.call` checks every argument against the tool's own schema
either way. A failure is the tool's output, `{"error": {"code", "message", "retryable"}}`,
never an exception that ends the run.

Importing this module imports `agents` (the SDK); `import sandboxkit.agents` does not.

Example::

    from agents import Agent, Runner
    from sandboxkit.agents.openai_agents import function_tools

    agent = Agent(name="dev", instructions="...", tools=function_tools(kit))
    result = await Runner.run(agent, "Write hello.txt in sandbox dev")
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agents import FunctionTool
from agents import Tool as AgentsTool
from agents.tool_context import ToolContext

from ._adapter import Answer, answer, arguments_from_json, schema_of
from ._errors import ToolError
from ._tool import Tool
from ._toolkit import Toolkit

__all__ = ["function_tools", "strict_schema", "without_nulls"]


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """`schema` in the form OpenAI's strict mode takes, or None where none says the same.

    Every property is listed in `required`; one that was optional accepts null as well
    (`anyOf` with `{"type": "null"}`), and a `default` moves into the description. An
    object whose `additionalProperties` is not false (a map) has no strict form.
    """
    out = {key: value for key, value in schema.items() if key != "default"}
    if "default" in schema:
        said = schema.get("description", "")
        out["description"] = f"{said} Default: {json.dumps(schema['default'])}.".lstrip()
    if schema["type"] == "object":
        if schema.get("additionalProperties", True) is not False:
            return None
        required = set(schema.get("required", ()))
        properties: dict[str, Any] = {}
        for name, rule in schema.get("properties", {}).items():
            strict = strict_schema(rule)
            if strict is None:
                return None
            properties[name] = strict if name in required else _nullable(strict)
        out["properties"] = properties
        out["required"] = list(properties)
    if schema["type"] == "array" and "items" in schema:
        items = strict_schema(schema["items"])
        if items is None:
            return None
        out["items"] = items
    return out


def without_nulls(schema: Mapping[str, Any], value: Any) -> Any:
    """`value` with each null given for an optional property left out (absent), as a
    strict-mode model sends an argument it does not mean to give."""
    if schema["type"] == "object" and isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", ()))
        return {
            key: without_nulls(properties[key], item) if key in properties else item
            for key, item in value.items()
            if not (item is None and key in properties and key not in required)
        }
    if schema["type"] == "array" and isinstance(value, list) and "items" in schema:
        return [without_nulls(schema["items"], item) for item in value]
    return value


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    inner = {key: value for key, value in schema.items() if key != "description"}
    out: dict[str, Any] = {"anyOf": [inner, {"type": "null"}]}
    if "description" in schema:
        out["description"] = schema["description"]
    return out


def _function_tool(kit: Toolkit, tool: Tool) -> FunctionTool:
    schema = schema_of(tool)
    strict = strict_schema(schema_of(tool))

    async def invoke(_: ToolContext[Any], text: str) -> str:
        try:
            arguments = arguments_from_json(text)
        except ToolError as error:
            return Answer.of_error(error).text
        if strict is not None:
            arguments = without_nulls(schema, arguments)
        return (await answer(kit, tool.name, arguments)).text

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=schema if strict is None else strict,
        on_invoke_tool=invoke,
        strict_json_schema=strict is not None,
    )


def function_tools(kit: Toolkit) -> list[AgentsTool]:
    """Each tool of `kit` as an OpenAI Agents SDK `FunctionTool`, for `Agent(tools=...)`
    (typed as the SDK's `Tool`, which `Agent(tools=...)` takes a list of).

    Strict where the tool's schema has a strict form that says the same, else marked
    non-strict (module docstring). A failure is the tool's output, `{"error": {"code",
    "message", "retryable"}}` as JSON text; only cancellation is raised.
    """
    return [_function_tool(kit, tool) for tool in kit.tools]
