"""The toolkit's tools for LangChain (`pip install 'sandboxkit-sdk[langchain]'`).

`tools(kit)` gives each tool of a `Toolkit` as a LangChain `BaseTool` whose `args_schema` is
the tool's JSON Schema as written, for `model.bind_tools(...)`, `create_agent(tools=...)` or
a graph's tool node. The tools are async: `ainvoke` runs the call as a coroutine on the
caller's loop (the client's, which its calls must run on); `invoke` refuses, naming
`ainvoke`, as LangChain's own coroutine-only tools do.

A tool's answer is JSON text. A failure is the `ToolMessage` `{"error": {"code",
"message", "retryable"}}` with `status="error"` (a handled `ToolException`), never an
exception that ends the run; `Toolkit.call` checks the arguments (LangChain leaves a JSON
Schema's to the tool).

Importing this module imports `langchain_core`; `import sandboxkit.agents` does not.

Example::

    from sandboxkit.agents.langchain import tools

    kit_tools = tools(kit)
    model = chat_model.bind_tools(kit_tools)
    by_name = {tool.name: tool for tool in kit_tools}
    reply = await model.ainvoke(messages)
    messages += [reply, *[await by_name[c["name"]].ainvoke(c) for c in reply.tool_calls]]
"""

from __future__ import annotations

from typing import Any, NoReturn

from langchain_core.tools import BaseTool, ToolException
from pydantic import ConfigDict, Field

from ._adapter import answer, schema_of
from ._toolkit import Toolkit

__all__ = ["tools"]


class _KitTool(BaseTool):
    """One tool of a toolkit, run by `Toolkit.call`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    kit: Toolkit = Field(exclude=True, repr=False)
    handle_tool_error: bool = True  # a ToolException is the model's answer, not the run's end

    def _run(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(
            f"{self.name} is async only: call ainvoke (the client's calls run on its event loop)"
        )

    # `self` positional-only: a model's argument named "self" goes to the kit, which refuses it.
    async def _arun(self, /, *args: Any, **arguments: Any) -> str:
        done = await answer(self.kit, self.name, arguments)
        if done.failed:
            raise ToolException(done.text)
        return done.text


def tools(kit: Toolkit) -> list[BaseTool]:
    """Each tool of `kit` as an async LangChain `BaseTool`.

    Its result is JSON text; a failure is a `ToolMessage` with `status="error"` and the
    JSON `{"error": {"code", "message", "retryable"}}`. Only cancellation is raised.
    """
    return [
        _KitTool(
            name=tool.name,
            description=tool.description,
            args_schema=schema_of(tool),
            kit=kit,
        )
        for tool in kit.tools
    ]
