"""One vocabulary (issue 39): each operation, the SDK method that is its source of names, and
what the other surfaces call it.

A row names the SDK method; the blocking facade (`sandboxkit.sync`) has it with the same
parameters; a CLI command spells each SDK parameter it takes as `--` and the name with `_`
as `-` (or as a positional argument of that name); an agent tool takes it under the same
name. Where a surface differs on purpose, the row says so and why (`cli_differs`,
`tool_differs`); nothing else may differ. `tests/test_vocabulary.py` checks every row
against the signatures, the click commands and the tools' schemas, and that every command
and tool is in some row, and renders the README's table from it. Pure data.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from . import operations as ops

__all__ = ["CLI_ONLY", "OPERATIONS", "TOOL_ONLY", "Operation"]


@attrs.frozen
class Operation:
    """One operation on every surface.

    Attributes:
        sdk: the method whose parameters are the names: `Files.download` (a resource's
            class and method), `Client` (its options), `resources_from`, or `emulator.X`.
        operation: its name in logs, errors and retries (`_core/operations.py`), if one.
        sync: `sandboxkit.sync` has it, with the same parameters.
        cli: the command (`files download`; "" for the `sandboxkit` group itself).
        tools: the agent tools that call it.
        also: parameters a surface takes that belong to another SDK callable, with it:
            the sandbox's `sandbox_key` is `Client.sandbox`'s.
        spelled: an SDK parameter the surfaces give as parts: by the parameters of an SDK
            callable (`resources`: `resources_from`'s), or by the keys of a mapping.
        cli_differs: an option (as `--help` shows it) or argument that is no SDK
            parameter's name, and why.
        tool_differs: a tool argument that is no SDK parameter's name, or means something
            else there, and why.
    """

    sdk: str
    operation: str | None = None
    sync: bool = True
    cli: str | None = None
    tools: tuple[str, ...] = ()
    also: Mapping[str, str] = attrs.field(factory=dict)
    spelled: Mapping[str, str | tuple[str, ...]] = attrs.field(factory=dict)
    cli_differs: Mapping[str, str] = attrs.field(factory=dict)
    tool_differs: Mapping[str, str] = attrs.field(factory=dict)


_JSON = {"--json": "the output's format (one JSON object per line), not the operation's"}
_SANDBOX = {
    "sandbox": "one of the names the application gave `Toolkit(sandboxes=)`: it stands for "
    "`client.sandbox(sandbox_key, domain, access_token)`, which a model never sees"
}
_ADDRESS = {
    "sandbox_key": "Client.sandbox",
    "domain": "Client.sandbox",
    "access_token": "Client.sandbox",
    "data_plane_scheme": "Client",
}
_BWLIMIT = {
    "--bwlimit": "rclone's spelling, as its operators type it (`10M`, `UP:DOWN`, `off`): the "
    "client's `budgets=` (`Budgets.from_bwlimit`)",
}
_EXPECTED = {
    "expected_sha256": "the agent tools' check before a change: the sha256 a whole read "
    "showed (or `absent`); no SDK call takes it, the service has no conditional upload",
    "expected_version": "the same check by the version token a page showed (its ETag or "
    "Last-Modified)",
}
_PAGE_ENCODING = (
    "how the page is returned: text (decoded as UTF-8) or base64 (the raw bytes, read with "
    "`read_range`); not `read_text`'s codec, which is always UTF-8 here"
)

OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "Client",
        cli="",
        cli_differs={
            "--ca-file": "a CA bundle file, which the CLI makes the `ssl=` context of",
            "--debug": "the CLI's own: tracebacks and the SDK's DEBUG log",
            "--version": "the CLI's own",
        },
    ),
    Operation(
        "Templates.create",
        ops.TEMPLATES_CREATE,
        cli="templates create",
        tools=("create_template",),
        spelled={"resources": "resources_from", "build": ("commands", "start_cmd")},
        cli_differs={
            "--label": "repeatable, one KEY=VALUE each: together `labels`",
            "--command": "repeatable, one build step each: together `build`'s `commands`",
            "--build": "an initial build with no steps (`build={'commands': []}`)",
            "--split": "hidden: the default now, kept for scripts written before",
            **_JSON,
        },
    ),
    Operation("Templates.builds", ops.BUILDS_LIST, cli="builds list", cli_differs=_JSON),
    Operation("Templates.builds_page", ops.BUILDS_LIST, tools=("list_builds",)),
    Operation("Templates.get_build", ops.BUILDS_LIST, tools=("get_build",)),
    Operation("Templates.start_build", ops.BUILDS_START, cli="builds start"),
    Operation(
        "Templates.build_logs",
        ops.BUILDS_LOGS,
        cli="builds logs",
        tools=("read_build_logs",),
    ),
    Operation("Templates.wait_for_build", ops.BUILDS_LIST, tools=("wait_for_build",)),
    Operation(
        "Files.download",
        ops.FILES_DOWNLOAD,
        cli="files download",
        tools=("download_file",),
        also=_ADDRESS,
        cli_differs=_BWLIMIT,
        tool_differs=_SANDBOX,
    ),
    Operation(
        "Files.upload",
        ops.FILES_UPLOAD,
        cli="files upload",
        tools=("upload_file", "write_file", "edit_file"),
        also=_ADDRESS,
        cli_differs=_BWLIMIT,
        tool_differs={
            **_SANDBOX,
            "content": "write_file's: the bytes themselves, as text or base64 (`source` "
            "given inline in JSON)",
            "encoding": "write_file's: how `content` is written, text (UTF-8) or base64; "
            "edit_file's: the file's text encoding (utf-8, latin-1, cp1252)",
            "old_text": "edit_file's: the exact text to replace (the file is read with "
            "`read_range`, edited, and uploaded whole)",
            "new_text": "edit_file's: the text put in its place",
            "replace_all": "edit_file's: every occurrence, not exactly one",
            "dry_run": "edit_file's: write nothing, return the unified diff",
            **_EXPECTED,
        },
    ),
    Operation(
        "Files.read_text",
        ops.FILES_DOWNLOAD,
        tools=("read_file",),
        tool_differs={**_SANDBOX, "encoding": _PAGE_ENCODING},
    ),
    Operation(
        "Files.read_range",
        ops.FILES_DOWNLOAD,
        tools=("read_file",),
        tool_differs={**_SANDBOX, "encoding": _PAGE_ENCODING},
    ),
    Operation("Files.read_bytes", ops.FILES_DOWNLOAD),
    Operation("Files.iter_bytes", ops.FILES_DOWNLOAD),
    Operation(
        "emulator.request_sandbox",
        sync=False,
        cli="emulator new-sandbox",
        cli_differs=_JSON,
    ),
)

# Commands with no SDK operation behind them, and why.
CLI_ONLY: Mapping[str, str] = {
    "emulator": "serves the emulator in the foreground (`sandboxkit.emulator`'s program)",
    "demo": "a tour of the SDK against the emulator",
    "mcp": "serves the agent tools over MCP (its configuration is the operator's)",
}
# Tools with no SDK operation behind them, and why.
TOOL_ONLY: Mapping[str, str] = {
    "list_sandboxes": "what the toolkit was given: the sandboxes' names, never their keys",
    "copy_status": "a copy the toolkit runs by handle (`CopyHandles`): the toolkit's own state",
    "cancel_copy": "cancels the toolkit's task of a copy run by handle: no request of its own",
}
