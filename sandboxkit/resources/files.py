"""Data-plane file transfer on one sandbox: streamed downloads that resume, streamed uploads.

Every request goes through the sandbox host's own pool (the only session carrying its access
token), is retried by the client's one retry loop, and never follows a redirect.
"""

from __future__ import annotations

import os
from typing import Any

import attrs

from .._core.options import CallOptions, ParallelDownloads, Progress, RetryPolicy, Timeout
from .._core.validation import (
    MIN_TEXT_LENGTH,
    check_chunk_size,
    check_codec,
    check_flag,
    check_length,
    check_max_size,
    check_offset,
    check_parts,
    check_username,
)
from .._http.calls import DataPlane
from .._transfer import download as _download
from .._transfer import reads as _reads
from .._transfer import upload as _upload
from .._transfer.sinks import check_destination
from ..errors import ValidationError
from ..models import DownloadResult, FileRange, TextPage, UploadResult
from ._common import AsyncStream

__all__ = ["Files"]

DEFAULT_CHUNK_SIZE = 1 << 20
DEFAULT_PAGE = 64 * 1024


class Files:
    """File download and upload on one sandbox (`sandbox.files`).

    Paths are absolute paths inside the sandbox; they are checked before any request.
    """

    def __init__(self, plane: DataPlane, parallel: ParallelDownloads | None = None) -> None:
        self._plane = plane
        self._parallel = parallel if parallel is not None else ParallelDownloads()

    def __repr__(self) -> str:
        return f"Files(origin={self._plane.host.origin!r})"

    def _request(
        self,
        remote: str,
        username: str | None,
        chunk_size: int,
        timeout: Timeout | None,
        retry: RetryPolicy | None,
    ) -> _download.Request:
        return _download.Request(
            plane=self._plane,
            params=self._plane.params(remote, check_username(username)),
            chunk_size=check_chunk_size(chunk_size),
            options=CallOptions(timeout, retry),
        )

    async def download(
        self,
        remote: str,
        dest: str | os.PathLike[str],
        *,
        username: str | None = None,
        progress: Progress | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        checksum: bool = True,
        resume: bool = True,
        keep_partial: bool = False,
        parts: int | None = None,
        max_size: int | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> DownloadResult:
        """Download one file to `dest`, resuming after failures where the service allows.

        The bytes land in a partial file beside `dest`, `.{name}.part`, with a sidecar
        `.{name}.part.json` saying what it is a part of; it is renamed over `dest` only once
        complete. On failure or cancellation an existing `dest` is left as it was, and both
        are removed, except where the data center showed it resumes and the part holds
        bytes: then a failure a later try may not meet (an outage, 429/502/503/504, a
        timeout) keeps them, and with `keep_partial=True` so does any failure or
        cancellation (as curl `-C -` and wget `-c` keep theirs; `sandboxkit.find_partial`
        finds them). If a process dies mid-download, they stay. The next download of the same
        remote file to the same `dest` continues from the part's size with `Range` (where the
        data center supports resume and the size still matches), else starts over. The
        local name is `dest`, never the server's `Content-Disposition`.

        A file of at least the client's `ParallelDownloads.threshold` bytes, on a data center
        that answers its first GET with `Accept-Ranges: bytes` after at least
        `ParallelDownloads.min_latency` (a long link), is fetched on up to `parts`
        connections of this sandbox's pool at once: the first GET's body gives the file's
        first slice, the rest comes as `Range` slices in file order, each written in place
        and resumed on its own after a cut; the sidecar then records the byte ranges written,
        so a rerun fetches only the gaps. If the file's size changes meanwhile, the whole
        download starts over.

        Args:
            remote: absolute path in the sandbox.
            dest: local file path; its directory must exist.
            username: act as this sandbox user (some data centers ignore it).
            progress: called as `progress(done_bytes, total_or_None)` as bytes arrive; after
                a restart `done_bytes` starts again from 0.
            chunk_size: the largest piece read from the network at once. A body of 32 MiB
                or more (without content coding) is read in pieces of up to 4 MiB instead,
                straight into the buffers written to disk, on a connection closed after it.
            checksum: compute the SHA-256 of what was written (`result.sha256`); a resumed
                part's bytes are read back and hashed too.
            resume: continue a partial file a dead process left; False always starts over.
            keep_partial: keep the partial file and its sidecar after any failure or
                cancellation (Ctrl-C, the caller's own timeout), for a later download to
                continue; False keeps them only after a failure a later try may not meet.
                A part the data center cannot resume, or one holding no bytes, is removed
                either way.
            parts: connections for this file (see above); None: the client's
                `ParallelDownloads.parts`; 1: one stream.
            max_size: the largest file to download, in bytes: a larger one raises
                `FileTooLargeError` as soon as an answer's head shows its size, before its
                body; else once the bytes counted pass it (reading stops one byte past the
                cap). `dest` is left as it was, and no partial file remains. None: no cap.
            timeout: per-call time limits; `total` bounds the whole download.
            retry: per-call retry policy; a retry that moved the download forward does not
                count against `max_attempts`.

        Returns:
            A `DownloadResult(path, size, sha256, attempts, resumes, elapsed)`; split into
            slices, `attempts` counts every GET of every slice and `resumes` the GETs that
            continued bytes already held (see `DownloadResult`).

        Raises:
            ValidationError: a bad remote path, a directory as `dest`, a missing directory,
                `parts` or `max_size` not a positive integer, `keep_partial` not a bool.
            FileTooLargeError: the file has more than `max_size` bytes.
            DestinationLockedError: another download is writing `dest` now.
            APIError: its status subclass (`NotFoundError`, ...) when the service refuses; a
                `RedirectNotFollowedError` (an `APIError`) for a redirect, never followed.
            TransportError: the connection failed and retries ran out.
            ResponseDecodeError: the service's answers contradict each other in a way that
                no retry can fix.
            OSError: the local file could not be written.

        Example::

            result = await sbx.files.download("/home/user/out.bin", "out.bin")
            print(result.size, result.sha256)
        """
        request = self._request(remote, username, chunk_size, timeout, retry)
        path = check_destination(dest)
        keep = check_flag("keep_partial", keep_partial)
        cap = check_max_size(max_size)
        parallel = self._parallel
        if parts is not None:
            parallel = attrs.evolve(parallel, parts=check_parts(parts))
        return await _download.download_to_file(
            request,
            path,
            checksum=bool(checksum),
            progress=progress,
            resume=bool(resume),
            keep_partial=keep,
            parallel=parallel,
            max_size=cap,
        )

    def iter_bytes(
        self,
        remote: str,
        *,
        username: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> AsyncStream[bytes]:
        """Stream one file's bytes; failures resume transparently, no byte is seen twice.

        Use it with `async for`, and with `async with` to release the connection at once when
        stopping early. If the file changes size mid-stream, bytes already yielded cannot be
        taken back, so it raises `ResponseDecodeError` rather than mix two versions.

        Args:
            remote: absolute path in the sandbox.
            username: act as this sandbox user.
            chunk_size: the largest chunk yielded.
            timeout: per-call time limits; `total` bounds the whole stream.
            retry: per-call retry policy.

        Returns:
            A `sandboxkit.AsyncStream` of `bytes` chunks.

        Raises:
            ValidationError: a bad remote path (raised by this call, before any request).
            APIError, TransportError, ResponseDecodeError: as for `download`, while iterating.

        Example::

            async with sbx.files.iter_bytes("/var/log/app.log") as chunks:
                async for chunk in chunks:
                    sink.write(chunk)
        """
        request = self._request(remote, username, chunk_size, timeout, retry)
        return AsyncStream(_download.stream_chunks(request))

    async def read_bytes(
        self,
        remote: str,
        *,
        max_size: int | None = None,
        username: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> bytes:
        """Read a (small) file whole into memory, with the same resume rules as `download`.

        Args:
            max_size: the most bytes to read: a larger file raises `FileTooLargeError` as
                soon as an answer's head shows its size (`Content-Length`, a `Content-Range`
                total), before its body; else once the bytes counted pass it (reading stops
                one byte past the cap). Its connection is closed, the rest unread. None:
                no cap.

        Raises:
            ValidationError: a bad remote path, or `max_size` not a positive integer.
            FileTooLargeError: the file has more than `max_size` bytes.
            APIError, TransportError, ResponseDecodeError: as for `download`.
        """
        request = self._request(remote, username, chunk_size, timeout, retry)
        cap = check_max_size(max_size)
        if cap is None:
            return await _download.read_all(request)
        return await _reads.read_all(request, cap)

    async def read_range(
        self,
        remote: str,
        offset: int = 0,
        length: int = DEFAULT_PAGE,
        *,
        username: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> FileRange:
        """Read `length` bytes of a file from byte `offset`, never more.

        Every GET asks for `Range: bytes=offset-(offset + length - 1)`. A data center without
        range support answers with the whole file: its bytes before `offset` are dropped as
        they come, and reading stops at the page's end (the connection is closed there, the
        rest of the file never read): there a page deep in a large file costs reading the
        file up to the page's end. Retried and resumed as `download` is: a cut resumes from
        the byte it reached, bounded by the page's end, with `If-Range`; an answer of
        another version of the file than the bytes held starts the page over (it never
        mixes two versions).
        Page through a file by passing `result.next_offset` until `result.eof`.

        Args:
            remote: absolute path in the sandbox.
            offset: the first byte, from 0; at or past the end of the file, the result is
                empty with `eof` set (and `size` where the answer showed it).
            length: the most bytes to read (>= 1); fewer come only at the end of the file.
            username: act as this sandbox user.
            timeout: per-call time limits.
            retry: per-call retry policy.

        Returns:
            A `FileRange(data, offset, size, eof, etag, last_modified)`; `next_offset` is
            `offset + len(data)`; `etag` and `last_modified` are the answer's validators
            (None where the data center sends none), which name the file's version.

        Raises:
            ValidationError: a bad remote path, `offset` not an integer >= 0, `length` not
                an integer >= 1 (before any request).
            APIError, TransportError, ResponseDecodeError: as for `download`.

        Example::

            offset = 0
            while True:
                page = await sbx.files.read_range("/var/log/app.log", offset)
                sink.write(page.data)
                if page.eof:
                    break
                offset = page.next_offset
        """
        request = self._request(remote, username, DEFAULT_CHUNK_SIZE, timeout, retry)
        start = check_offset(offset)
        return await _reads.read_range(request, start, check_length(length))

    async def read_text(
        self,
        remote: str,
        offset: int = 0,
        length: int | None = None,
        *,
        encoding: str = "utf-8",
        errors: str = "strict",
        max_size: int | None = None,
        username: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> TextPage:
        """Read a file's text from byte `offset`: `length` bytes of it, or up to its end.

        The bytes are read as `read_range` reads them and decoded with `encoding` and
        `errors` by an incremental decoder, which never splits a character: the bytes of one
        the page's end cuts are left for the next page (`next_offset` excludes them), unless
        the page reaches the end of the file, where they are decoded as the last bytes (with
        `errors`). Page through a file by passing `page.next_offset` until `page.eof`.

        An `offset` inside a UTF-8 character (one not from `next_offset`) starts the page
        at the next character, at most 3 bytes on: `page.offset` says where (no error, as a
        reader of a byte offset such as `size // 2` means the text there). Other encodings
        are decoded from `offset` as it is, with `errors`. `utf-16` and `utf-32` without a
        byte order take it from the BOM, so only at offset 0; stateful encodings (UTF-7,
        ISO-2022) cannot start at a byte offset and are refused.

        Args:
            remote: absolute path in the sandbox.
            offset: the first byte, from 0.
            length: the most bytes to read (>= 4, the longest character); None: up to the
                end of the file, bounded by `max_size`.
            encoding: a text encoding `codecs.lookup` knows.
            errors: what undecodable bytes become (`"strict"`: an error; `"replace"`...).
            max_size: with `length=None`, the most bytes to read from `offset`: more raise
                `FileTooLargeError` (checked as `read_bytes` checks it). None: no cap.
            username: act as this sandbox user.
            timeout: per-call time limits.
            retry: per-call retry policy.

        Returns:
            A `TextPage(text, offset, next_offset, size, eof, etag, last_modified)`.

        Raises:
            ValidationError: a bad remote path, offset, length or max_size, both `length`
                and `max_size` given, an unknown encoding or error handler, or one that
                cannot be read from this offset (before any request).
            FileTooLargeError: more than `max_size` bytes lie past `offset`.
            ResponseDecodeError: with `errors="strict"`, bytes that are not text in
                `encoding` (the message gives their offset).
            APIError, TransportError: as for `download`.

        Example::

            page = await sbx.files.read_text("/home/user/notes.md", length=16384)
            rest = await sbx.files.read_text("/home/user/notes.md", page.next_offset)
        """
        request = self._request(remote, username, DEFAULT_CHUNK_SIZE, timeout, retry)
        start = check_offset(offset)
        size = None if length is None else check_length(length, MIN_TEXT_LENGTH)
        cap = check_max_size(max_size)
        if size is not None and cap is not None:
            raise ValidationError(
                f"length={length!r}, max_size={max_size!r}: give one; max_size bounds a read "
                "to the end of the file (length=None), a page is bounded by its length"
            )
        codec = check_codec(encoding, errors, start)
        return await _reads.read_text(request, start, size, codec, errors, cap)

    async def upload(
        self,
        remote: str,
        source: Any,
        *,
        username: str | None = None,
        progress: Progress | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> UploadResult:
        """Write one file at `remote` (overwriting it), streamed from `source`.

        The body is `multipart/form-data` with the single part `file` (named after the remote
        path's base name). The parent directory must already exist in the sandbox.

        Args:
            remote: absolute path in the sandbox, naming a file.
            source: a local path (str or os.PathLike), bytes/bytearray/memoryview, a binary
                file object, or an async iterable of bytes. Paths, bytes and seekable files
                are resent in full on a retryable failure; a non-seekable file or an async
                iterable is sent once and never retried (the error says so).
            username: act as this sandbox user.
            progress: called as `progress(sent_bytes, total_or_None)`.
            timeout: per-call time limits.
            retry: per-call retry policy.

        Returns:
            An `UploadResult(path, name, type, size, attempts, elapsed)`: the file the
            service reports, the bytes sent, and the POSTs it took (a retry sends the whole
            file again).

        Raises:
            ValidationError: a bad remote path, a missing local file, an unusable source, or
                a source that changed size while being sent.
            PayloadTooLargeError: the file exceeds the data center's limit (never retried).
            APIError, TransportError: as for `download`.
        """
        params = self._plane.params(remote, check_username(username))
        if remote.endswith("/"):
            raise ValidationError(f"remote path={remote!r}: must name a file, not a directory")
        source_plan = _upload.make_source(source)
        sent = [source_plan.size or 0]

        def counted(done: int, total: int | None) -> None:
            sent[0] = done  # a source of unknown size is sent once (never retried)
            if progress is not None:
                progress(done, total)

        clock = self._plane.calls.clock
        started, tries = clock(), [0]
        entry = await _upload.send_file(
            self._plane,
            remote,
            params,
            source_plan,
            progress=progress if source_plan.size is not None else counted,
            options=CallOptions(timeout, retry),
            tries=tries,
        )
        return UploadResult(
            entry.path, entry.name, entry.type, sent[0], tries[0], clock() - started
        )
