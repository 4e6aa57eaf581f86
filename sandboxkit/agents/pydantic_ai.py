"""The toolkit's tools for Pydantic AI (`pip install 'sandboxkit-sdk[pydantic-ai]'`).

`toolset(kit)` gives the tools of a `Toolkit` as one Pydantic AI toolset, for
`Agent(model, toolsets=[...])`. Each tool is shown with its JSON Schema as written (Pydantic
AI decides per provider whether it is strict-compatible) and the hints as MCP names them
in its definition's `metadata["annotations"]`, where an approval rule can read them. The
arguments go to `Toolkit.call` as the model sent them, which checks them. A failure is the
tool's result `{"error": {"code", "message", "retryable"}}`, never an exception that ends
the run nor a retry that spends the run's budget.

Importing this module imports `pydantic_ai`; `import sandboxkit.agents` does not.

Example::

    from pydantic_ai import Agent
    from sandboxkit.agents.pydantic_ai import toolset

    agent = Agent("openai:gpt-5.2", toolsets=[toolset(kit)])
    result = await agent.run("Write hello.txt in sandbox dev")
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ._adapter import answer, schema_of
from ._tool import Tool
from ._toolkit import Toolkit

__all__ = ["toolset"]

# Any JSON passes here: the toolkit checks arguments itself and answers a bad one as an
# error the model reads, where Pydantic AI's own refusal would spend the run's retries.
_ANYTHING = SchemaValidator(core_schema.any_schema())
# What a model gets to correct arguments that are not JSON at all (Pydantic AI's own check).
_MAX_RETRIES = 1


def _definition(tool: Tool) -> ToolDefinition:
    return ToolDefinition(
        name=tool.name,
        description=tool.description,
        parameters_json_schema=schema_of(tool),
        metadata={
            "annotations": {
                "title": tool.title,
                "readOnlyHint": tool.read_only,
                "destructiveHint": tool.destructive,
                "idempotentHint": tool.idempotent,
                "openWorldHint": tool.open_world,
            }
        },
    )


class _KitToolset(AbstractToolset[Any]):
    """The tools of one toolkit, each run by `Toolkit.call`."""

    def __init__(self, kit: Toolkit, id: str | None) -> None:
        self._kit = kit
        self._id = id

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        # Made anew each time: a definition is a mutable dataclass, and ours to keep.
        return {
            tool.name: ToolsetTool(
                toolset=self,
                tool_def=_definition(tool),
                max_retries=_MAX_RETRIES,
                args_validator=_ANYTHING,
            )
            for tool in self._kit.tools
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> dict[str, Any]:
        return (await answer(self._kit, name, tool_args)).content


def toolset(kit: Toolkit, *, id: str | None = None) -> AbstractToolset[Any]:
    """The tools of `kit` as a Pydantic AI toolset, for `Agent(model, toolsets=[...])`.

    Args:
        kit: the toolkit whose tools to offer.
        id: the toolset's id, unique among an agent's toolsets (durable execution, such as
            Temporal, names its activities by it).

    A tool's result is its JSON object; a failure is `{"error": {"code", "message",
    "retryable"}}`. Only cancellation is raised.
    """
    return _KitToolset(kit, id)
