"""The client's budgets as they run: shared token buckets, and the waits they call for.

`Throttle` holds one bucket per limited rate of the whole client (download bytes, upload
bytes, requests) and, with `Budgets.per_host`, one per host and rate. Transfers draw from
them in grains (`budgets.grain_for`) as their bytes move (`StreamingResponse` for answers,
`paced` for an upload's body), and every request takes a token before it is sent
(`HostRequest`, `Transport.send`). The arithmetic is `_core/budgets.py`; this module only
sleeps.

Unlimited (the default) costs one attribute read per piece or request: the flags
`downloads`, `uploads` and `requests` say whether anything is limited, and nothing else is
looked at when they are False.

Per-host buckets are kept only while they are in use: when the throttle holds as many as
`budgets.next_sweep` allows, it drops the full ones (a full bucket is a fresh one), so a batch
over 100,000 sandboxes holds the buckets of the hosts drawing now, not one per host it ever
met.

`update` changes the budgets while transfers run: every waiter wakes at once and draws again
under the new rates (the old debt is forgiven), so a change takes effect within one grain.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterable, Callable

from .._core import operations as ops
from .._core.budgets import SWEEP_FLOOR, TokenBucket, byte_capacity, grain_for, next_sweep
from .._core.options import Budgets

__all__ = ["Direction", "Throttle", "paced"]

logger = logging.getLogger("sandboxkit")


class Direction(enum.Enum):
    """What a bucket meters."""

    DOWN = "download"
    UP = "upload"
    REQUESTS = "requests"


def _rate_of(budgets: Budgets, direction: Direction) -> float | None:
    if direction is Direction.DOWN:
        return budgets.download_bytes_per_second
    if direction is Direction.UP:
        return budgets.upload_bytes_per_second
    return budgets.requests_per_second


def _capacity(budgets: Budgets, direction: Direction, rate: float) -> float:
    if direction is Direction.REQUESTS:
        return float(budgets.request_burst)
    return byte_capacity(rate)


class Throttle:
    """The budgets one client shares among all its transfers and requests (one event loop's).

    Args:
        budgets: the limits at the start.
        clock: monotonic seconds (the tests' fake one, or `time.monotonic`).
    """

    __slots__ = (
        "_clock",
        "_hosts",
        "_sweep_at",
        "_total",
        "_waiters",
        "budgets",
        "downloads",
        "requests",
        "uploads",
    )

    def __init__(self, budgets: Budgets, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._total: dict[Direction, TokenBucket] = {}
        self._hosts: dict[tuple[str, Direction], TokenBucket] = {}
        self._sweep_at = SWEEP_FLOOR
        self._waiters: set[asyncio.Future[bool]] = set()
        self.budgets = Budgets()
        self.downloads = self.uploads = self.requests = False
        self._apply(budgets)
        if not budgets.unlimited and logger.isEnabledFor(logging.DEBUG):
            logger.debug("budgets in effect: %s", budgets.describe())

    def update(self, budgets: Budgets) -> None:
        """Use `budgets` from now on, for transfers already running too: waiters wake and
        draw again under the new rates. Call it on the client's loop (or before it has one).
        """
        self._apply(budgets)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("budgets in effect: %s", budgets.describe())

    def _apply(self, budgets: Budgets) -> None:
        now = self._clock()
        for direction in Direction:
            rate = _rate_of(budgets, direction)
            if rate is None:
                self._total.pop(direction, None)
            else:
                capacity = _capacity(budgets, direction, rate)
                bucket = self._total.get(direction)
                if bucket is None:
                    self._total[direction] = TokenBucket(rate, capacity, now)
                else:
                    bucket.retune(rate, capacity, now)
        host = budgets.per_host
        for key, bucket in list(self._hosts.items()):
            rate = None if host is None else _rate_of(host, key[1])
            if rate is None or host is None:
                del self._hosts[key]
            else:
                bucket.retune(rate, _capacity(host, key[1], rate), now)
        self.budgets = budgets
        self.downloads = self._limits(Direction.DOWN)
        self.uploads = self._limits(Direction.UP)
        self.requests = self._limits(Direction.REQUESTS)
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def _limits(self, direction: Direction) -> bool:
        host = self.budgets.per_host
        per_host = None if host is None else _rate_of(host, direction)
        return direction in self._total or per_host is not None

    def limit_of(self, operation: str) -> float | None:
        """The whole client's bandwidth limit for a transfer `operation` (its span shows it);
        None for no limit or another operation."""
        if operation == ops.FILES_DOWNLOAD:
            return self.budgets.download_bytes_per_second
        if operation == ops.FILES_UPLOAD:
            return self.budgets.upload_bytes_per_second
        return None

    def grain(self, direction: Direction) -> int:
        """The most bytes one draw takes now, by the lowest rate that applies."""
        rates = [_rate_of(self.budgets, direction)]
        if self.budgets.per_host is not None:
            rates.append(_rate_of(self.budgets.per_host, direction))
        known = [rate for rate in rates if rate is not None]
        return grain_for(min(known)) if known else 1 << 62

    def _buckets(self, origin: str, direction: Direction) -> list[TokenBucket]:
        buckets = []
        total = self._total.get(direction)
        if total is not None:
            buckets.append(total)
        host = self.budgets.per_host
        rate = None if host is None else _rate_of(host, direction)
        if rate is not None:
            assert host is not None
            bucket = self._hosts.get((origin, direction))
            if bucket is None:
                now = self._clock()
                if len(self._hosts) >= self._sweep_at:
                    self._sweep(now)
                bucket = TokenBucket(rate, _capacity(host, direction, rate), now)
                self._hosts[origin, direction] = bucket
            buckets.append(bucket)
        return buckets

    def _sweep(self, now: float) -> None:
        """Drop the per-host buckets that are full at `now`: a host that draws again gets a
        fresh one, which is the same. One in debt, or with a drawer waiting on it, is kept."""
        self._hosts = {key: b for key, b in self._hosts.items() if not b.full(now)}
        self._sweep_at = next_sweep(len(self._hosts))

    async def draw(self, origin: str, direction: Direction, amount: int) -> None:
        """Take `amount` (bytes, or 1 request) from the client's and `origin`'s buckets,
        waiting as long as they say; drawn again if the budgets change meanwhile."""
        while True:
            buckets = self._buckets(origin, direction)
            now = self._clock()
            wait = max((bucket.take(amount, now) for bucket in buckets), default=0.0)
            if wait <= 0 or not await self._sleep(wait):
                return

    async def _sleep(self, seconds: float) -> bool:
        """Sleep `seconds`; True if the budgets changed meanwhile (the wait is void)."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(seconds, _wake, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)


def _wake(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


async def paced(
    chunks: AsyncIterable[bytes | memoryview], throttle: Throttle, origin: str
) -> AsyncGenerator[bytes | memoryview, None]:
    """An upload's body chunks, each drawn from the upload budget in grains as it is handed
    on (a chunk is cut into views of a grain each while a limit is in effect)."""
    async for chunk in chunks:
        if not throttle.uploads:
            yield chunk
            continue
        view = memoryview(chunk).cast("B")
        start = 0
        while start < len(view):
            # The grain is read again for every draw: a limit changed mid-chunk applies at once.
            part = view[start : start + throttle.grain(Direction.UP)]
            if throttle.uploads:
                await throttle.draw(origin, Direction.UP, len(part))
            start += len(part)
            yield part
