"""Bounded reads (issue 31): a page of a file, a text page, a whole read under a size cap.

Each is one `download.fetch` into memory (the download's retry loop, resume machine and
connection handling), stopped where the read ends. A page runs under `bounds.PageState`:
every GET asks for `Range: bytes=a-b`, bounded by the page's end, and a data center without
ranges, which answers with the whole file, is read only up to the page's end: the bytes
before it are dropped as they come, and its connection is closed there, the rest unread. A
capped whole read runs under the download's own `ResumeState` (the same GETs as
`read_bytes`): the cap is checked against the size an answer's head shows, before its body,
else against the bytes counted, whose reading stops one byte past the cap.
"""

from __future__ import annotations

from collections.abc import Callable

from .._core.bounds import PageState, decode_page, too_large
from .._core.resume import ResumeState
from .._http.transport import StreamingResponse
from ..errors import ResponseDecodeError
from ..models import FileRange, TextPage
from .download import OPERATION, Request, fetch
from .sinks import MemorySink, PageSink

__all__ = ["read_all", "read_range", "read_text"]


def _stop_at(
    end: int | None, offset: int, max_size: int | None
) -> Callable[[ResumeState, StreamingResponse], int | None]:
    """`fetch`'s `on_stream` for a read from `offset` that stops at `end`: with `max_size`,
    a file whose answer's head shows more than that past `offset` is refused.

    Raises:
        FileTooLargeError: before the body: none of it is read, its connection is closed.
    """

    def on_stream(now: ResumeState, _: StreamingResponse) -> int | None:
        if max_size is not None and (error := too_large(now.total, offset, max_size)):
            raise error
        return end

    return on_stream


async def _page(
    request: Request, offset: int, end: int | None, max_size: int | None
) -> tuple[bytes, PageState]:
    """The bytes [offset, end) of the file (fewer at its end), and the state that read them.

    Raises:
        FileTooLargeError: with `max_size`, more than that many bytes lie past `offset`.
    """
    state = PageState.at(offset, end)
    sink = PageSink()
    await fetch(request, "file", sink, state=state, on_stream=_stop_at(end, offset, max_size))
    # The page is the sink's first `held` bytes: a read that ended without a body (a 416)
    # right after a start-over finds the sink still holding the dropped version's.
    data = sink.value()[: state.held]
    if max_size is not None and (error := too_large(state.total, offset, max_size, len(data))):
        raise error
    return data, state


def _validators(state: PageState) -> tuple[str | None, str | None]:
    """The ETag and Last-Modified of the version the page's bytes are of, where sent."""
    seen = state.validators
    return (None, None) if seen is None else (seen.etag, seen.last_modified)


async def read_range(request: Request, offset: int, length: int) -> FileRange:
    """`files.read_range` once its arguments are checked."""
    data, state = await _page(request, offset, offset + length, None)
    return FileRange(data, offset, state.total, state.eof, *_validators(state))


async def read_text(
    request: Request,
    offset: int,
    length: int | None,
    codec: str,
    errors: str,
    max_size: int | None,
) -> TextPage:
    """`files.read_text` once its arguments are checked (`length` and `max_size` are not
    both given)."""
    end = None
    if length is not None:
        end = offset + length
    elif max_size is not None:
        end = offset + max_size + 1  # the byte past the cap tells a file over it
    data, state = await _page(request, offset, end, max_size)
    eof = state.eof
    try:
        text, start, next_offset = decode_page(data, offset, codec, errors, eof)
    except ValueError as exc:
        raise ResponseDecodeError(
            f"{OPERATION}: {exc} (read with errors={errors!r}; errors='replace' reads them)",
            status=state.status,
        ) from None
    return TextPage(text, start, next_offset, state.total, eof, *_validators(state))


async def read_all(request: Request, max_size: int) -> bytes:
    """`files.read_bytes(max_size=...)`: the whole file, or FileTooLargeError."""
    sink = MemorySink()
    # Reading stops one byte past the cap: that byte tells a file over it.
    state = await fetch(request, "file", sink, on_stream=_stop_at(max_size + 1, 0, max_size))
    if error := too_large(state.total, 0, max_size, state.position):
        raise error
    return sink.value()
