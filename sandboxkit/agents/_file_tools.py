"""`read_file`, `write_file` and `edit_file`: a bounded page of a sandbox file, a bounded
write of one, an exact-text edit of one.

Reads are paged by byte offset: each result says where the next page starts
(`next_offset`), whether the file ended (`eof`) and its size when the service said it. A
text page never ends inside a UTF-8 character, so pages join into the file's text; bytes
that are not UTF-8 read as U+FFFD. A text page holding NUL bytes is refused as binary: a
model is better served by being told than by a page of mojibake.

A page that is the whole file carries its `sha256`; any other page carries the answer's
`version` token where the data center sends validators. `write_file` and `edit_file` take
either back (`expected_sha256`, `expected_version`) and refuse with `conflict`, writing
nothing, when the file changed since (see `_edits`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

import sandboxkit

from ..models import FileRange, TextPage
from . import _edits
from ._errors import ErrorCode, ToolError, about
from ._schema import field, integer, obj, result, string
from ._tool import Definition, Progress, Setup

__all__ = [
    "EDIT_FILE",
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
            "sha256": field("string", pattern="^[0-9a-f]{64}$"),
            "version": field("string"),
            "hint": field("string"),
        },
        optional=("sha256", "version", "hint"),
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
    whole = _whole_bytes(page, content, encoding)
    if whole is not None:
        result["sha256"] = hashlib.sha256(whole).hexdigest()
    elif (version := _edits.version_of(page)) is not None:
        result["version"] = version
    if not page.eof:
        result["hint"] = (
            f"More of the file remains: call read_file again with offset={page.next_offset}."
        )
    return result


def _whole_bytes(page: FileRange | TextPage, content: str, encoding: str) -> bytes | None:
    """The file's bytes when `page` is all of them, else None. A text page holding U+FFFD
    may stand for bytes that are no UTF-8: its bytes are not known, so neither is a hash."""
    if page.offset != 0 or not page.eof:
        return None
    if isinstance(page, FileRange):
        return page.data
    if "\ufffd" in content:
        return None
    return content.encode("utf-8")


READ_FILE = Definition(
    name="read_file",
    title="Read a file",
    description=(
        "Read one page of a file in a sandbox, by byte offset. Returns sandbox, remote, "
        "encoding, content, offset, next_offset, size (bytes; null when unknown) and eof; "
        "while eof is false, call again with offset=next_offset to read on (a hint says "
        "so). A page that is the whole file (offset 0 and eof) also returns sha256 (hex, "
        "of the file's bytes; not for a text page holding U+FFFD); any other page "
        "returns version (an opaque token) when the data center names versions. Pass "
        "either to write_file or edit_file as expected_sha256 or expected_version to "
        "refuse a change to a file that changed since. A page is at most length bytes: "
        "{read_page} by default, {max_read} at most. encoding='text' decodes UTF-8 (a "
        "page never ends inside a character; invalid bytes read as U+FFFD) and refuses "
        "binary files; encoding='base64' returns the raw bytes. remote is relative to "
        "{root} or absolute under it."
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
            **_expected(),
        },
        required=("sandbox", "remote", "content"),
    )


def _expected() -> dict[str, dict[str, Any]]:
    """The `expected_sha256` and `expected_version` arguments of a change."""
    return {
        "expected_sha256": string(
            "Refuse (code conflict, nothing written) unless the file's bytes now have this "
            "sha256: the one read_file returned with the whole file. 'absent': refuse "
            "unless the file does not exist yet.",
            maxLength=64,
        ),
        "expected_version": string(
            "Refuse (code conflict, nothing written) unless the file is still at this "
            "version: the token read_file returned with a page.",
            maxLength=256,
        ),
    }


async def _check_expected(
    sandbox: sandboxkit.Sandbox, path: str, subject: str, args: Mapping[str, Any], cap: int
) -> None:
    """Refuse with `conflict` unless the file is the version `args` expect (if any)."""
    sha256 = _edits.check_sha256(args.get("expected_sha256"))
    version = args.get("expected_version")
    if sha256 is None and version is None:
        return
    # A hash needs the whole file (a larger one is no file read_file hashed); a version,
    # one byte's answer.
    hashed = sha256 not in (None, _edits.ABSENT)
    current = await _edits.read_current(sandbox, path, subject, cap if hashed else 0)
    if hashed and current.data is not None and not current.whole:
        raise ToolError(
            ErrorCode.CONFLICT,
            f"{subject} is over {cap} bytes now, so it is not the file expected_sha256 "
            "names. Nothing was written. Read it again.",
        )
    _edits.expect(current, subject, sha256, version)


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
            "sha256": field("string", pattern="^[0-9a-f]{64}$"),
        }
    )


async def _write_file(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    data = _content_bytes(args["content"], args["encoding"], setup.limits.max_write)
    subject = file_subject(path, name)
    await _check_expected(sandbox, path, subject, args, _hash_cap(setup))
    hints = {ErrorCode.NOT_FOUND: "Its directory must exist first."}
    with about(subject, hints):
        await sandbox.files.upload(path, data)
    return {
        "sandbox": name,
        "remote": path,
        "bytes_written": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def _hash_cap(setup: Setup) -> int:
    """The largest file whose hash a tool may have shown: a whole page, or a write."""
    return max(setup.limits.max_read, setup.limits.max_write)


WRITE_FILE = Definition(
    name="write_file",
    title="Write a file",
    description=(
        "Write a whole file in a sandbox, replacing it if it exists (its directory must "
        "exist). content is text (written as UTF-8) or, with encoding='base64', base64 of "
        "raw bytes; at most {max_write} once decoded. remote is relative to {root} or "
        "absolute under it. With expected_sha256 or expected_version (from read_file), "
        "refuses with code conflict and writes nothing if the file changed since it was "
        "read. Returns sandbox, remote, bytes_written and sha256 (hex, of the bytes "
        "written)."
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


def _edit_schema(setup: Setup) -> dict[str, Any]:
    cap = setup.limits.max_write
    return obj(
        {
            "sandbox": sandbox_arg(setup),
            "remote": path_arg(setup, "The text file to edit (it must exist)"),
            "old_text": string(
                "The exact text to replace: whitespace, indentation and line ends as in "
                "the file. It must occur once, unless replace_all.",
                minLength=1,
                maxLength=cap,
            ),
            "new_text": string("The text to put in its place (empty deletes it).", maxLength=cap),
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one.",
                "default": False,
            },
            "dry_run": {
                "type": "boolean",
                "description": "Write nothing; return the unified diff the edit would make.",
                "default": False,
            },
            **_expected(),
            "encoding": string(
                "The file's text encoding.", enum=list(_edits.ENCODINGS), default="utf-8"
            ),
        },
        required=("sandbox", "remote", "old_text", "new_text"),
    )


async def _edit_file(setup: Setup, args: dict[str, Any], _: Progress | None) -> dict[str, Any]:
    name, sandbox, path = sandbox_file(setup, args)
    edited = await _edits.edit_file(
        sandbox,
        path,
        file_subject(path, name),
        args["old_text"],
        args["new_text"],
        replace_all=args["replace_all"],
        dry_run=args["dry_run"],
        expected_sha256=args.get("expected_sha256"),
        expected_version=args.get("expected_version"),
        encoding=args["encoding"],
        max_size=setup.limits.max_write,
    )
    result: dict[str, Any] = {
        "sandbox": name,
        "remote": path,
        "replacements": edited.replacements,
        "dry_run": not edited.written,
        "bytes_written": len(edited.data) if edited.written else 0,
        "sha256": edited.sha256,
    }
    if edited.diff is not None:
        result["diff"] = edited.diff
    return result


def _edit_output(_: Setup) -> dict[str, Any]:
    return result(
        {
            "sandbox": field("string"),
            "remote": field("string"),
            "replacements": field("integer", minimum=1),
            "dry_run": field("boolean"),
            "bytes_written": field("integer", minimum=0),
            "sha256": field("string", pattern="^[0-9a-f]{64}$"),
            "diff": field("string"),
        },
        optional=("diff",),
    )


EDIT_FILE = Definition(
    name="edit_file",
    title="Edit a file",
    description=(
        "Replace exact text in a text file in a sandbox: old_text must occur exactly once "
        "(code no_match if absent, ambiguous_match if more than once), or at least once "
        "with replace_all=true. The file is read whole (at most {max_write}) in "
        "encoding (utf-8 by default). dry_run=true writes nothing and returns diff, the "
        "unified diff the edit would make. With expected_sha256 or expected_version (from "
        "read_file), refuses with code conflict if the file changed since it was read. "
        "Every refusal writes nothing. Returns sandbox, remote, replacements (how many), "
        "dry_run, bytes_written (0 on a dry run), sha256 (hex, of the new content: pass "
        "it as expected_sha256 to a next edit) and, on a dry run, diff. remote is "
        "relative to {root} or absolute under it."
    ),
    schema=_edit_schema,
    output=_edit_output,
    renamed={"path": "remote"},
    run=_edit_file,
    read_only=False,
    destructive=True,
    idempotent=False,
    needs="sandboxes",
)
