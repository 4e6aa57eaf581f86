"""A small streaming ``multipart/form-data`` reader.

It never holds more than one network chunk plus a delimiter, and it tells a body that ends
before its closing boundary (truncated) apart from a complete one, which the upload rules
need. Every malformation raises :class:`MultipartError`.
"""

from __future__ import annotations

import re

import attrs
from aiohttp import StreamReader

__all__ = ["MultipartError", "MultipartStream", "PartHeaders", "boundary_of"]

_PARAM = re.compile(r';\s*([^=;\s]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;]*)')
_MAX_HEADER_BLOCK = 16 * 1024
_BOUNDARY = re.compile(r"^[0-9A-Za-z'()+_,./:=? -]{1,70}$")


class MultipartError(ValueError):
    """The body is not well-formed ``multipart/form-data`` (or it was cut short)."""


def _params(header: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, raw in _PARAM.findall(header):
        value = raw.strip()
        if value.startswith('"') and value.endswith('"') and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        found[name.lower()] = value
    return found


def boundary_of(content_type: str) -> bytes:
    """The boundary of a ``multipart/form-data`` Content-Type header.

    Raises:
        MultipartError: no usable boundary parameter.
    """
    boundary = _params(content_type).get("boundary", "")
    if not _BOUNDARY.match(boundary) or boundary.endswith(" "):
        raise MultipartError("missing or invalid multipart boundary")
    return boundary.encode("ascii")


@attrs.frozen(slots=True)
class PartHeaders:
    """What the reader learnt from one part's headers."""

    name: str | None
    filename: str | None


class MultipartStream:
    """Reads parts one after another off an aiohttp ``StreamReader``.

    Call :meth:`next_part`, then :meth:`read` until it returns ``b""``, then
    :meth:`next_part` again; it returns None after the closing boundary.
    """

    def __init__(
        self, content: StreamReader, boundary: bytes, chunk_size: int = 256 * 1024
    ) -> None:
        self._content = content
        self._delimiter = b"\r\n--" + boundary
        # A leading CRLF makes the first boundary look like every later delimiter.
        self._buffer = b"\r\n"
        self._chunk_size = chunk_size
        self._state = "preamble"

    async def _fill(self) -> None:
        chunk = await self._content.read(self._chunk_size)
        if not chunk:
            raise MultipartError("the multipart body ended before its closing boundary")
        self._buffer += chunk

    async def _need(self, size: int) -> None:
        while len(self._buffer) < size:
            await self._fill()

    async def _after_delimiter(self) -> None:
        await self._need(2)
        if self._buffer.startswith(b"--"):
            self._state = "done"
            return
        # Transport padding (linear whitespace) may follow a delimiter before its CRLF.
        while True:
            stripped = self._buffer.lstrip(b" \t")
            if stripped:
                break
            self._buffer = b""
            await self._fill()
        self._buffer = stripped
        await self._need(2)
        if not self._buffer.startswith(b"\r\n"):
            raise MultipartError("malformed multipart delimiter line")
        self._buffer = self._buffer[2:]
        self._state = "headers"

    async def _skip_to_delimiter(self) -> None:
        keep = len(self._delimiter) - 1
        while True:
            index = self._buffer.find(self._delimiter)
            if index >= 0:
                self._buffer = self._buffer[index + len(self._delimiter) :]
                await self._after_delimiter()
                return
            self._buffer = self._buffer[-keep:]
            await self._fill()

    async def next_part(self) -> PartHeaders | None:
        """Move to the next part and return its headers; None after the closing boundary."""
        if self._state in ("preamble", "body"):
            await self._skip_to_delimiter()
        if self._state == "done":
            return None
        while True:
            if self._buffer.startswith(b"\r\n"):
                block, self._buffer = b"", self._buffer[2:]
                break
            index = self._buffer.find(b"\r\n\r\n")
            if index >= 0:
                block, self._buffer = self._buffer[:index], self._buffer[index + 4 :]
                break
            if len(self._buffer) > _MAX_HEADER_BLOCK:
                raise MultipartError("multipart part headers are too large")
            await self._fill()
        self._state = "body"
        return self._parse_headers(block)

    @staticmethod
    def _parse_headers(block: bytes) -> PartHeaders:
        disposition = ""
        for line in block.decode("utf-8", "replace").split("\r\n"):
            name, sep, value = line.partition(":")
            if not sep:
                raise MultipartError("malformed multipart part header")
            if name.strip().lower() == "content-disposition":
                disposition = value.strip()
        params = _params(disposition)
        return PartHeaders(name=params.get("name"), filename=params.get("filename"))

    async def read(self) -> bytes:
        """The next chunk of the current part's content; ``b""`` at its end."""
        if self._state != "body":
            return b""
        keep = len(self._delimiter) - 1
        while True:
            index = self._buffer.find(self._delimiter)
            if index >= 0:
                data = self._buffer[:index]
                self._buffer = self._buffer[index + len(self._delimiter) :]
                await self._after_delimiter()
                return data
            if len(self._buffer) > keep:
                data = self._buffer[:-keep]
                self._buffer = self._buffer[-keep:]
                return data
            await self._fill()
