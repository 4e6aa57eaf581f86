"""A tool as a model sees it, the toolkit's bounds, and the one definition each tool has.

A `Definition` holds everything about one tool: its name, hints, description, input schema
(a function of the toolkit's setup: the sandbox names and the bounds go in it), the schema
of its result (`output`, MCP's `outputSchema`) and the coroutine that runs it.
`Toolkit.tools`, `Toolkit.call` and every export (`to_openai`...) are read from it, so no
two places can disagree about a tool.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

import attrs

import sandboxkit
from sandboxkit import Progress

from ..errors import ValidationError
from ..rules import MAX_PAGE_SIZE
from ._copies import HANDLE_RESULT, Copies
from ._errors import ErrorCode, ToolError
from ._paths import sandbox_path
from ._schema import check_schema, either

__all__ = ["Definition", "Progress", "Run", "Setup", "Tool", "ToolLimits"]


KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def _positive(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValidationError(f"ToolLimits.{attribute.name}={value!r}: must be a positive number")


@attrs.frozen
class ToolLimits:
    """The bounds every tool keeps, whatever a model asks.

    Args:
        read_page: bytes `read_file` returns when the model gives no `length` (64 KiB).
        max_read: the largest `length` `read_file` accepts (1 MiB).
        max_write: the largest file `write_file` writes, and `edit_file` reads and writes,
            in bytes (1 MiB).
        max_copy: the largest file `upload_file` or `download_file` copies (1 GiB).
        max_log_page: the most log entries `read_build_logs` returns at once (200).
        max_log_line: characters kept of one log message; longer ones are cut (8192).
        max_build_page: the most Builds `list_builds` returns at once (100, the service's
            own bound).
        max_wait: the longest `wait_for_build` waits in one call, in seconds (600).
        default_wait: how long it waits when the model does not say (60, or `max_wait`
            if smaller).
        max_path_length: characters in a path, sandbox or local (4096).

    Raises:
        ValidationError: a bound that is not positive, `read_page` over `max_read`, or
            `max_build_page` over 100.
    """

    read_page: int = attrs.field(default=64 * KIB, validator=_positive)
    max_read: int = attrs.field(default=MIB, validator=_positive)
    max_write: int = attrs.field(default=MIB, validator=_positive)
    max_copy: int = attrs.field(default=GIB, validator=_positive)
    max_log_page: int = attrs.field(default=200, validator=_positive)
    max_log_line: int = attrs.field(default=8192, validator=_positive)
    max_build_page: int = attrs.field(default=MAX_PAGE_SIZE, validator=_positive)
    max_wait: float = attrs.field(default=600.0, validator=_positive)
    default_wait: float = attrs.field(default=60.0, validator=_positive)
    max_path_length: int = attrs.field(default=4096, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if self.read_page > self.max_read:
            raise ValidationError("ToolLimits: read_page must not exceed max_read")
        if self.max_build_page > MAX_PAGE_SIZE:
            raise ValidationError(
                f"ToolLimits: max_build_page must be at most {MAX_PAGE_SIZE}, the "
                "service's own bound"
            )

    @property
    def wait(self) -> float:
        """The wait a model gets when it names none."""
        return min(self.default_wait, self.max_wait)


def _copied(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy: a tool's schema is its own, whatever its maker does with the original."""
    return copy.deepcopy(dict(schema))


@attrs.frozen
class Tool:
    """One tool, as a model (or an MCP client) is shown it.

    Attributes:
        name: snake_case, unique in its toolkit.
        title: a short human-readable name.
        description: what it does and when to use it, written for a model.
        input_schema: a JSON Schema (draft 2020-12) object with `additionalProperties`
            false; `Toolkit.call` checks arguments against it.
        output_schema: a JSON Schema (draft 2020-12) of the tool's result (not of a
            failure, which is `ToolError.to_json()`); MCP lists it as `outputSchema`.
        read_only: changes nothing anywhere.
        destructive: may overwrite or delete (meaningful when not read-only).
        idempotent: calling again with the same arguments has no further effect.
        open_world: reaches beyond the application's sandboxes and service (none does).
    """

    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any] = attrs.field(converter=_copied)
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool = False
    output_schema: Mapping[str, Any] = attrs.field(
        converter=_copied, factory=lambda: {"type": "object"}
    )

    def to_openai(self) -> dict[str, Any]:
        """The tool for OpenAI's Chat Completions `tools=` (and the many servers that speak
        it): `{"type": "function", "function": {"name", "description", "parameters"}}`.
        Not `strict`: strict mode wants every property required, and ours have defaults."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(dict(self.input_schema)),
            },
        }

    def to_openai_responses(self) -> dict[str, Any]:
        """The tool for OpenAI's Responses API `tools=`: the flat
        `{"type": "function", "name", "description", "parameters"}`."""
        return {"type": "function", **self.to_openai()["function"]}

    def to_anthropic(self) -> dict[str, Any]:
        """The tool for Anthropic's Messages API `tools=`: `{"name", "description",
        "input_schema"}`."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": copy.deepcopy(dict(self.input_schema)),
        }


@attrs.frozen
class Setup:
    """What the tools of one toolkit work with (the application's, never the model's)."""

    client: sandboxkit.Client
    sandboxes: Mapping[str, sandboxkit.Sandbox]
    root: str
    workspace: Path | None
    limits: ToolLimits
    copies: Copies | None = None  # with `CopyHandles`: the copies running by handle

    def sandbox(self, name: str) -> sandboxkit.Sandbox:
        """The sandbox the application named `name`.

        Raises:
            ToolError: `unknown_sandbox`.
        """
        found = self.sandboxes.get(name)
        if found is None:
            names = ", ".join(repr(n) for n in self.sandboxes) or "none"
            shown = name if len(name) <= 64 else name[:61] + "..."
            raise ToolError(
                ErrorCode.UNKNOWN_SANDBOX,
                f"No sandbox is named {shown!r}. The sandboxes are: {names} "
                "(list_sandboxes shows them).",
            )
        return found

    def remote(self, path: str) -> str:
        """`path` as an absolute sandbox path under the root (see `sandbox_path`)."""
        return sandbox_path(path, self.root, self.limits.max_path_length)


Run = Callable[[Setup, dict[str, Any], Progress | None], Awaitable[dict[str, Any]]]
Needs = Literal["sandboxes", "workspace", "copies", "templates", "nothing"]


def _bytes(size: int) -> str:
    """A byte count for a model: exact, and in the unit it was likely chosen in."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale and size % scale == 0:
            return f"{size} bytes ({size // scale} {unit})"
    return f"{size} bytes"


@attrs.frozen
class Definition:
    """Everything about one tool, in one place.

    `description` may name the setup's bounds as `{read_page}`, `{max_read}`... (every
    `ToolLimits` field; byte sizes read "65536 bytes (64 KiB)") and `{root}`; `schema`
    builds the input schema from the setup, `output` the schema of the result `run`
    returns (a test runs every tool and checks its result against it); `needs` says what
    the toolkit must have for the tool to exist ("copies": a workspace and
    `CopyHandles`); `runs_long` marks a tool that, with `CopyHandles`, may answer a
    handle instead (its output schema then admits one); `renamed` maps the arguments'
    former names to their names now (the SDK's), which `Toolkit.call` still takes from a
    model that used them (never shown).
    """

    name: str
    title: str
    description: str
    schema: Callable[[Setup], dict[str, Any]]
    output: Callable[[Setup], dict[str, Any]]
    run: Run
    read_only: bool
    destructive: bool
    idempotent: bool
    needs: Needs
    open_world: bool = False
    renamed: Mapping[str, str] = attrs.field(factory=dict)
    runs_long: bool = False

    def tool(self, setup: Setup) -> Tool:
        """The tool as this setup shows it."""
        schema = self.schema(setup)
        check_schema(schema, self.name)
        values: dict[str, Any] = {**attrs.asdict(setup.limits), "root": setup.root}
        for name in ("read_page", "max_read", "max_write", "max_copy"):
            values[name] = _bytes(values[name])
        output = self.output(setup)
        if self.runs_long and setup.copies is not None:
            output = either(output, HANDLE_RESULT)
        return Tool(
            name=self.name,
            title=self.title,
            description=self.description.format(**values),
            input_schema=schema,
            read_only=self.read_only,
            destructive=self.destructive,
            idempotent=self.idempotent,
            open_world=self.open_world,
            output_schema=output,
        )
