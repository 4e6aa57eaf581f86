"""What the framework adapters share: one tool call whose every failure is an answer.

Agent frameworks end a run on an exception a tool raises (or retry it a few times, then
end it), so the adapters (`openai_agents`, `langchain`, `pydantic_ai`) never let one out
but cancellation: a `ToolError` becomes the answer `{"error": {"code", "message",
"retryable"}}`, the same JSON a hand-written loop over `Toolkit.call` gives its model, and
anything else the same with code `internal`, its details only in the application's log.

Imports no framework: each adapter imports its own, and only when it is imported.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import ErrorCode, ToolError, unexpected
from ._tool import Progress, Tool
from ._toolkit import Toolkit

__all__ = ["Answer", "answer", "arguments_from_json", "schema_of"]


# Far more than any tool's arguments need (a write is at most `max_write` bytes of content,
# base64 at 4/3): a bound on what `json.loads` is asked to build from a model's text.
_MAX_ARGUMENTS_TEXT = 64 << 20


@attrs.frozen
class Answer:
    """A tool call as the model reads it.

    Attributes:
        content: the tool's result, or `{"error": {"code", "message", "retryable"}}`.
        failed: whether `content` is an error.
    """

    content: dict[str, Any]
    failed: bool

    @classmethod
    def of_error(cls, error: ToolError) -> Answer:
        """The answer for a failed call."""
        return cls({"error": error.to_json()}, failed=True)

    @property
    def text(self) -> str:
        """`content` as the JSON text a model is shown (the MCP server's form too)."""
        return json.dumps(self.content, ensure_ascii=False, separators=(",", ":"))


def schema_of(tool: Tool) -> dict[str, Any]:
    """A copy of `tool`'s input schema for a framework to keep: `Toolkit.call` checks
    arguments against the tool's own, which nothing a framework does may change."""
    return copy.deepcopy(dict(tool.input_schema))


def arguments_from_json(text: str) -> Any:
    """A model's arguments sent as JSON text (empty text stands for none).

    Raises:
        ToolError: `invalid_argument` for text that is not JSON.
    """
    if not isinstance(text, str) or len(text) > _MAX_ARGUMENTS_TEXT:
        raise ToolError(ErrorCode.INVALID_ARGUMENT, "The arguments are not a JSON object.")
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT,
            "The arguments are not valid JSON; send one JSON object of the tool's arguments.",
        ) from None


async def answer(
    kit: Toolkit,
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    progress: Progress | None = None,
) -> Answer:
    """`kit.call(name, arguments)` as the model reads it; never raises but cancellation."""
    try:
        return Answer(await kit.call(name, arguments, progress=progress), failed=False)
    except ToolError as error:
        return Answer.of_error(error)
    except Exception as exc:
        # `Toolkit.call` makes every failure a ToolError: this is a bug of ours.
        return Answer.of_error(unexpected(name, exc))
