"""What the client keeps for each sandbox host: its pool of connections (with the host's 429
window or its found concurrency, and its pause after a 429, `pacing.HostPause`) and its
circuit. Nothing here imports aiohttp: the session type is a parameter (aiohttp's; fakes in
tests).

**Pools** (`HostPools`): one session per (host, token), bounded by sockets, closed when idle.
The bound is `Limits.max_sandbox_connections`, in sockets. Each pool is charged one for each
request it ever ran at once (its connector opens a connection only when none of its own is
idle). Pools stay, keep-alives and all, while their charges fit; past the budget a request
closes the least recently used idle pool (all its sockets) or waits for one: a pool with a
request in flight is never closed. A pool unused for `host_idle_seconds` is closed by a timer.
Waiting requests are served in arrival order across hosts (one FIFO queue), so a busy host
cannot starve others: once none of its sockets is in use its session is closed for an older
request of another host (its own waiting requests go on with a fresh one). Each pool carries
its host's AIMD window (`retry.ConcurrencyWindow`): a 429 from that host halves it,
successes grow it back, so one throttled sandbox slows only itself. While hosts find their
concurrency (`Limits.found_host_concurrency`: always, or while a batch that finds its own
runs, `find_concurrency`), a `pacing.ConcurrencyController` sizes the pool's requests at once
instead, fed by each request's bytes and time (`transferred`) and its 429s and 503s.

**Circuits** (`Circuits`): the circuit of every host a client has seen fail, and the events
calls wait on. The transport reports what each request met (`heard_from`, `answered`,
`failed`); `Calls` asks before each try whether the host may be sent to
(`retry.Circuit.admit`) and waits if not. Only hosts with failures on record have a circuit:
a healthy host costs two dict operations a request. Only a host that may be down has its
failures counted by a circuit (`may_be_down`): one that answered this client before, or a
sandbox host that never did while its domain is down (others of the domain fail and none
answers): a sandbox first contacted during an outage waits it out as the others do. A host
that never answered while its domain answers, or of a domain that never answered (a wrong
sandbox key, domain, port or base URL, a server not started), is a mistake to report, not an
outage to wait out: its failures open no circuit and are counted as attempts. Which of the
two a never-answered host's failure is, is decided again at each failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from typing import Any, Generic, Protocol, TypeVar

import anyio
import attrs

from .._core.answers import parse_retry_after
from .._core.options import Limits, RetryPolicy
from .._core.pacing import GROW, PAUSE, START, ConcurrencyController, HostPause, PaceEvent
from .._core.protocol import OUTAGE_STATUSES
from .._core.retry import Circuit, ConcurrencyWindow, is_outage
from ..errors import SandboxKitError

__all__ = [
    "DOMAIN_DOWN_FOR",
    "NEWCOMERS_DOWN",
    "Circuits",
    "HostKey",
    "HostPool",
    "HostPools",
    "PaceListener",
    "PacedListener",
    "Session",
    "may_be_down",
]


class Session(Protocol):
    """What a pool needs of its session: to be closed (all its sockets with it)."""

    async def close(self) -> None: ...


S = TypeVar("S", bound=Session)

PaceListener = Callable[[str, int, float, "PaceEvent | None"], object]
"""Told of every answer's head on a sandbox host: (origin, status, seconds the head took,
the pause it began or None). A batch listens while it runs (its found concurrency)."""

PacedListener = Callable[[PaceEvent], object]
"""Told of every change of a host's found concurrency (`Limits.found_host_concurrency`)."""


@attrs.frozen
class HostKey:
    """One sandbox host as a pool knows it: its origin and the token its requests carry.

    A pool per (origin, token): a handle with another token never shares a session. The
    token never shows in a repr, so no frame or log that holds a key shows it either.
    """

    origin: str
    token: str = attrs.field(repr=False)


@attrs.define(eq=False)
class HostPool(Generic[S]):
    """One sandbox host's session, its AIMD concurrency window (or found concurrency), and
    how busy it is.

    `in_flight` counts leases begun (waiting ones too), `active` those holding a slot of
    the window, and `sockets` the sockets charged to this pool: its session never has more
    open (`HostPools` keeps their sum within the budget).
    """

    key: HostKey
    session: S
    window: ConcurrencyWindow
    limiter: anyio.CapacityLimiter
    in_flight: int = 0
    active: int = 0
    sockets: int = 0
    # This host's leases waiting for room for one more socket (`HostPools` serves them).
    waiters: dict[asyncio.Future[HostPool[Any] | None], None] = attrs.field(factory=dict)
    last_used: float = 0.0
    closing: bool = False
    pause: HostPause = attrs.field(factory=HostPause)  # a 429 pauses every call to the host
    # `Limits.found_host_concurrency`: the host's requests at once, found from how they end
    # (the limiter's size; `window` is then not used). None: the window alone.
    found: ConcurrencyController | None = None
    route: Any = None  # the transport's, made of `session` (dropped with it); never read here

    @property
    def origin(self) -> str:
        """`scheme://host[:port]` of the sandbox."""
        return self.key.origin

    @property
    def waiting(self) -> int:
        """Requests of this host waiting for room for one more socket."""
        return len(self.waiters)

    def observe(self, status: int) -> None:
        """Feed an answer's status to the window: a 429 halves it, a success grows it."""
        if self.found is not None:
            return  # the found concurrency hears it instead (`HostPools.headed`)
        if status == 429:
            self.on_throttled()
        elif 200 <= status < 300 and self.window.size < self.window.maximum:
            self.on_success()  # (a window at its maximum, the usual case, has nowhere to go)

    def on_throttled(self) -> None:
        """A 429 from this host: halve its window (others are untouched)."""
        self.limiter.total_tokens = self.window.on_throttled()

    def on_success(self) -> None:
        """A success from this host: let its window grow again."""
        allowed = self.window.on_success()
        if allowed != self.limiter.total_tokens:
            self.limiter.total_tokens = allowed


@functools.cache
def _limiter_class() -> Callable[[int], anyio.CapacityLimiter]:
    # anyio.CapacityLimiter() looks up the async library for each one made: ~20 us a host.
    return type(anyio.CapacityLimiter(1))


class HostPools(Generic[S]):
    """Sandbox host pools in LRU order, their sockets within one budget, closed when idle.

    `opened` and `evicted` count pools made and pools' sockets closed to make room (the
    benchmarks and tests read them).
    """

    def __init__(
        self,
        limits: Limits,
        make_session: Callable[[HostKey], S],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
        pause_policy: RetryPolicy | None = None,
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
        self._charged = 0  # sockets charged to every pool not yet closed (closing ones too)
        # Requests that found the budget spent, in arrival order across hosts: only the
        # oldest is served, handed a socket (None: counted in its pool's `active`) or a pool
        # no request is using, to close for one; never all woken at once (waking hundreds
        # of waiters per release cost more than the evictions).
        self._waiters: dict[asyncio.Future[HostPool[Any] | None], HostPool[S]] = {}
        self._spare = 0  # sockets being freed that no request closing a pool keeps
        self.opened = 0
        self.evicted = 0
        # How long a 429 pauses its host: the client's policy (a call's own policy decides
        # its own retries, not how long every call to the host waits).
        self.pause_policy = pause_policy or RetryPolicy()
        # The pauses' own clock and sleep, apart from the idle timer's: a test that runs the
        # retry loop on virtual time puts the pauses on it too, so a call that waited out a
        # Retry-After there finds its host's pause over.
        self.pause_clock: Callable[[], float] = clock
        self.pause_sleep: Callable[[float], Awaitable[object]] = sleep
        self.listeners: list[PaceListener] = []
        self.paced: list[PacedListener] = []
        # Whether hosts find their concurrency now (`find_concurrency`), and how many batches
        # that find theirs run.
        self._finding = limits.found_host_concurrency is True
        self._batches_finding = 0

    def headed(
        self, pool: HostPool[S], status: int, retry_after: str | None, seconds: float
    ) -> PaceEvent | None:
        """An answer's head came from `pool`'s host in `seconds`: move its window, pause
        the host on a 429 (or a 503 with `Retry-After`), tell the listeners. Returns the
        pause this began, if any (said once, at WARNING)."""
        pool.observe(status)
        event = None
        if status == 429 or (status == 503 and retry_after is not None):
            policy = self.pause_policy
            honor = policy.honor_retry_after
            now = self.pause_clock()
            length = pool.pause.throttled(
                now,
                parse_retry_after(retry_after, time.time()),
                first=policy.initial_backoff if honor else 0.0,
                cap=policy.max_retry_after if honor else 0.0,
            )
            if length is not None:
                event = PaceEvent(PAUSE, now, pool.window.allowed, pool.origin, length, str(status))
                logger.warning(
                    "%s answered %d%s: every call to it waits %.2fs",
                    pool.origin,
                    status,
                    "" if retry_after is None else f" (Retry-After: {retry_after})",
                    length,
                )
        elif 200 <= status < 300 and pool.pause.backoff:
            pool.pause.succeeded()
        if pool.found is not None and status in (429, 503):
            self._found(pool, pool.found.congested(self.pause_clock(), str(status)))
        for listener in self.listeners:
            listener(pool.origin, status, seconds, event)
        return event

    def transferred(self, pool: HostPool[S], size: int | None, seconds: float) -> PaceEvent | None:
        """A request to a host whose concurrency is found ended: it moved `size` bytes in
        `seconds` from its send to its end, or (None) failed as a host busy or going away
        fails. Returns the change of the host's concurrency this made, if any."""
        found = pool.found
        if found is None:
            return None
        now = self.pause_clock()
        if size is None:
            return self._found(pool, found.congested(now, "failure"))
        return self._found(pool, found.completed(now, size, seconds))

    def _found(self, pool: HostPool[S], event: PaceEvent | None) -> PaceEvent | None:
        """Apply a change of the host's found concurrency: its limiter, a DEBUG line, the
        listeners told (the event named by its host)."""
        if event is None or pool.found is None:
            return None
        pool.limiter.total_tokens = pool.found.limit
        event = attrs.evolve(event, host=pool.origin)
        logger.debug(
            "%s: requests at once %s to %d (%s)",
            pool.origin,
            "grew" if event.kind == GROW else "shrank",
            event.concurrency,
            event.reason,
        )
        for listener in self.paced:
            listener(event)
        return event

    async def wait_paused(self, pool: HostPool[S]) -> None:
        """Wait while the host is paused (a pause may be extended while waiting)."""
        while (left := pool.pause.remaining(self.pause_clock())) > 0:
            await self.pause_sleep(left)

    def __len__(self) -> int:
        return len(self._pools)

    @property
    def sockets(self) -> int:
        """Sockets charged to open pools: an upper bound on their open sockets."""
        return self._charged

    def get(self, key: HostKey) -> HostPool[S] | None:
        """The live pool for this host and token, without touching the LRU order."""
        return self._pools.get(key)

    @contextlib.asynccontextmanager
    async def lease(self, key: HostKey) -> AsyncIterator[HostPool[S]]:
        """Hold one of the host's request slots, and room for its socket, for one request."""
        borrower = object()
        pool = self.lease_now(key, borrower) or await self.lease_wait(key, borrower)
        try:
            yield pool
        finally:
            if self.release(pool, borrower):
                await self.close_released(pool)

    def lease_now(self, key: HostKey, borrower: object) -> HostPool[S] | None:
        """`lease`'s usual case without a coroutine: a free slot of the host's window and
        a socket of its pool (or of the budget) taken at once for `borrower`; None, with
        nothing held, when the request must wait (`lease_wait`)."""
        pool = self._checkout(key)
        try:
            pool.limiter.acquire_on_behalf_of_nowait(borrower)
        except anyio.WouldBlock:
            pool.in_flight -= 1  # nothing noticed it: no await since `_checkout`
            return None
        if pool.active < pool.sockets and not self._waiters:
            pool.active += 1  # one of its sockets is free and no request queued before it
            return pool
        if pool.active >= pool.sockets and self._charged < self._limits.max_sandbox_connections:
            pool.sockets += 1
            self._charged += 1
            pool.active += 1
            return pool
        pool.limiter.release_on_behalf_of(borrower)
        pool.in_flight -= 1
        return None

    async def lease_wait(self, key: HostKey, borrower: object) -> HostPool[S]:
        """Take the host's slot and socket for `borrower`, waiting for either as needed."""
        pool = self._checkout(key)
        try:
            try:
                # A free slot is taken without a yield: anyio's `acquire` always passes
                # through the loop once, a pass per request for nothing.
                pool.limiter.acquire_on_behalf_of_nowait(borrower)
            except anyio.WouldBlock:
                await pool.limiter.acquire_on_behalf_of(borrower)
            try:
                if pool.active < pool.sockets and not self._waiters:
                    pool.active += 1
                else:
                    await self._take_socket(pool)
            except BaseException:
                pool.limiter.release_on_behalf_of(borrower)
                raise
        except BaseException:
            if self._checkin(pool):
                await self.close_released(pool)
            raise
        return pool

    def release(self, pool: HostPool[S], borrower: object) -> bool:
        """End `borrower`'s lease of `pool`; True when the pool must now be closed
        (`close_released`): it was discarded while this request ran."""
        self._release_socket(pool)
        pool.limiter.release_on_behalf_of(borrower)
        return self._checkin(pool)

    async def close_released(self, pool: HostPool[S]) -> None:
        """Close a discarded pool whose last request has ended."""
        await self._close(pool)

    def _checkout(self, key: HostKey) -> HostPool[S]:
        pool = self._pools.get(key)
        if pool is None:
            pool = self._open(key)
        else:
            self._pools.move_to_end(key)
        if self._finding and pool.found is None:
            self._find(pool)  # a host made before hosts began to find theirs
        pool.in_flight += 1
        pool.last_used = self._clock()
        return pool

    def find_concurrency(self, on: bool) -> None:
        """A batch that finds its concurrency begins (`on`) or ends: while any runs, every
        host finds its own (`Limits.found_host_concurrency` None). With True they always
        do, with False never."""
        always = self._limits.found_host_concurrency
        if always is not None:
            return
        self._batches_finding += 1 if on else -1
        self._finding = self._batches_finding > 0
        if not self._finding:
            for pool in self._pools.values():  # back to the window, as it was left
                if pool.found is not None:
                    pool.found = None
                    pool.limiter.total_tokens = pool.window.allowed

    def _find(self, pool: HostPool[S]) -> None:
        """Have a host find its concurrency from now on: from 4, or from its window if a
        429 left it smaller."""
        pool.found = ConcurrencyController(
            maximum=self._limits.per_host_connections, limit=min(START, pool.window.allowed)
        )
        pool.limiter.total_tokens = pool.found.limit

    async def _take_socket(self, pool: HostPool[S]) -> None:
        """Count one more request of `pool` in `active`, charging it a socket if needed:
        from the budget, else by closing an unused pool (`_pop_unused`), else in line."""
        budget = self._limits.max_sandbox_connections
        queued = self._oldest() is not None  # then what it could take is an older one's
        while True:
            if not queued:
                if pool.active < pool.sockets:
                    pool.active += 1
                    return
                if self._charged < budget:
                    pool.sockets += 1
                    self._charged += 1
                    pool.active += 1
                    return
                # Sockets being freed that no waiter counts on yet will be handed to
                # waiters in turn: a newcomer waits for one rather than close one more pool.
                if self._spare <= len(self._waiters):
                    victim = self._pop_unused()
                    if victim is not None:
                        if await self._close(victim, keep=pool):
                            return
                        continue  # it held no socket, or others took them: look again
            queued = False
            handed = await self._wait(pool)
            if handed is None:
                return  # a socket was handed over: counted in `active` for this request
            if await self._close(handed, keep=pool):
                return

    async def _wait(self, pool: HostPool[S]) -> HostPool[S] | None:
        """Wait in line to be handed a socket (None) or a pool to close for one."""
        waiter: asyncio.Future[HostPool[Any] | None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = pool
        pool.waiters[waiter] = None
        try:
            handed: HostPool[S] | None = await waiter
        except BaseException:
            self._waiters.pop(waiter, None)
            pool.waiters.pop(waiter, None)
            if waiter.done() and not waiter.cancelled():  # served, then cancelled: pass it on
                victim = waiter.result()
                if victim is None:
                    self._release_socket(pool)
                elif not self._hand(victim):
                    await self._close(victim)  # no one waits for it: its sockets are freed
            else:
                self._grant()  # it may have held up those behind it
            raise
        return handed

    def _oldest(self) -> asyncio.Future[HostPool[Any] | None] | None:
        """The oldest waiter still waiting (cancelled ones on their way out are dropped)."""
        waiters = self._waiters
        while waiters:
            waiter = next(iter(waiters))
            if not waiter.done():
                return waiter
            waiters.pop(waiter).waiters.pop(waiter, None)
        return None

    def _hand(self, victim: HostPool[S]) -> bool:
        """Hand a pool taken out of use to the oldest waiter, to close for its socket."""
        waiter = self._oldest()
        if waiter is None:
            return False
        self._waiters.pop(waiter).waiters.pop(waiter, None)
        waiter.set_result(victim)
        return True

    def _release_socket(self, pool: HostPool[S]) -> None:
        """A request of `pool` is done with its socket: the oldest waiter's if of `pool`."""
        pool.active -= 1
        if self._waiters:
            self._grant()

    def _grant(self) -> None:
        """Serve waiters in arrival order while the oldest has a socket at once (an idle one
        of its pool's, or the budget's); one that has not holds up those behind it."""
        budget = self._limits.max_sandbox_connections
        waiters = self._waiters
        while waiters:
            waiter, pool = next(iter(waiters.items()))
            if not waiter.done():
                if pool.active >= pool.sockets:
                    if self._charged >= budget:
                        return
                    pool.sockets += 1
                    self._charged += 1
                pool.active += 1
                waiter.set_result(None)
            del waiters[waiter]
            pool.waiters.pop(waiter, None)

    def _checkin(self, pool: HostPool[S]) -> bool:
        """One request of `pool` ended; True when the pool is to be closed now."""
        pool.in_flight -= 1
        pool.last_used = self._clock()
        if pool.closing:
            return pool.in_flight == 0
        if self._waiters and not pool.active and pool.sockets and self._oldest() is not None:
            # None of its sockets is in use, and the oldest waiter (another host's, or it
            # would have taken one) needs one: this pool's are closed for it.
            self._hand(self._take_out_of_use(pool))
        return False

    def _take_out_of_use(self, pool: HostPool[S]) -> HostPool[S]:
        """A pool with no socket in use, to close (`_close`): an idle one leaves the LRU; one
        with requests in line goes on with a new session, the old one and its sockets here."""
        if pool.sockets:
            self.evicted += 1
        if pool.in_flight == 0:
            del self._pools[pool.key]
            return pool
        old = attrs.evolve(pool, in_flight=0, active=0, waiters={}, closing=True)
        pool.session = self._make_session(pool.key)
        pool.route = None  # made of the old session: its connector is about to be closed
        pool.sockets = 0
        return old

    async def _close(self, pool: HostPool[S], keep: HostPool[S] | None = None) -> bool:
        """Close a pool taken out of the LRU; its sockets are free once its session is shut.

        With `keep`, one of them is charged to that pool (for the request that closed this
        one; True if it was); the rest go to waiters.
        """
        pool.closing = True
        freed, pool.sockets = pool.sockets, 0
        kept = 1 if keep is not None and freed else 0
        self._spare += freed - kept
        closed = False
        try:
            await pool.session.close()
            closed = True
        finally:
            self._spare -= freed - kept
            self._charged -= freed
            if closed and keep is not None and kept:
                keep.sockets += 1
                keep.active += 1
                self._charged += 1
            self._grant()
            # A pool that went unused while no one waited was offered to no one.
            if not self._spare and self._oldest() is not None and (victim := self._pop_unused()):
                self._hand(victim)
        return closed and bool(kept)

    def _open(self, key: HostKey) -> HostPool[S]:
        per_host = self._limits.per_host_connections
        pool = HostPool(
            key=key,
            session=self._make_session(key),
            window=ConcurrencyWindow(maximum=per_host),
            limiter=_limiter_class()(per_host),
            last_used=self._clock(),
        )
        if self._finding:
            self._find(pool)
        self._pools[key] = pool
        self.opened += 1
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

    def _pop_unused(self) -> HostPool[S] | None:
        """The least recently used idle pool, else one with no socket in use, or None."""
        unused = None
        for pool in self._pools.values():
            if pool.in_flight == 0:
                unused = pool
                break
            if unused is None and pool.active == 0 and pool.sockets:
                unused = pool
        return None if unused is None else self._take_out_of_use(unused)

    async def close_idle(self) -> int:
        """Close pools unused for `host_idle_seconds`; returns how many were closed."""
        cutoff = self._clock() - self._limits.host_idle_seconds
        idle = [p for p in self._pools.values() if p.in_flight == 0 and p.last_used <= cutoff]
        closed = 0
        for pool in idle:
            # Between our awaits another task may have used or replaced this pool: re-check.
            if self._pools.get(pool.key) is pool and pool.in_flight == 0:
                del self._pools[pool.key]
                await self._close(pool)
                closed += 1
        return closed

    async def discard(self, key: HostKey) -> None:
        """Drop one host's pool: now if idle, else once its last request ends."""
        pool = self._pools.pop(key, None)
        if pool is None:
            return
        pool.closing = True
        if pool.in_flight == 0:
            await self._close(pool)

    async def aclose(self) -> None:
        """Close every pool."""
        timer, self._timer = self._timer, None
        if timer is not None and not timer.done():
            timer.cancel()
            await asyncio.wait([timer])  # its cancellation is not ours to raise
        pools = list(self._pools.values())
        self._pools.clear()
        for pool in pools:
            await self._close(pool)


# A child of "sandboxkit": a host going down, being waited for and answering again are what
# explain a long silence, so a program (the CLI) may show these alone on screen.
logger = logging.getLogger("sandboxkit.hosts")

# Hosts that failed now and then but never went down are forgotten past this many, so a
# batch over thousands of short-lived sandboxes keeps no record of each.
_KEPT = 4096
# Hosts remembered as having answered; past this many the oldest half is forgotten (a
# forgotten host that goes down fails after its attempts instead of being waited for). The
# same bound holds the domains (`_site`) of those hosts, and what each of them met lately.
_HEARD = 65536
# How long a failure of a domain's host, with no answer from the domain since, tells of the
# domain (`may_be_down`).
DOMAIN_DOWN_FOR = 30.0
# Other hosts of a domain that never answered, failing with no answer from it between, that
# tell a host of it that never answered either that the domain is down (`may_be_down`).
NEWCOMERS_DOWN = 2


def may_be_down(
    answered: bool,
    sibling_failed_at: float | None,
    newcomers_failed_at: Collection[float],
    now: float,
) -> bool:
    """Whether a host's outage failure may say it is down (its circuit counts it; calls wait
    while that is open) rather than that it is not there at all (the failure is an attempt).

    Args:
        answered: the host itself has sent this client a head other than 502/503.
        sibling_failed_at: when a host of its domain (`_site`) that answered this client
            last met an outage failure, if none of the domain's hosts has answered since.
        newcomers_failed_at: when each other host of its domain that never answered last met
            one, if none of the domain's hosts has answered since (its latest few).
        now: the clock's time.

    A host that answered may be down: it was there. One that never answered may be down only
    while its domain is, that is while other hosts of it fail and none of it answers: a host
    that answered before fails, or `NEWCOMERS_DOWN` others that never answered either (a
    batch whose sandboxes are each contacted once has only such hosts in flight when an
    outage begins). One wrong key is one host, so it, or two typed at once, is not enough;
    three failing together with nothing of their domain answering between look like an
    outage's first failures and are waited for as one (up to `max_stall`): the price of
    such a batch not losing its jobs as an outage begins.
    The domain answering says it is up, so a host of it that fails all the same is not there
    (a wrong sandbox key, a sandbox gone): a mistake that costs the policy's attempts, not
    `max_stall`. A domain that never answered (nothing is known of it) is never down.

    Only failures at most `DOMAIN_DOWN_FOR` old tell: no news of the domain for longer says
    nothing of it now, and a wrong key waited for because a sibling had just failed is not
    waited for past that. During an outage that anything waits out the news stays fresh:
    the hosts calls wait for are probed every 2 s at most, a probe that meets a silent host
    failing within the 10 s connect timeout. A host's own failures are never news for it.

    A failure, not an open circuit, is the news: a sandbox first contacted as an outage
    begins must find its domain down while its own attempts last, not after its siblings'
    circuits have opened. And it is decided at each failure, not once: the first failure of
    a sandbox first contacted may come before any other's (an attempt), its next after (the
    domain is down: it waits as they do); a wrong key waited for while its domain looked
    down stops being waited for at its next failure once the domain answers.
    """
    if answered:
        return True
    if sibling_failed_at is not None and now - sibling_failed_at <= DOMAIN_DOWN_FOR:
        return True
    return sum(now - at <= DOMAIN_DOWN_FOR for at in newcomers_failed_at) >= NEWCOMERS_DOWN


class _News:
    """What the hosts of one domain met since the last answer from any of them."""

    __slots__ = ("newcomers", "sibling_failed_at")

    def __init__(self) -> None:
        self.sibling_failed_at: float | None = None  # the latest failure of one that answered
        # The latest failure of each of the latest hosts that never answered, oldest first:
        # one more than `NEWCOMERS_DOWN`, so that each of them has as many others.
        self.newcomers: dict[str, float] = {}

    def failed(self, origin: str, answered: bool, now: float) -> None:
        if answered:
            self.sibling_failed_at = now
            return
        newcomers = self.newcomers
        newcomers.pop(origin, None)
        newcomers[origin] = now
        if len(newcomers) > NEWCOMERS_DOWN + 1:
            del newcomers[next(iter(newcomers))]


class Circuits:
    """Circuits by origin (the console's base URL, or a sandbox host's origin).

    `console`: the console's origin, no sibling of the sandbox hosts even under the same
    domain (`api.example.com`, `{key}.example.com`): its failures and answers, another
    service's, say nothing of theirs.
    """

    def __init__(self, clock: Callable[[], float], console: str | None = None) -> None:
        self.clock = clock
        self.console = console
        self._circuits: dict[str, Circuit] = {}
        self._changed: dict[str, anyio.Event] = {}
        self._heard: dict[str, None] = {}  # hosts that answered this client, oldest first
        self._sites: dict[str, None] = {}  # the domains (`_site`) of those, oldest first
        # What the hosts of those domains met since one of them last answered, if they
        # failed since: an answer from any host of a domain takes it out.
        self._news: dict[str, _News] = {}
        self._waited: set[str] = set()  # hosts down now that a call has said it waits for

    def get(self, origin: str) -> Circuit | None:
        """The host's circuit; None when it is closed with no failure on record."""
        return self._circuits.get(origin)

    def headed(self, origin: str, status: int, sent_at: float | None = None) -> int:
        """An answer's head came: 502/503 is an outage failure (0 is returned); any other
        status is returned, for `answered` or `ended` once its body flows or ends.
        `sent_at`: when its request was sent, on `clock` (see `failed`)."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer", sent_at)
            return 0
        self.heard_from(origin)
        return status

    def on_body(self, origin: str, status: int) -> Callable[[], None] | None:
        """What to call at the first body byte of a `status` answer (`headed`'s), so that
        a long body keeps no call waiting for the host until it ends; None: nothing waits."""
        if not status or origin not in self._circuits:
            return None
        return functools.partial(self.answered, origin, status)

    def heard_from(self, origin: str) -> None:
        """A head other than 502/503 came from the host: it was up, so from now on its
        failures may say it is down, and that its domain is (`may_be_down`)."""
        heard = self._heard
        if origin not in heard:
            _remember(heard, origin)
            if origin != self.console:
                _remember(self._sites, _site(origin))

    def ever_answered(self, origin: str) -> bool:
        """Whether the host itself has sent this client a head other than 502/503."""
        return origin in self._heard

    def siblings_answered(self, origin: str) -> bool:
        """Whether another host of its domain (`_site`; the console aside) has: a sandbox
        host that never answered is then likelier a wrong key than a wrong domain, and its
        failures, a wrong key or an outage beginning, are no retry storm (`Calls`)."""
        site = _site(origin)
        return site != origin and origin != self.console and site in self._sites

    def may_be_down(self, origin: str) -> bool:
        """Whether an outage failure of the host now may say it is down (`may_be_down`):
        it answered before, or its domain is down."""
        if origin in self._heard:
            return True
        if not self._news or origin == self.console:
            return False
        news = self._news.get(_site(origin))
        if news is None:
            return False
        others = [at for host, at in news.newcomers.items() if host != origin]
        return may_be_down(False, news.sibling_failed_at, others, self.clock())

    def answered(self, origin: str, status: int, sent_at: float | None = None) -> None:
        """The host answered with `status`, and (unless 502/503) its body flows: a head
        alone closes no circuit, since a host going away sends some and then closes."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer", sent_at)
            return
        if self._news and origin != self.console:  # its domain is up
            self._news.pop(_site(origin), None)
        circuit = self._circuits.pop(origin, None)  # closed and clean: the default again
        if circuit is not None and circuit.on_answer():
            logger.warning("%s answers again; calls waiting for it go on", origin)
            self._waited.discard(origin)
            self._notify(origin)

    def first_wait(self, origin: str) -> bool:
        """True for the first call to wait for the host in this outage (it says so)."""
        if origin in self._waited:
            return False
        self._waited.add(origin)
        return True

    def ended(
        self,
        origin: str,
        status: int,
        exc: BaseException | None,
        received: int,
        sent_at: float | None = None,
    ) -> None:
        """How an answer with a `status` head (not 502/503) ended, `received` body bytes
        in: a body that flowed, ended whole or was not wanted says the host is up; a cut
        before any body byte says it is going away. A cancellation says nothing."""
        if exc is None or (isinstance(exc, Exception) and received):
            self.answered(origin, status)
        elif isinstance(exc, SandboxKitError) and is_outage(exc):
            self.failed(origin, f"closed after the head of a {status} answer ({exc})", sent_at)
        elif isinstance(exc, Exception):  # ours (a disk write, a decode): the host answered
            self.answered(origin, status)

    def failed(self, origin: str, description: str, sent_at: float | None = None) -> None:
        """A request to the host met an outage failure (`retry.is_outage`). `sent_at`: when
        it was sent, on `clock` (a request sent before the host's circuit opened is no
        probe: `retry.Circuit`); None: unknown."""
        now = self.clock()
        answered = origin in self._heard
        if origin != self.console:
            self._tell_domain(origin, answered, now)
        if not answered and not self.may_be_down(origin):
            self._not_down(origin)  # a mistake, not an outage (see the module's docstring)
            return
        circuit = self._circuits.get(origin)
        if circuit is None:
            if len(self._circuits) >= _KEPT:
                self._forget_closed()
            circuit = self._circuits[origin] = Circuit()
        was_closed = circuit.closed
        # A host that never answered is down only as its domain is: that is known already,
        # so its circuit opens at its first failure, not after a threshold of its own.
        if circuit.on_outage(now, description, down=not answered, sent_at=sent_at):
            # Said at WARNING when the host goes down; each failed probe after that only at
            # DEBUG: a long outage would otherwise print a line a probe.
            logger.log(
                logging.WARNING if was_closed else logging.DEBUG,
                "%s looks down (%d failures in a row%s, last: %s); calls wait, probing it "
                "again in %.2fs",
                origin,
                circuit.failures,
                "" if answered else ", as do other hosts of its domain",
                description,
                circuit.cooldown,
            )
            self._notify(origin)

    def _tell_domain(self, origin: str, answered: bool, now: float) -> None:
        """Keep a host's outage failure as news of its domain, if that domain answered."""
        site = _site(origin)
        if site == origin or site not in self._sites:
            return  # an address or a one-label name (no siblings), or nothing known of it
        news = self._news.get(site)
        if news is None:
            if len(self._news) >= _HEARD:
                for old in list(self._news)[: _HEARD // 2]:
                    del self._news[old]
            news = self._news[site] = _News()
        news.failed(origin, answered, now)

    def _not_down(self, origin: str) -> None:
        """A host that never answered failed while its domain does not look down: calls
        waiting for it (while it did) stop, and count its failures as attempts."""
        circuit = self._circuits.pop(origin, None)
        if circuit is not None and not circuit.closed:
            logger.warning(
                "%s, which has not answered this client, still fails while its domain no "
                "longer looks down: not waited for any more, its failures count as attempts",
                origin,
            )
            self._waited.discard(origin)
            self._notify(origin)

    def abandon(self, origin: str, ticket: int) -> None:
        """The probe `ticket` ended without reporting (cancelled): another call may probe."""
        circuit = self._circuits.get(origin)
        if circuit is not None and circuit.abandon(ticket):
            self._notify(origin)

    def changed(self, origin: str) -> anyio.Event:
        """An event set at the host's next change of state (the probe's outcome)."""
        event = self._changed.get(origin)
        if event is None:
            event = self._changed[origin] = anyio.Event()
        return event

    def _notify(self, origin: str) -> None:
        event = self._changed.pop(origin, None)
        if event is not None:
            event.set()

    def _forget_closed(self) -> None:
        for origin in [o for o, c in self._circuits.items() if c.closed]:
            del self._circuits[origin]


def _remember(kept: dict[str, None], key: str) -> None:
    """Add `key` to `kept`, the oldest half forgotten first once it holds `_HEARD`."""
    if key not in kept:
        if len(kept) >= _HEARD:
            for old in list(kept)[: _HEARD // 2]:
                del kept[old]
        kept[key] = None


def _site(origin: str) -> str:
    """The service a host belongs to: its origin without the host name's first label
    (`https://{sandbox}.{domain}` is `https://{domain}`), so that the failures of a
    domain's other hosts can say a sandbox first contacted during an outage is down
    (`may_be_down`). An address, or a name of one label, is its own."""
    scheme, _, rest = origin.partition("://")
    _label, dot, parent = rest.partition(".")
    if not dot or rest.startswith("[") or rest.split(":")[0].replace(".", "").isdigit():
        return origin
    return f"{scheme}://{parent}"
