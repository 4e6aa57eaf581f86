"""`Toolkit`: the tools a model may call on a client and the application's sandboxes.

`call` is the one way in: it finds the tool, checks the arguments against the tool's schema
(model input is hostile), runs it, and makes every failure a `ToolError`. With
`CopyHandles` a copy runs as a task of the toolkit's (`_copies`), which `aclose` ends. Cancellation
passes through untouched. Anything unexpected becomes `internal`, with a generic message
for the model and the details in the application's log (`sandboxkit.agents`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import sandboxkit

from ..errors import ValidationError
from ._build_tools import GET_BUILD, LIST_BUILDS, READ_BUILD_LOGS, WAIT_FOR_BUILD
from ._copies import Copies, CopyHandles
from ._copy_tools import CANCEL_COPY, COPY_STATUS, DOWNLOAD_FILE, UPLOAD_FILE
from ._errors import ErrorCode, ToolError, unexpected
from ._file_tools import EDIT_FILE, READ_FILE, WRITE_FILE
from ._paths import check_root
from ._schema import field, obj, result, validate
from ._template_tools import CREATE_TEMPLATE
from ._tool import Definition, Progress, Setup, Tool, ToolLimits

__all__ = ["DEFAULT_LIMITS", "DEFINITIONS", "Toolkit"]

logger = logging.getLogger("sandboxkit.agents")

DEFAULT_LIMITS = ToolLimits()  # frozen: one shared default is safe


def _list_schema(_: Setup) -> dict[str, Any]:
    return obj({})


def _list_output(_: Setup) -> dict[str, Any]:
    sandbox = result({"name": field("string"), "root": field("string")})
    return result({"sandboxes": {"type": "array", "items": sandbox}, "workspace": field("boolean")})


async def _list_sandboxes(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    # Names only: a sandbox's key, domain and token are the application's, never the model's.
    return {
        "sandboxes": [{"name": name, "root": setup.root} for name in setup.sandboxes],
        "workspace": setup.workspace is not None,
    }


LIST_SANDBOXES = Definition(
    name="list_sandboxes",
    title="List sandboxes",
    description=(
        "List the sandboxes these tools may use, by name, with the directory their file "
        "paths resolve under; and whether a local workspace is there for upload_file and "
        "download_file."
    ),
    schema=_list_schema,
    output=_list_output,
    run=_list_sandboxes,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="nothing",
)

# Every tool, in the order a model is shown them.
DEFINITIONS: tuple[Definition, ...] = (
    LIST_SANDBOXES,
    READ_FILE,
    WRITE_FILE,
    EDIT_FILE,
    UPLOAD_FILE,
    DOWNLOAD_FILE,
    COPY_STATUS,
    CANCEL_COPY,
    CREATE_TEMPLATE,
    LIST_BUILDS,
    GET_BUILD,
    READ_BUILD_LOGS,
    WAIT_FOR_BUILD,
)


def _check_names(sandboxes: Any) -> dict[str, sandboxkit.Sandbox]:
    if not isinstance(sandboxes, Mapping):
        raise ValidationError("sandboxes must map names to sandboxkit.Sandbox handles")
    out: dict[str, sandboxkit.Sandbox] = {}
    for name, sandbox in sandboxes.items():
        if (
            not isinstance(name, str)
            or not 1 <= len(name) <= 64
            or any(unicodedata.category(c)[0] in "CZ" and c != " " for c in name)
        ):
            raise ValidationError(
                f"sandbox name {name!r}: must be 1-64 printable characters (a model types it)"
            )
        if not isinstance(sandbox, sandboxkit.Sandbox):
            raise ValidationError(f"sandboxes[{name!r}] must be a sandboxkit.Sandbox")
        out[name] = sandbox
    return out


def _check_workspace(workspace: Any) -> Path | None:
    if workspace is None:
        return None
    if not isinstance(workspace, str | os.PathLike):
        raise ValidationError("workspace must be a directory path or None")
    real = Path(os.path.realpath(os.fspath(workspace)))
    if not real.is_dir():
        raise ValidationError("workspace must be an existing directory")
    return real


def _renamed(arguments: Mapping[Any, Any], renamed: Mapping[str, str]) -> dict[Any, Any]:
    """`arguments` with former names (`path`, `local_path`...) under their names now; one
    given beside its new name stays, for the schema to refuse as unknown."""
    return {
        renamed[key] if key in renamed and renamed[key] not in arguments else key: value
        for key, value in arguments.items()
    }


class Toolkit:
    """The tools a model may call, over one client and the sandboxes the application gives.

    Every tool is checked against its schema before it runs; sandbox paths stay under
    `root`, local paths in `workspace`; reads, writes, copies, log pages and waits are
    bounded by `limits`. No tool shows a credential: sandboxes are known by the names given
    here.

    Args:
        client: the client every tool calls through (its retry policy applies).
        sandboxes: the sandboxes a model may use, by the names it will call them.
        workspace: the local directory `upload_file` and `download_file` copy from and
            to; None: those two tools are absent.
        root: the sandbox directory paths resolve under, and may not leave.
        limits: the bounds.
        templates: False leaves out the template and build tools.
        copy_handles: a copy still running after `answer_within` answers a handle that
            `copy_status` and `cancel_copy` (then listed) take; the copies are the
            toolkit's tasks: close it (`async with toolkit:` or `aclose()`) to end them.
            None (the default): a copy's call lasts as long as the copy.

    Raises:
        ValidationError: a client, sandbox, name, workspace or root that is not usable.

    Example::

        kit = Toolkit(client, {"dev": sandbox}, workspace="out")
        tools = [tool.to_openai() for tool in kit.tools]
        result = await kit.call("read_file", {"sandbox": "dev", "remote": "notes.txt"})
    """

    def __init__(
        self,
        client: sandboxkit.Client,
        sandboxes: Mapping[str, sandboxkit.Sandbox],
        *,
        workspace: str | os.PathLike[str] | None = None,
        root: str = "/home/user",
        limits: ToolLimits = DEFAULT_LIMITS,
        templates: bool = True,
        copy_handles: CopyHandles | None = None,
    ) -> None:
        if not isinstance(client, sandboxkit.Client):
            raise ValidationError("client must be a sandboxkit.Client")
        if not isinstance(limits, ToolLimits):
            raise ValidationError("limits must be a sandboxkit.agents.ToolLimits")
        if copy_handles is not None and not isinstance(copy_handles, CopyHandles):
            raise ValidationError("copy_handles must be a sandboxkit.agents.CopyHandles or None")
        workspace_path = _check_workspace(workspace)
        copies = (
            Copies(copy_handles)
            if copy_handles is not None and workspace_path is not None
            else None
        )
        self._copies = copies
        self._setup = Setup(
            client=client,
            sandboxes=_check_names(sandboxes),
            root=check_root(root),
            workspace=workspace_path,
            limits=limits,
            copies=copies,
        )
        present = {
            "nothing": True,
            "sandboxes": bool(self._setup.sandboxes),
            "workspace": bool(self._setup.sandboxes) and self._setup.workspace is not None,
            "copies": bool(self._setup.sandboxes) and copies is not None,
            "templates": bool(templates),
        }
        chosen = [d for d in DEFINITIONS if present[d.needs]]
        self._tools = tuple(d.tool(self._setup) for d in chosen)
        self._runs: dict[str, tuple[Tool, Definition]] = {
            tool.name: (tool, d) for tool, d in zip(self._tools, chosen, strict=True)
        }
        # Why each absent tool is absent, for an operator's log (`sandboxkit mcp`).
        self._absent: dict[str, str] = {
            d.name: self._why_absent(d) for d in DEFINITIONS if not present[d.needs]
        }

    def _why_absent(self, definition: Definition) -> str:
        if definition.needs == "templates":
            return "template tools off"
        if not self._setup.sandboxes:
            return "no sandbox configured"
        if self._setup.workspace is None:
            return "no workspace configured"
        return "no copy handles"

    def __repr__(self) -> str:
        names = [t.name for t in self._tools]
        return f"Toolkit(tools={names!r}, sandboxes={list(self._setup.sandboxes)!r})"

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The tools, in the order a model should be shown them."""
        return self._tools

    @property
    def absent(self) -> Mapping[str, str]:
        """The tools left out, each with why ("no workspace given")."""
        return dict(self._absent)

    async def aclose(self) -> None:
        """Cancel the copies still running by handle and wait for their cleanup (no partial
        file is left). Calls after it may still run tools but not start such a copy."""
        if self._copies is not None:
            await self._copies.aclose()

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        *,
        progress: Progress | None = None,
    ) -> dict[str, Any]:
        """Run tool `name` with a model's `arguments`; its result, ready for `json.dumps`.

        Args:
            name: the tool's name.
            arguments: the model's arguments (a JSON object; None stands for `{}`),
                checked against the tool's schema; missing ones get their defaults.
            progress: for `upload_file` and `download_file`, called as
                `progress(bytes_done, total_or_None)` as bytes move (with copy handles:
                until the call answers).

        Raises:
            ToolError: any failure, with a code, a message for the model and `retryable`.
                Cancellation (`asyncio.CancelledError`) passes through.
        """
        found = self._runs.get(name) if isinstance(name, str) else None
        if found is None:
            known = ", ".join(t.name for t in self._tools)
            shown = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
            raise ToolError(
                ErrorCode.INVALID_ARGUMENT, f"No tool is named {shown}. The tools: {known}."
            )
        tool, definition = found
        if arguments is None:  # a tool without arguments may be called with none at all
            arguments = {}
        if definition.renamed and isinstance(arguments, Mapping):
            arguments = _renamed(arguments, definition.renamed)
        with self._failures(name):
            # An unknown sandbox is told as such, before its name fails the schema's enum.
            sandbox = arguments.get("sandbox") if isinstance(arguments, Mapping) else None
            if isinstance(sandbox, str) and "sandbox" in tool.input_schema["properties"]:
                self._setup.sandbox(sandbox)
            args = validate(tool.input_schema, arguments)
        run = definition.run
        if definition.runs_long and self._copies is not None:

            async def work(moved: Progress) -> dict[str, Any]:
                with self._failures(name):
                    return await run(self._setup, args, moved)

            result = await self._copies.start(name, work, progress)
        else:
            with self._failures(name):
                result = await run(self._setup, args, progress)
        logger.debug("tool %s: ok", name)
        return result

    @contextlib.contextmanager
    def _failures(self, name: str) -> Iterator[None]:
        """Inside it, every failure becomes a `ToolError` (cancellation passes)."""
        try:
            yield
        except ToolError as error:
            logger.debug("tool %s failed: %s", name, error.code.value)
            scrubbed = self._scrubbed(error)
            if scrubbed is error:
                raise
            raise scrubbed from error.__cause__
        except Exception as exc:
            # No model should read what this is; the application's developers should.
            raise unexpected(name, exc) from None

    def _scrubbed(self, error: ToolError) -> ToolError:
        """`error` with the workspace's absolute path (which an SDK message may hold) shown
        as `<workspace>`: the model knows the workspace only by relative paths."""
        workspace = self._setup.workspace
        if workspace is None or str(workspace) not in error.message:
            return error
        message = error.message.replace(str(workspace), "<workspace>")
        return ToolError(error.code, message, retryable=error.retryable)
