"""Tools a model may call: bounded file reads and writes in the application's sandboxes,
copies to and from a local workspace, and the template and build operations.

Model input is hostile: arguments are checked against each tool's JSON Schema before
anything is sent, sandbox paths stay under a root, local paths in a workspace, and every
read, write, copy, page and wait is bounded (`ToolLimits`). Results are JSON objects.
Failures are `ToolError`s with a fixed `ErrorCode` and `retryable`. No credential ever
reaches the model: sandboxes are known by the names the application gives them.

Example::

    import sandboxkit
    from sandboxkit.agents import Toolkit, ToolError

    async with sandboxkit.Client() as client:
        sandbox = client.sandbox_from_response(create_answer)
        kit = Toolkit(client, {"dev": sandbox}, workspace="agent-files")
        tools = [tool.to_openai() for tool in kit.tools]   # hand these to the model
        try:
            result = await kit.call(call.name, json.loads(call.arguments))
        except ToolError as error:
            result = {"error": error.to_json()}

The tools as an agent framework's own: `openai_agents.function_tools(kit)`,
`langchain.tools(kit)`, `pydantic_ai.toolset(kit)`, each module importing its framework only
when it is imported (this package imports none).

`import sandboxkit` never imports this package; it loads only as `sandboxkit.agents`.
"""

from ._copies import CopyHandles
from ._errors import ErrorCode, ToolError
from ._tool import Tool, ToolLimits
from ._toolkit import Toolkit

__all__ = ["CopyHandles", "ErrorCode", "Tool", "ToolError", "ToolLimits", "Toolkit"]
