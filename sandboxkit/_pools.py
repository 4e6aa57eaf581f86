"""Sandbox host pools: one session per (host, token), bounded in number, closed when idle.

`HostPools` is an LRU bounded by `Limits.max_sandbox_hosts`; a pool is closed after
`host_idle_seconds` unused, or when the bound needs its place, and never under a request in
flight. Each pool carries its host's AIMD window (`_retry.ConcurrencyWindow`): a 429 from
that host halves it, successes grow it back, so one throttled sandbox slows only itself.

The session type is a parameter: the transport uses aiohttp's, tests use fakes; nothing here
imports aiohttp (httpcore's small layered pool).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, Protocol, TypeVar

import anyio
import attrs

from ._config import Limits
from ._retry import ConcurrencyWindow

__all__ = ["HostKey", "HostPool", "HostPools", "Session"]


class Session(Protocol):
    """What a pool needs of its session: to be closed."""

    async def close(self) -> None: ...


S = TypeVar("S", bound=Session)


@attrs.frozen
class HostKey:
    """One sandbox host as a pool knows it: its origin and the token its session carries.

    A pool per (origin, token): a handle with another token never shares a session. The
    token never shows in a repr, so no frame or log that holds a key shows it either.
    """

    origin: str
    token: str = attrs.field(repr=False)


@attrs.define(eq=False)
class HostPool(Generic[S]):
    """One sandbox host's session, its AIMD concurrency window, and how busy it is."""

    key: HostKey
    session: S
    window: ConcurrencyWindow
    limiter: anyio.CapacityLimiter
    in_flight: int = 0
    last_used: float = 0.0
    closing: bool = False

    @property
    def origin(self) -> str:
        """`scheme://host[:port]` of the sandbox."""
        return self.key.origin

    def observe(self, status: int) -> None:
        """Feed an answer's status to the window: a 429 halves it, a success grows it."""
        if status == 429:
            self.on_throttled()
        elif 200 <= status < 300:
            self.on_success()

    def on_throttled(self) -> None:
        """A 429 from this host: halve its window (others are untouched)."""
        self.limiter.total_tokens = self.window.on_throttled()

    def on_success(self) -> None:
        """A success from this host: let its window grow again."""
        allowed = self.window.on_success()
        if allowed != self.limiter.total_tokens:
            self.limiter.total_tokens = allowed


class HostPools(Generic[S]):
    """An LRU of sandbox host pools, bounded, closed when idle, never under a request."""

    def __init__(
        self,
        limits: Limits,
        make_session: Callable[[HostKey], S],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
    ) -> None:
        self._limits = limits
        self._make_session = make_session
        self._clock = clock
        self._sleep = sleep
        # Closes idle pools while any are open, even when no request comes to sweep them
        # (a batch over deleted sandboxes kept their sockets until aiohttp's keep-alive
        # timed out); it ends when the last pool is closed and starts again with the next.
        self._timer: asyncio.Task[None] | None = None
        self._pools: OrderedDict[HostKey, HostPool[S]] = OrderedDict()
        self._released = asyncio.Condition()
        self._waiting = 0

    def __len__(self) -> int:
        return len(self._pools)

    def __contains__(self, key: object) -> bool:
        return key in self._pools

    def get(self, key: HostKey) -> HostPool[S] | None:
        """The live pool for this host and token, without touching the LRU order."""
        return self._pools.get(key)

    @contextlib.asynccontextmanager
    async def lease(self, key: HostKey) -> AsyncIterator[HostPool[S]]:
        """Hold one of the host's request slots for the duration of one request."""
        pool = await self._checkout(key)
        borrower = object()
        try:
            await pool.limiter.acquire_on_behalf_of(borrower)
        except BaseException:
            await self._checkin(pool)
            raise
        try:
            yield pool
        finally:
            pool.limiter.release_on_behalf_of(borrower)
            await self._checkin(pool)

    async def _checkout(self, key: HostKey) -> HostPool[S]:
        while True:
            pool = self._pools.get(key)
            if pool is not None and not pool.closing:
                self._pools.move_to_end(key)
                break
            if len(self._pools) < self._limits.max_sandbox_hosts:
                # No await between this check and the insert: the bound cannot be overrun.
                pool = self._open(key)
                break
            victim = self._pop_least_recent_idle()
            if victim is not None:
                await victim.session.close()
                continue  # others may have taken the freed place meanwhile: check again
            # Every pool is busy: wait for a request to finish rather than exceed the bound.
            self._waiting += 1
            try:
                async with self._released:
                    await self._released.wait()
            finally:
                self._waiting -= 1
        pool.in_flight += 1
        pool.last_used = self._clock()
        return pool

    async def _checkin(self, pool: HostPool[S]) -> None:
        pool.in_flight -= 1
        pool.last_used = self._clock()
        if pool.closing and pool.in_flight == 0:
            await pool.session.close()
        # Only a pool with nothing in flight can make room for a waiting host, and only
        # waiters need waking: skipping the rest keeps 2000 concurrent requests cheap.
        if pool.in_flight == 0:
            await self._wake_waiters()

    async def _wake_waiters(self) -> None:
        if self._waiting:
            async with self._released:
                self._released.notify_all()

    def _open(self, key: HostKey) -> HostPool[S]:
        per_host = self._limits.per_host_connections
        pool = HostPool(
            key=key,
            session=self._make_session(key),
            window=ConcurrencyWindow(maximum=per_host),
            limiter=anyio.CapacityLimiter(per_host),
            last_used=self._clock(),
        )
        self._pools[key] = pool
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._close_idle_in_time())
        return pool

    async def _close_idle_in_time(self) -> None:
        # Checking every pool on every checkout made each request O(hosts): a third of the
        # client CPU with 1,000 hosts (benchmarks/run.py --case hosts). Idle pools need
        # closing only to within a tenth of host_idle_seconds (at most a second) late.
        period = min(1.0, self._limits.host_idle_seconds / 10)
        while self._pools:
            await self._sleep(period)
            await self.close_idle()

    def _pop_least_recent_idle(self) -> HostPool[S] | None:
        for key, pool in self._pools.items():
            if pool.in_flight == 0:
                del self._pools[key]
                return pool
        return None

    async def close_idle(self) -> int:
        """Close pools unused for `host_idle_seconds`; returns how many were closed."""
        cutoff = self._clock() - self._limits.host_idle_seconds
        idle = [p for p in self._pools.values() if p.in_flight == 0 and p.last_used <= cutoff]
        closed = 0
        for pool in idle:
            # Between our awaits another task may have used or replaced this pool: re-check.
            if self._pools.get(pool.key) is pool and pool.in_flight == 0:
                del self._pools[pool.key]
                await pool.session.close()
                closed += 1
        return closed

    async def discard(self, key: HostKey) -> None:
        """Drop one host's pool: now if idle, else once its last request ends."""
        pool = self._pools.pop(key, None)
        if pool is None:
            return
        pool.closing = True
        if pool.in_flight == 0:
            await pool.session.close()
        await self._wake_waiters()  # its place in the LRU is free now

    async def aclose(self) -> None:
        """Close every pool."""
        timer, self._timer = self._timer, None
        if timer is not None and not timer.done():
            timer.cancel()
            await asyncio.wait([timer])  # its cancellation is not ours to raise
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            pool.closing = True
            await pool.session.close()
