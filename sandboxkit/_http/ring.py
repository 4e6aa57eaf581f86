"""A large body read below the HTTP parser: `recv_into` a ring of big buffers, its read
timeout kept by one cheap watchdog (`connections.Watchdog`) instead of a timer re-armed per
received piece.

Once an answer's head is in, `transport.StreamingResponse` may hand its connection's
transport to a `RingReader` (an asyncio `BufferedProtocol`, which plain and TLS transports
both feed): the socket (or the TLS layer) writes straight into 4 MiB buffers, and the
consumer gets each as one memoryview. Per GiB that is ~256 pieces instead of ~4,000
parsed, copied and queued ones (aiohttp's), and one write and one hash call per 4 MiB in the
file sink.

The reader never returns a connection to a pool: its parser on the HTTP side was bypassed,
so the connection is closed afterwards (`StreamingResponse` only uses it for large bodies,
where one new connection is nothing). asyncio only; aiohttp stays in `transport` and `connections`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from .connections import Watchdog

__all__ = ["RING_BUFFER", "RingReader"]

RING_BUFFER = 4 << 20
# Reading pauses when more filled buffers than this wait for the consumer: none, so that
# a consumer slower than the socket (the file sink, when the disk or sha256 is the
# bottleneck) holds the fewest buffers: its two batches in flight and the one it holds while
# waiting for them, one ready: four, 16 MiB (the next is taken only when reading resumes).
_READY_LIMIT = 0
# Buffers kept for reuse; one a consumer still holds a view of is never written again (a
# fresh one is made instead, and dropped when the consumer lets go of it).
_POOL_LIMIT = 6
# A partly filled buffer is handed on after this long (a slow link still shows progress).
_SETTLE = 0.1
_SCRATCH = 64 << 10


def _in_use(buffer: bytearray) -> bool:
    """Whether a memoryview of `buffer` is still alive somewhere (then it must not change)."""
    try:
        buffer.append(0)  # a bytearray with live exports cannot be resized
    except BufferError:
        return True
    del buffer[-1]
    return False


class RingReader(asyncio.BufferedProtocol):
    """Reads `length` body bytes from `transport` into large buffers, handed on in order.

    `take()` returns the next piece (a memoryview the consumer may keep as long as it likes:
    a buffer is refilled only once no view of it is left), None at the end of the body, or
    raises `RingReader.Cut` / `RingReader.Stalled`. The protocol it replaced (`inner`) is
    told when the connection is lost, and put back by `detach()`.
    """

    class Cut(Exception):
        """The connection ended before the body did."""

    class Stalled(Exception):
        """No byte came for the read timeout while we waited for one."""

    def __init__(
        self,
        transport: Any,
        inner: asyncio.BaseProtocol,
        length: int,
        read_timeout: float | None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._inner = inner
        self._left = length  # body bytes still to receive
        self._pool: list[bytearray] = []
        # The buffer being filled; None until the transport asks for one. Taken that late,
        # while reading is paused the buffers the consumer settles meanwhile can be reused:
        # four 4 MiB buffers cover the file sink's pipeline (two batches with its threads,
        # one waiting, one ready here) where taking the next at once made it five.
        self._buffer: bytearray | None = None
        self._start = 0  # handed on up to here
        self._filled = 0  # received up to here
        self._ready: deque[memoryview] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._error: BaseException | None = None
        self._lost = False
        self._attached = True
        self.received = 0
        self._watchdog = Watchdog(self._loop, read_timeout, self._stalled)
        transport.set_protocol(self)
        if length == 0:
            self._pause()
        elif not transport.is_reading():  # the parser's own flow control may have paused it
            transport.resume_reading()

    def _fresh(self) -> bytearray:
        for buffer in self._pool:
            if not _in_use(buffer):
                return buffer
        buffer = bytearray(RING_BUFFER)
        if len(self._pool) < _POOL_LIMIT:
            self._pool.append(buffer)
        return buffer

    # --- the transport's side ---

    def get_buffer(self, sizehint: int) -> memoryview:
        if not self._left or self._error is not None:
            return memoryview(bytearray(_SCRATCH))  # bytes past the body: dropped
        if self._buffer is None:
            self._buffer = self._fresh()
        end = min(RING_BUFFER, self._filled + self._left)
        return memoryview(self._buffer)[self._filled : end]

    def buffer_updated(self, nbytes: int) -> None:
        if not self._left or self._error is not None:
            return
        self._watchdog.last = self._loop.time()
        self._filled += nbytes
        self._left -= nbytes
        self.received += nbytes
        if self._filled == RING_BUFFER or not self._left:
            assert self._buffer is not None  # get_buffer() came first
            self._ready.append(memoryview(self._buffer)[self._start : self._filled])
            self._buffer = None
            self._start = self._filled = 0
            if not self._left or len(self._ready) > _READY_LIMIT:
                self._pause()
            self._wake()

    def eof_received(self) -> bool:
        self._end(self.Cut("the connection closed before the body's end"))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._end(self.Cut(f"the connection was lost before the body's end: {exc or 'closed'}"))
        if self._attached:
            self._attached = False
            self._inner.connection_lost(exc)

    # --- the consumer's side ---

    async def take(self) -> memoryview | None:
        """The next piece of the body; None once it has all been taken."""
        waited = False
        while True:
            if self._ready:
                piece = self._ready.popleft()
                if self._paused and self._left and self._error is None:
                    self._resume()
                return piece
            ended = not self._left or self._error is not None
            if self._buffer is not None and self._filled > self._start and (ended or waited):
                # A partial buffer: the body was cut, or bytes came slower than _SETTLE.
                piece = memoryview(self._buffer)[self._start : self._filled]
                self._start = self._filled
                return piece
            if self._error is not None:
                raise self._error
            if not self._left:
                return None
            self._waiter = self._loop.create_future()
            settle = self._loop.call_later(_SETTLE, self._wake)
            try:
                await self._waiter
            finally:
                settle.cancel()
                self._waiter = None
            waited = True

    def detach(self) -> None:
        """Stop: the watchdog ends, and the replaced protocol gets its transport back (to
        close it: its parser still waits for this body)."""
        self._watchdog.stop()
        self._waiter = None
        if self._attached and not self._lost:
            self._attached = False
            self._transport.set_protocol(self._inner)

    def _pause(self) -> None:
        if not self._paused:
            self._paused = True
            self._watchdog.active = False
            self._transport.pause_reading()

    def _resume(self) -> None:
        self._paused = False
        self._watchdog.active = True
        self._watchdog.last = self._loop.time()
        self._transport.resume_reading()

    def _stalled(self) -> None:
        self._end(self.Stalled("no byte came for the read timeout"))
        self._pause()

    def _end(self, error: BaseException) -> None:
        if self._left and self._error is None:
            self._error = error
        self._watchdog.stop()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
