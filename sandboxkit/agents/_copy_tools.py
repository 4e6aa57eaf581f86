"""`upload_file` and `download_file`: copies between a sandbox and the local workspace;
`copy_status` and `cancel_copy`: the copies answered with a handle (`_copies`).

Local paths are relative to the workspace and stay in it (`_paths`: links leading out are
refused, a download never writes through one). Sizes are bounded by `ToolLimits.max_copy`:
an upload by its file's size before anything is sent, a download by `files.download`'s
`max_size` (the size the service announces, or the bytes that came when it announces
none). A download lands whole or not
at all (the SDK writes a partial file beside it and renames it into place); one stopped
by a failure the next call may not meet keeps its partial file, so calling again resumes.

With `CopyHandles` a copy still running after `answer_within` answers a handle; its outcome
(the same result, or the error) is `copy_status`'s to tell.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sandboxkit

from ._copies import Copies, status_result
from ._errors import ErrorCode, ToolError, about
from ._file_tools import file_subject, path_arg, sandbox_arg, sandbox_file
from ._paths import local_dest, local_source
from ._schema import field, obj, result, string
from ._tool import Definition, Progress, Setup

__all__ = ["CANCEL_COPY", "COPY_STATUS", "DOWNLOAD_FILE", "UPLOAD_FILE"]


def _local_arg(what: str) -> dict[str, Any]:
    return string(f"{what}, relative to the local workspace (no leading '/', no '..' out).")


def _workspace(setup: Setup) -> Path:
    assert setup.workspace is not None  # the tool exists only with a workspace
    return setup.workspace


def _too_large(what: str, size: int | None, cap: int) -> ToolError:
    shown = "more bytes" if size is None else f"{size} bytes"
    return ToolError(ErrorCode.TOO_LARGE, f"{what} has {shown} than the copy limit of {cap}.")


def _upload_schema(setup: Setup) -> dict[str, Any]:
    return obj(
        {
            "sandbox": sandbox_arg(setup),
            "source": _local_arg("The local file to send"),
            "remote": path_arg(setup, "Where to write it (replaced if it exists)"),
        },
        required=("sandbox", "source", "remote"),
    )


def _upload_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "sandbox": field("string"),
            "source": field("string"),
            "remote": field("string"),
            "bytes": field("integer", minimum=0),
        }
    )


async def _upload_file(
    setup: Setup, args: dict[str, Any], progress: Progress | None
) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    limits = setup.limits
    source = local_source(args["source"], _workspace(setup), limits.max_path_length)
    with source.handle:
        if source.size > limits.max_copy:
            raise _too_large(f"Local file {source.shown!r}", source.size, limits.max_copy)
        hints = {ErrorCode.NOT_FOUND: "Its directory must exist in the sandbox first."}
        with about(f"Uploading {source.shown!r} to {path} in sandbox {name!r}", hints):
            await sandbox.files.upload(path, source.handle, progress=progress)
    return {"sandbox": name, "source": source.shown, "remote": path, "bytes": source.size}


UPLOAD_FILE = Definition(
    name="upload_file",
    title="Upload a local file",
    description=(
        "Copy a file from the local workspace into a sandbox, replacing the sandbox file "
        "if it exists (its directory must exist). source is relative to the "
        "workspace; remote is relative to {root} or absolute under it. At most {max_copy}. "
        "Returns the bytes sent."
    ),
    schema=_upload_schema,
    output=_upload_output,
    renamed={"local_path": "source", "path": "remote"},
    run=_upload_file,
    read_only=False,
    destructive=True,
    idempotent=True,
    needs="workspace",
    runs_long=True,
)


def _download_schema(setup: Setup) -> dict[str, Any]:
    return obj(
        {
            "sandbox": sandbox_arg(setup),
            "remote": path_arg(setup, "The file to copy"),
            "dest": _local_arg("Where to write it (replaced if it exists)"),
        },
        required=("sandbox", "remote", "dest"),
    )


def _download_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "sandbox": field("string"),
            "remote": field("string"),
            "dest": field("string"),
            "bytes": field("integer", minimum=0),
            "sha256": field("string", pattern="^[0-9a-f]{64}$"),
        }
    )


async def _download_file(
    setup: Setup, args: dict[str, Any], progress: Progress | None
) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    limits = setup.limits
    dest, shown = local_dest(args["dest"], _workspace(setup), limits.max_path_length)
    cap = limits.max_copy
    subject = file_subject(path, name)
    with about(subject):
        try:
            result = await sandbox.files.download(path, dest, progress=progress, max_size=cap)
        except sandboxkit.FileTooLargeError as exc:
            raise _too_large(subject, exc.size, cap) from None
    return {
        "sandbox": name,
        "remote": path,
        "dest": shown,
        "bytes": result.size,
        "sha256": result.sha256,
    }


DOWNLOAD_FILE = Definition(
    name="download_file",
    title="Download a file",
    description=(
        "Copy a file from a sandbox into the local workspace, replacing the local file if "
        "it exists (missing local directories are made). remote is relative to {root} or "
        "absolute under it; dest is relative to the workspace. At most {max_copy}. "
        "The file lands whole or not at all; after a retryable error, calling again "
        "resumes. Returns bytes and sha256."
    ),
    schema=_download_schema,
    output=_download_output,
    renamed={"path": "remote", "local_path": "dest"},
    run=_download_file,
    read_only=False,
    destructive=True,
    idempotent=True,
    needs="workspace",
    runs_long=True,
)


def _copies(setup: Setup) -> Copies:
    assert setup.copies is not None  # the tool exists only with copy handles
    return setup.copies


def _handle_schema(_: Setup) -> dict[str, Any]:
    return obj(
        {
            "copy_id": string(
                "The copy_id upload_file or download_file answered.", minLength=1, maxLength=64
            )
        },
        required=("copy_id",),
    )


def _status_output(setup: Setup) -> dict[str, Any]:
    return status_result([_upload_output(setup), _download_output(setup)])


async def _copy_status(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    return _copies(setup).status(args["copy_id"])


COPY_STATUS = Definition(
    name="copy_status",
    title="Follow a copy",
    description=(
        "Where a copy that answered a copy_id is: state running (bytes_done of total so "
        "far), done (result: what upload_file or download_file returns, with bytes and, "
        "for a download, sha256), failed (error: code, message, retryable) or cancelled."
    ),
    schema=_handle_schema,
    output=_status_output,
    run=_copy_status,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="copies",
)


async def _cancel_copy(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    return await _copies(setup).cancel(args["copy_id"])


CANCEL_COPY = Definition(
    name="cancel_copy",
    title="Cancel a copy",
    description=(
        "Stop a copy that answered a copy_id. A download stopped so leaves no partial file "
        "and its dest as it was; an upload leaves the sandbox file as it was. Returns the "
        "copy's state after (as copy_status)."
    ),
    schema=_handle_schema,
    output=_status_output,
    run=_cancel_copy,
    read_only=False,
    destructive=False,
    idempotent=True,
    needs="copies",
)
