"""One data-plane request on its host's pool: `Transport.open`'s context.

It leases a slot of the host's pool (`_pools`), sends, moves the host's window and circuit
by the answer, and hands back the unread answer; on leaving it pools or drops the
connection and gives the slot back. A plain GET goes the lean way (`plain_get`), anything else
through aiohttp's `ClientSession.request`; both answers read the same (`StreamingResponse`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Protocol

import aiohttp

from .._core.events import origin_of
from .._core.options import Timeout
from .._core.protocol import ACCESS_TOKEN
from .._core.proxy_rules import ProxyRoutes
from .._core.retry import is_outage
from ..errors import SandboxKitError
from .bodies import Answer, StreamingResponse
from .circuits import Circuits
from .plain_get import Head, Route, route
from .pools import HostKey, HostPool, HostPools
from .telemetry import Exchange, watching
from .translate import translate

__all__ = ["HostRequest", "Sessions", "client_timeout"]


class Sessions(Protocol):
    """What a request needs of its transport (`_transport.Transport`)."""

    hosts: HostPools[aiohttp.ClientSession]
    circuits: Circuits
    proxies: ProxyRoutes
    tunnel_headers: dict[str, str] | None  # on the CONNECT to a proxy
    reading: set[Answer]  # answers whose body is being read (closed first by `aclose`)

    def check_open(self) -> None: ...

    def refuse_if_closed(self, response: Answer) -> None: ...


@functools.lru_cache(maxsize=64)  # a handful of Timeout values per process; saves a build per call
def client_timeout(timeout: Timeout) -> aiohttp.ClientTimeout:
    # `total` bounds the whole logical call (retries included) one level up, not one request.
    return aiohttp.ClientTimeout(total=None, sock_connect=timeout.connect, sock_read=timeout.read)


class HostRequest:
    """`Transport.open`'s context: one request on its host's pool, its answer, its end.

    A class rather than an `asynccontextmanager`: every download and upload passes here,
    and the generator machinery cost more than the rest of this code (10,000 small
    downloads, benchmarks/run.py --case hosts). The object itself is the lease's borrower.
    """

    __slots__ = (
        "_data",
        "_exchange",
        "_headed",
        "_headers",
        "_host",
        "_method",
        "_operation",
        "_pool",
        "_response",
        "_streaming",
        "_target",
        "_timeout",
        "_transport",
    )

    def __init__(
        self,
        transport: Sessions,
        host: HostKey,
        method: str,
        target: str,
        operation: str,
        timeout: Timeout,
        headers: Mapping[str, str] | None,
        data: Any,
    ) -> None:
        self._transport = transport
        self._host = host
        self._method = method
        self._target = target
        self._operation = operation
        self._timeout = timeout
        self._headers = headers
        self._data = data
        self._pool: HostPool[aiohttp.ClientSession] | None = None
        self._exchange: Exchange | None = None
        self._response: Answer | None = None
        self._streaming: StreamingResponse | None = None
        self._headed = 0  # the status of a head whose end the host's circuit awaits

    async def __aenter__(self) -> StreamingResponse:
        transport = self._transport
        transport.check_open()  # a retry may find the client closed since the call began
        host = self._host
        pools = transport.hosts
        pool = pools.lease_now(host, self) or await pools.lease_wait(host, self)
        self._pool = pool
        try:
            # Begun once the host's slot is held: its elapsed time is the request's own.
            watch = watching.get()
            exchange = None
            headers = self._headers
            if watch is not None:
                exchange = self._exchange = Exchange(watch, self._method, origin_of(host.origin))
                headers = exchange.sending(dict(headers) if headers else None)
            lean = self._lean(pool, headers)
            try:
                response: Answer
                if lean is not None:
                    response = await pool.route.get(
                        lean, client_timeout(self._timeout), self._timeout.read
                    )
                else:
                    response = await pool.session.request(
                        self._method,
                        self._target,
                        # Inline, as in send(): the token rides inside the tunnel only.
                        headers={**(headers or {}), ACCESS_TOKEN: host.token},
                        proxy_headers=transport.tunnel_headers,
                        data=self._data,
                        timeout=client_timeout(self._timeout),
                        allow_redirects=False,
                    )
            except Exception as exc:  # _translate.mapped, inlined: as in send()
                error: SandboxKitError | None = (
                    exc if isinstance(exc, SandboxKitError) else translate(exc, self._operation)
                )
                if error is None:
                    raise
            else:
                error = None
            if error is not None:
                if is_outage(error):
                    transport.circuits.failed(host.origin, str(error))
                raise error  # outside the except block: see _translate.mapped
            self._response = response  # from here on, whatever happens, `_end` ends it
            self._streaming = StreamingResponse(response, self._operation, self._timeout.read)
            pool.observe(response.status)
            self._headed = transport.circuits.headed(host.origin, response.status)
            if exchange is not None:
                exchange.answered(response.status, response.headers)
            transport.refuse_if_closed(response)
            transport.reading.add(response)
            self._streaming.on_body = transport.circuits.on_body(host.origin, self._headed)
            return self._streaming
        except BaseException as exc:
            await self._end(exc)
            raise

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        await self._end(exc)

    def _lean(
        self, pool: HostPool[aiohttp.ClientSession], headers: Mapping[str, str] | None
    ) -> Head | None:
        """The head of a GET the lean path (`plain_get`) can carry; None: aiohttp's path."""
        if self._method != "GET" or self._data is not None:
            return None
        lean = pool.route
        if lean is None:  # the host's first GET: is there a lean route to it?
            host = self._host
            proxied = self._transport.proxies.for_origin(host.origin) is not None
            lean = pool.route = route(pool.session, host.origin, host.token, proxied) or False
        return lean.head(self._target, headers) if isinstance(lean, Route) else None

    async def _end(self, exc: BaseException | None) -> None:
        # Each step runs even if one before it raised (a bug, an aiohttp unlike the one we
        # know): a connection or a pool slot never given back is one that every later
        # request to this host waits for, once the host's limit of them is held.
        received = None
        try:
            received = self._drop_response()
        finally:
            try:
                if self._headed:  # the circuit hears how an answer whose head came ended
                    origin = self._host.origin
                    self._transport.circuits.ended(origin, self._headed, exc, received or 0)
                if self._exchange is not None:
                    self._exchange.end(exc, received)
            finally:
                pool, self._pool = self._pool, None
                if pool is not None and self._transport.hosts.release(pool, self):
                    await self._transport.hosts.close_released(pool)

    def _drop_response(self) -> int | None:
        """Give the answer's connection back (or close it); the bytes it received, if any."""
        response, self._response = self._response, None
        if response is None:
            return None
        self._transport.reading.discard(response)
        try:
            assert self._streaming is not None
            return self._streaming.received  # as they came, coded or not
        finally:
            # An unread body means the connection cannot be reused: drop it at once rather
            # than leave it half-read (cancellation included). A body read below the parser
            # (`_ring`) never leaves aiohttp's reader at its end.
            if response.content.at_eof():
                response.release()
            else:
                response.close()
