"""`read_file` and `write_file`: a bounded page of a sandbox file, a bounded write of one.

Reads are paged by byte offset: each result says where the next page starts
(`next_offset`), whether the file ended (`eof`) and its size when the service said it. A
text page never ends inside a UTF-8 character, so pages join into the file's text; bytes
that are not UTF-8 read as U+FFFD. A text page holding NUL bytes is refused as binary: a
model is better served by being told than by a page of mojibake.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import sandboxkit

from ..models import FileRange, TextPage
from ._errors import ErrorCode, ToolError, about
from ._schema import field, integer, obj, result, string
from ._tool import Definition, Progress, Setup

__all__ = [
    "MAX_OFFSET",
    "READ_FILE",
    "WRITE_FILE",
    "file_subject",
    "path_arg",
    "sandbox_arg",
    "sandbox_file",
]

# JSON's exact integer range: an offset past it is no file's.
MAX_OFFSET = (1 << 53) - 1


def sandbox_arg(setup: Setup) -> dict[str, Any]:
    """The `sandbox` argument: one of the names the application gave."""
    names = list(setup.sandboxes)
    return string(
        "The sandbox to use, by the name the application gave it (list_sandboxes shows them).",
        enum=names,
    )


def path_arg(setup: Setup, what: str) -> dict[str, Any]:
    """A sandbox path argument, confined to the root."""
    return string(
        f"{what}: a path in the sandbox, relative to {setup.root} or absolute under it "
        f"(at most {setup.limits.max_path_length} characters)."
    )


def sandbox_file(setup: Setup, args: Mapping[str, Any]) -> tuple[str, sandboxkit.Sandbox, str]:
    """The `sandbox` and `remote` arguments: the sandbox's name, its handle
    (`unknown_sandbox` if there is none) and the absolute path under the root
    (`invalid_path` if it leaves it)."""
    name = args["sandbox"]
    return name, setup.sandbox(name), setup.remote(args["remote"])


def file_subject(path: str, name: str) -> str:
    """What an error about a sandbox file is about, for `about`."""
    return f"File {path} in sandbox {name!r}"


def _encoding(what: str) -> dict[str, Any]:
    return string(what, enum=["text", "base64"], default="text")


def _read_schema(setup: Setup) -> dict[str, Any]:
    limits = setup.limits
    return obj(
        {
            "sandbox": sandbox_arg(setup),
            "remote": path_arg(setup, "The file"),
            "offset": integer(
                "The byte offset to start at: 0, or the next_offset of the previous page.",
                minimum=0,
                maximum=MAX_OFFSET,
                default=0,
            ),
            "length": integer(
                "The most bytes to read; at least 4, the longest UTF-8 character.",
                minimum=4,
                maximum=limits.max_read,
                default=limits.read_page,
            ),
            "encoding": _encoding(
                "text: the bytes as UTF-8 text. base64: the raw bytes, base64-encoded "
                "(for binary files)."
            ),
        },
        required=("sandbox", "remote"),
    )


def _read_output(_: Setup) -> dict[str, Any]:
    # One entry per key `_read_file` returns; a new key (a hash, say) is one line here.
    return result(
        {
            "sandbox": field("string"),
            "remote": field("string"),
            "encoding": field("string", enum=["text", "base64"]),
            "offset": field("integer", minimum=0),
            "next_offset": field("integer", minimum=0),
            "size": field("integer", nullable=True, minimum=0),
            "eof": field("boolean"),
            "content": field("string"),
            "hint": field("string"),
        },
        optional=("hint",),
    )


async def _read_file(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    offset, length, encoding = args["offset"], args["length"], args["encoding"]
    subject = file_subject(path, name)
    page: FileRange | TextPage
    with about(subject):
        if encoding == "base64":
            page = await sandbox.files.read_range(path, offset, length)
            content = base64.b64encode(page.data).decode("ascii")
        else:
            page = await sandbox.files.read_text(path, offset, length, errors="replace")
            content = page.text
    if encoding == "text" and "\x00" in content:
        raise ToolError(
            ErrorCode.INVALID_ARGUMENT,
            f"{subject} looks binary (NUL bytes at offset {offset} or after). Read it with "
            "encoding='base64', or copy it with download_file.",
        )
    result: dict[str, Any] = {
        "sandbox": name,
        "remote": path,
        "encoding": encoding,
        "offset": page.offset,
        "next_offset": page.next_offset,
        "size": page.size,
        "eof": page.eof,
        "content": content,
    }
    if not page.eof:
        result["hint"] = (
            f"More of the file remains: call read_file again with offset={page.next_offset}."
        )
    return result


READ_FILE = Definition(
    name="read_file",
    title="Read a file",
    description=(
        "Read one page of a file in a sandbox, by byte offset. Returns content, offset, "
        "next_offset, size (when known) and eof; while eof is false, call again with "
        "offset=next_offset to read on. A page is at most length bytes: {read_page} by "
        "default, {max_read} at most. encoding='text' decodes UTF-8 (a page never ends "
        "inside a character; invalid bytes read as U+FFFD) and refuses binary files; "
        "encoding='base64' returns the raw bytes. remote is relative to {root} or "
        "absolute under it."
    ),
    schema=_read_schema,
    output=_read_output,
    renamed={"path": "remote", "limit": "length"},
    run=_read_file,
    read_only=True,
    destructive=False,
    idempotent=True,
    needs="sandboxes",
)


def _write_schema(setup: Setup) -> dict[str, Any]:
    return obj(
        {
            "sandbox": sandbox_arg(setup),
            "remote": path_arg(setup, "The file to write (replaced if it exists)"),
            "content": string(
                "The whole new content: text (written as UTF-8), or base64 when "
                f"encoding='base64'. At most {setup.limits.max_write} bytes once encoded."
            ),
            "encoding": _encoding(
                "text: content is text. base64: content is base64 of the raw bytes."
            ),
        },
        required=("sandbox", "remote", "content"),
    )


def _content_bytes(content: str, encoding: str, cap: int) -> bytes:
    """The bytes `content` stands for, refused past `cap` before more is built."""
    too_large = ToolError(
        ErrorCode.TOO_LARGE,
        f"content is over the write limit of {cap} bytes. Write less, or copy a local file "
        "with upload_file.",
    )
    if encoding == "base64":
        if len(content) > (cap + 2) // 3 * 4 + 4:  # whitespace aside, 4 chars per 3 bytes
            raise too_large
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise ToolError(
                ErrorCode.INVALID_ARGUMENT,
                "content is not valid base64 (A-Z, a-z, 0-9, '+', '/', '=' padding).",
            ) from None
    else:
        if len(content) > cap:  # every character is at least one byte
            raise too_large
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError(
                ErrorCode.INVALID_ARGUMENT,
                "content holds a lone surrogate, which is no text; send valid Unicode.",
            ) from None
    if len(data) > cap:
        raise too_large
    return data


def _write_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "sandbox": field("string"),
            "remote": field("string"),
            "bytes_written": field("integer", minimum=0),
        }
    )


async def _write_file(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    data = _content_bytes(args["content"], args["encoding"], setup.limits.max_write)
    hints = {ErrorCode.NOT_FOUND: "Its directory must exist first."}
    with about(file_subject(path, name), hints):
        await sandbox.files.upload(path, data)
    return {"sandbox": name, "remote": path, "bytes_written": len(data)}


WRITE_FILE = Definition(
    name="write_file",
    title="Write a file",
    description=(
        "Write a whole file in a sandbox, replacing it if it exists (its directory must "
        "exist). content is text (written as UTF-8) or, with encoding='base64', base64 of "
        "raw bytes; at most {max_write} once decoded. remote is relative to {root} or "
        "absolute under it. Returns remote and bytes_written."
    ),
    schema=_write_schema,
    output=_write_output,
    renamed={"path": "remote"},
    run=_write_file,
    read_only=False,
    destructive=True,
    idempotent=True,
    needs="sandboxes",
)
