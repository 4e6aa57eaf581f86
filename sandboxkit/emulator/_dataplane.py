"""Data-plane routes: ``GET /files`` (download) and ``POST /files`` (upload) of one sandbox.

Files live on disk under the sandbox's directory; both directions stream in chunks and
touch the disk off the event loop, so memory stays flat whatever the file size.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .._core import operations as ops
from ._core import FAULT, ROUTES, SANDBOX
from ._multipart import MultipartError, MultipartStream, boundary_of
from ._sandboxes import Sandbox
from ._wire import DataProblem, json_response

__all__ = ["CHUNK_SIZE", "add_data_routes", "cut_transport"]

CHUNK_SIZE = 256 * 1024
_WRITE_BATCH = 1024 * 1024
_RANGE = re.compile(r"^bytes=\s*(\d*)\s*-\s*(\d*)\s*$")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_T = TypeVar("_T")


async def _off_loop(func: Callable[..., _T], *args: Any) -> _T:
    return await asyncio.get_running_loop().run_in_executor(None, func, *args)


def check_path(path: str | None) -> list[str]:
    """The segments of an absolute sandbox path.

    Raises:
        DataProblem: 400 when missing, empty, relative, holding ``.``/``..`` or NUL.
    """
    if not path:
        raise DataProblem(400, "path is required")
    if not path.startswith("/"):
        raise DataProblem(400, "path must be absolute")
    if "\x00" in path:
        raise DataProblem(400, "path must not contain NUL")
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise DataProblem(400, "path must not contain relative segments")
    return segments


def check_user(sandbox: Sandbox, segments: list[str], username: str | None) -> None:
    """Only ``root`` may touch ``/root``; the default user is ``user``.

    Raises:
        DataProblem: 403 when the acting user may not access the path.
    """
    acting = username if (username and sandbox.idc.honors_username) else "user"
    if segments and segments[0] == "root" and acting != "root":
        raise DataProblem(403, "permission denied")


def local_path(sandbox: Sandbox, segments: list[str]) -> Path:
    """Where a sandbox path lives on disk; a symlink may not lead outside the sandbox."""
    target = sandbox.fs.joinpath(*segments)
    if not target.resolve().is_relative_to(sandbox.fs.resolve()):
        raise DataProblem(404, "file not found")
    return target


def content_disposition(name: str) -> str:
    """``attachment; filename=<basename>``, quoted (and RFC 5987 encoded) only when needed."""
    if _TOKEN.match(name):
        return f"attachment; filename={name}"
    # Printable ASCII only: a header may not carry control characters (aiohttp refuses them).
    printable = "".join(c if " " <= c < "\x7f" else "?" for c in name)
    fallback = printable.replace("\\", "\\\\").replace('"', '\\"')
    value = f'attachment; filename="{fallback}"'
    if printable != name:
        value += "; filename*=UTF-8''" + urllib.parse.quote(name, safe="")
    return value


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """``(start, end)`` of a satisfiable single ``bytes=`` range; None to send the whole file.

    Raises:
        DataProblem: 416 when the start is at or beyond the end of the file.
    """
    match = _RANGE.match(header or "")
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first, last = match.group(1), match.group(2)
    if first == "":
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise _unsatisfiable(size)
        return max(0, size - suffix), size - 1
    start = int(first)
    if start >= size:
        raise _unsatisfiable(size)
    end = int(last) if last else size - 1
    if end < start:
        return None
    return start, min(end, size - 1)


def _unsatisfiable(size: int) -> DataProblem:
    problem = DataProblem(416, "range not satisfiable")
    problem.headers.update({"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"})
    return problem


def _open(target: Path) -> tuple[IO[bytes], int]:
    handle = open(target, "rb")  # noqa: SIM115 - closed by the caller after streaming
    return handle, os.fstat(handle.fileno()).st_size


def cut_transport(request: web.BaseRequest) -> None:
    """Close the connection now; bytes already written still go out first."""
    if request.transport is not None:
        request.transport.close()


async def download(request: web.Request) -> web.StreamResponse:
    """GET /files?path=&username=: the raw bytes of one file."""
    sandbox = request[SANDBOX]
    segments = check_path(request.query.get("path"))
    check_user(sandbox, segments, request.query.get("username"))
    target = local_path(sandbox, segments)
    try:
        handle, size = await _off_loop(_open, target)
    except IsADirectoryError:
        raise DataProblem(400, "path is a directory") from None
    except PermissionError:
        raise DataProblem(403, "permission denied") from None
    except OSError:  # missing file or parent, a file used as a directory...
        raise DataProblem(404, "file not found") from None
    try:
        return await _send(request, sandbox, target.name, handle, size)
    finally:
        await _off_loop(handle.close)


async def _send(
    request: web.Request, sandbox: Sandbox, name: str, handle: IO[bytes], size: int
) -> web.StreamResponse:
    idc = sandbox.idc
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Disposition": content_disposition(name),
        "Accept-Ranges": "bytes" if idc.supports_resume else "none",
    }
    span = parse_range(request.headers.get("Range"), size) if idc.supports_resume else None
    start, end = span if span is not None else (0, size - 1)
    length = end - start + 1
    response = web.StreamResponse(status=206 if span else 200, headers=headers)
    if span is not None:
        response.headers["Content-Range"] = f"bytes {start}-{end}/{size}"
    if idc.chunked_downloads and span is None:
        response.enable_chunked_encoding()
    else:
        response.content_length = length
    fault = request.get(FAULT)
    cut_at = fault.cut_offset(length) if fault is not None else None
    await response.prepare(request)
    if start:
        await _off_loop(handle.seek, start)
    sent = 0
    while sent < length:
        chunk = await _off_loop(handle.read, min(CHUNK_SIZE, length - sent))
        if not chunk:  # the file shrank underneath us: end the body short
            cut_transport(request)
            return response
        if cut_at is not None and sent + len(chunk) >= cut_at:
            await response.write(chunk[: cut_at - sent])
            cut_transport(request)
            return response
        await response.write(chunk)
        sent += len(chunk)
    await response.write_eof()
    return response


async def upload(request: web.Request) -> web.Response:
    """POST /files?path=&username=: one ``file`` part, streamed to disk, renamed into place."""
    sandbox = request[SANDBOX]
    path = request.query.get("path")
    segments = check_path(path)
    assert path is not None
    if request.content_type != "multipart/form-data":
        raise DataProblem(415, "Content-Type must be multipart/form-data")
    try:
        boundary = boundary_of(request.headers.get("Content-Type", ""))
    except MultipartError:
        raise DataProblem(400, "malformed multipart body") from None
    check_user(sandbox, segments, request.query.get("username"))
    if not segments:
        raise DataProblem(400, "path is a directory")
    target = local_path(sandbox, segments)
    if not target.parent.is_dir():
        raise DataProblem(404, "parent directory not found")
    if target.is_dir():
        raise DataProblem(400, "path is a directory")
    staged = sandbox.staging / f"{secrets.token_hex(8)}.part"
    try:
        await _receive(request, sandbox, boundary, staged)
        try:
            await _off_loop(os.replace, staged, target)
        except IsADirectoryError:
            raise DataProblem(400, "path is a directory") from None
        except OSError:
            raise DataProblem(404, "parent directory not found") from None
    finally:
        await _off_loop(_unlink, staged)
    return json_response([{"path": path, "name": segments[-1], "type": "file"}])


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


async def _receive(request: web.Request, sandbox: Sandbox, boundary: bytes, staged: Path) -> None:
    stream = MultipartStream(request.content, boundary, CHUNK_SIZE)
    received = False
    try:
        while (part := await stream.next_part()) is not None:
            if part.name != "file" or received:
                raise DataProblem(400, f"unexpected form field {part.name!r}: send one 'file'")
            await _store(stream, staged, sandbox.idc.max_upload_bytes)
            received = True
    except MultipartError:
        raise DataProblem(400, "malformed or truncated multipart body") from None
    except (ConnectionError, HttpProcessingError):
        raise DataProblem(400, "the upload was interrupted") from None
    if not received:
        raise DataProblem(400, "a file part named 'file' is required")


async def _store(stream: MultipartStream, staged: Path, limit: int | None) -> None:
    handle = await _off_loop(open, staged, "wb")
    try:
        size = 0
        batch: list[bytes] = []
        batched = 0
        while chunk := await stream.read():
            size += len(chunk)
            if limit is not None and size > limit:
                raise DataProblem(413, "the file is larger than this data center accepts")
            batch.append(chunk)
            batched += len(chunk)
            if batched >= _WRITE_BATCH:
                await _off_loop(handle.writelines, batch)
                batch, batched = [], 0
        if batch:
            await _off_loop(handle.writelines, batch)
    finally:
        await _off_loop(handle.close)


def add_data_routes(app: web.Application) -> None:
    """Register the data-plane routes with their names."""
    table = app[ROUTES]
    table.add(app, "GET", "/files", download, ops.FILES_DOWNLOAD)
    table.add(app, "POST", "/files", upload, ops.FILES_UPLOAD)
