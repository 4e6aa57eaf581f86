"""Upload bodies over aiohttp: `multipart/form-data` with one part, streamed as the
connection takes it (the data plane's upload)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

import aiohttp

__all__ = ["multipart_file"]

_FORM_ESCAPES = {c: f"%{c:02X}" for c in [*range(0x20), 0x22, 0x7F]}


class _StreamedPart(aiohttp.payload.AsyncIterablePayload):
    """A part streamed from an async iterable whose length may be known up front.

    With the length known the multipart writer can compute the whole body's size, so the
    request goes out with a `Content-Length` instead of chunked framing.
    """

    def __init__(self, chunks: AsyncIterable[bytes], size: int | None) -> None:
        super().__init__(chunks, content_type="application/octet-stream")
        self._size = size


def multipart_file(filename: str, chunks: AsyncIterable[bytes], size: int | None) -> Any:
    """A `multipart/form-data` body holding exactly one part, `file`, streamed from `chunks`.

    Nothing is buffered: each chunk is written as the connection takes it. Pass the result as
    `open_stream(data=...)`; it is good for one request only (the chunks are consumed).

    Args:
        filename: the part's file name (the remote path's base name).
        chunks: the file's bytes; must yield exactly `size` bytes when `size` is given.
        size: the byte count when known (sent as `Content-Length`), else None (chunked).
    """
    part = _StreamedPart(chunks, size)
    # The file name is written the way browsers and urllib3 do (WHATWG form encoding): raw
    # UTF-8 with only quotes and control characters percent-escaped. aiohttp's own helper
    # percent-encodes every non-token byte, which servers other than aiohttp do not undo.
    escaped = filename.translate(_FORM_ESCAPES)
    part.headers[aiohttp.hdrs.CONTENT_DISPOSITION] = f'form-data; name="file"; filename="{escaped}"'
    writer = aiohttp.MultipartWriter("form-data")
    writer.append_payload(part)
    return writer
