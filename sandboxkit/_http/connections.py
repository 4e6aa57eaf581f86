"""aiohttp's connection protocol as sandboxkit's connections run it (`LazyReadTimer`): one
read timer moved lazily, bytes past an answer refused, and a drain left behind by a
cancelled writer retrieved. Every session's connector makes its connections with it
(`transport`); `bodies` quiets its timer for a body a `Watchdog` times instead (one timer
per read timeout, for a body read piece by piece or below the parser, `ring`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.http import RawResponseMessage

__all__ = ["LazyReadTimer", "Watchdog", "quiet_read_timer"]


# LazyReadTimer calls its base's methods as `_Handler.method(self, ...)`: they run for
# every read and answer, and `super()` costs ~75 ns more a call (a lookup on the class at
# call time still sees a test's monkeypatch, which an alias made at import would not).
_Handler = aiohttp.client_proto.ResponseHandler
_NO_PARSER = object()  # what no connection's parser is


class LazyReadTimer(_Handler):
    """aiohttp's connection protocol, its `sock_read` timer moved lazily.

    aiohttp cancels its read timer and makes a new one for every piece received: three
    timer handles (and as many cancelled ones left in the loop's heap) for a small answer
    whose head and body come in two pieces, about 5% of the client's time with 10,000 small
    downloads (benchmarks/run.py --case hosts, py-spy). Here a piece only moves the due
    time; the one timer, when it fires early, sets itself again for the due time. The
    timeout keeps aiohttp's meaning (the longest wait for the peer between two pieces).
    tests/http/test_read_timer.py fails if aiohttp stops calling `_reschedule_timeout`.

    It also closes a connection that gets bytes past its answer (`_refuse_stray`), and on
    aiohttp before 3.14 retrieves what a cancelled writer's drain leaves (`connection_lost`).
    """

    _read_due = 0.0
    # The parser of the request whose final answer has ended: while it is the connection's
    # parser, a byte is one nobody asked for. aiohttp pools a connection when its answer's
    # body ends, inside the parser's call, and keeps the queue of parsed answers across
    # requests: an answer after the end (same read, or while pooled) was the next one's.
    # aiohttp makes a parser per request (`set_response_params`): that resets this (were
    # one kept, every reuse would be refused: loud, never a wrong answer).
    _ended: object = _NO_PARSER

    def feed_data(
        self, data: tuple[RawResponseMessage, aiohttp.StreamReader], size: int = 0
    ) -> None:
        # Every answer the parser completes passes here on its way to the reader's queue.
        if self._ended is self._parser:
            self._refuse_stray()
            return
        if data[0].code >= 200:  # a 1xx is informational: the final answer follows
            data[1].on_eof(self._answer_ended)
        _Handler.feed_data(self, data, size)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        ended = self._ended is parser
        if ended and data:  # (empty: aiohttp resuming its parser on bytes it holds)
            self._refuse_stray()
            return
        _Handler.data_received(self, data)
        if not ended and self._ended is parser:
            # The answer ended in this read. A whole answer after it went to feed_data; the
            # start of one (or garbage the parser let pass) only the parser knows: ask it
            # as aiohttp does when a connection is lost (it is never fed again).
            try:
                started = parser is not None and parser.feed_eof() is not None
            except Exception:  # it began something that is no valid head
                started = True
            if started:
                self._refuse_stray()

    def connection_lost(self, exc: BaseException | None) -> None:
        # aiohttp before 3.14 waits for the socket to drain under `asyncio.shield`: a writer
        # cancelled meanwhile (an upload cancelled while its server stopped reading) leaves
        # the waiter behind, and the connection's loss sets on it an exception nobody
        # retrieves (asyncio logs "Future exception was never retrieved"). Retrieving it
        # changes nothing else: a writer still waiting gets it through its shield.
        waiter: asyncio.Future[None] | None = getattr(self, "_drain_waiter", None)
        _Handler.connection_lost(self, exc)
        if waiter is not None and waiter.done() and not waiter.cancelled():
            waiter.exception()

    def _answer_ended(self) -> None:
        self._ended = self._parser

    def _refuse_stray(self) -> None:
        """Close the connection: which request stray bytes answer, HTTP/1.1 cannot say.

        The pool then drops it: `BaseConnector._get` reuses only a protocol that
        `is_connected()` (its transport not closing) and `_release` closes one that
        `should_close`. The stray bytes are dropped unparsed, an answer parsed from them
        kept from the reader's queue.
        """
        self.force_close()
        transport = self.transport
        if transport is not None:
            transport.close()

    def _reschedule_timeout(self) -> None:
        timeout = self._read_timeout
        if not timeout:
            self._drop_timeout()
            return
        self._read_due = self._loop.time() + timeout
        if self._read_timeout_handle is None:
            self._read_timeout_handle = self._loop.call_at(self._read_due, self._read_due_check)

    def _read_due_check(self) -> None:
        if self._loop.time() < self._read_due:  # a piece came since: wait for the new due time
            self._read_timeout_handle = self._loop.call_at(self._read_due, self._read_due_check)
            return
        self._read_timeout_handle = None
        self._on_read_timeout()


def quiet_read_timer(protocol: Any) -> None:
    """Stop aiohttp re-arming its `sock_read` timer per piece of this body: a `Watchdog`
    keeps the read timeout instead. `read_timeout` is the protocol's public setter; the
    armed handle is dropped too (else it would fire once more, harmlessly late)."""
    protocol.read_timeout = None
    drop = getattr(protocol, "_drop_timeout", None)
    if drop is not None:
        drop()


class Watchdog:
    """Calls `on_stall` once `active` has been true for `limit` seconds without a `touch`.

    The read timeout's meaning (the longest wait for the peer between two reads) for the
    price of one timer per `limit` seconds: aiohttp's `sock_read` cancels and re-creates a
    timer handle on every received piece (~4,000 per GiB). Time while `active` is false
    (the consumer is busy, or reading paused for it) is not the peer's and does not count.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: float | None, on_stall: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._limit = limit
        self._on_stall = on_stall
        self.last = loop.time()
        self.active = True
        self._handle: asyncio.TimerHandle | None = None
        if limit is not None:
            self._handle = loop.call_at(self.last + limit, self._check)

    def _check(self) -> None:
        assert self._limit is not None
        now = self._loop.time()
        if not self.active:  # not waiting for the peer: its clock starts when we wait again
            self.last = now
        due = self.last + self._limit
        if now >= due:
            self._handle = None
            self._on_stall()
        else:
            self._handle = self._loop.call_at(due, self._check)

    def stop(self) -> None:
        """No more checks."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
