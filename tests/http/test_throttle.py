"""The throttle's waiting: who waits on a fake clock, per-host isolation, and changes that
wake waiters. No sleeps: a waiter's state is read after the loop has turned."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

import sandboxkit
from sandboxkit._core.budgets import SWEEP_FLOOR
from sandboxkit._http.throttle import Direction, Throttle, paced

A, B = "http://a.sandbox.test", "http://b.sandbox.test"


class FakeClock:
    """Seconds that move only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TimedThrottle(Throttle):
    """A throttle whose waits are written down and end at once (no timer runs)."""

    def __init__(self, budgets: sandboxkit.Budgets, clock: FakeClock) -> None:
        super().__init__(budgets, clock)
        self.waits: list[float] = []

    async def _sleep(self, seconds: float) -> bool:
        self.waits.append(seconds)
        return False


def host(number: int) -> str:
    return f"http://s{number}.sandbox.test"


async def settled() -> None:
    """Let every ready callback and task step run (a woken waiter returns by then)."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_draw_within_the_budget_does_not_wait() -> None:
    """The bucket starts full: a first grain goes at once, the next one waits its time."""
    throttle = Throttle(sandboxkit.Budgets(download_bytes_per_second=1024), FakeClock())
    first = asyncio.ensure_future(throttle.draw(A, Direction.DOWN, 4096))
    await settled()
    assert first.done()
    second = asyncio.ensure_future(throttle.draw(A, Direction.DOWN, 4096))
    await settled()
    assert not second.done()  # 4 s at 1 KiB/s on a clock that does not move
    throttle.update(sandboxkit.Budgets())
    await settled()
    assert second.done()


@pytest.mark.parametrize(
    "new",
    [
        sandboxkit.Budgets(),  # the limit lifted
        sandboxkit.Budgets(download_bytes_per_second=10 << 30),  # raised far above
    ],
)
async def test_a_raised_limit_wakes_its_waiters_at_once(new: sandboxkit.Budgets) -> None:
    """Waiters with hours to go under the old limit draw again at once under the new one."""
    throttle = Throttle(sandboxkit.Budgets(download_bytes_per_second=1), FakeClock())
    waiters = [asyncio.ensure_future(throttle.draw(A, Direction.DOWN, 10_000)) for _ in range(8)]
    await settled()
    assert not any(w.done() for w in waiters)
    throttle.update(new)
    await settled()
    assert all(w.done() for w in waiters)


async def test_a_lowered_limit_forgives_the_debt_of_the_old_one() -> None:
    """A debt of 100 s under the old rate is dropped: the next draw pays only its own."""
    clock = FakeClock()
    throttle = Throttle(sandboxkit.Budgets(upload_bytes_per_second=1000), clock)
    bucket_debt = asyncio.ensure_future(throttle.draw(A, Direction.UP, 100_000))
    await settled()
    throttle.update(sandboxkit.Budgets(upload_bytes_per_second=100))
    await settled()
    assert not bucket_debt.done()  # it drew again: 100,000 bytes at 100/s from an empty bucket
    assert throttle._total[Direction.UP].tokens == -100_000
    bucket_debt.cancel()


async def test_per_host_budgets_isolate_hosts() -> None:
    """Host A in debt delays A only; with a client-wide limit too, B waits as well."""
    throttle = Throttle(
        sandboxkit.Budgets(per_host=sandboxkit.Budgets(download_bytes_per_second=1000)),
        FakeClock(),
    )
    a = asyncio.ensure_future(throttle.draw(A, Direction.DOWN, 50_000))
    b = asyncio.ensure_future(throttle.draw(B, Direction.DOWN, 500))
    await settled()
    assert not a.done() and b.done()
    assert sorted(origin for origin, _ in throttle._hosts) == [A, B]
    throttle.update(
        sandboxkit.Budgets(
            download_bytes_per_second=1000,
            per_host=sandboxkit.Budgets(download_bytes_per_second=1000),
        )
    )
    c = asyncio.ensure_future(throttle.draw(B, Direction.DOWN, 500))
    await settled()
    assert not c.done()  # the client's bucket is in A's debt now (A drew again)
    for task in (a, c):
        task.cancel()


@pytest.mark.parametrize(("burst", "at_once"), [(1, 1), (5, 5)])
async def test_requests_go_in_a_burst_then_at_the_rate(burst: int, at_once: int) -> None:
    """A fresh request bucket lets `request_burst` requests go at once, then paces."""
    clock = FakeClock()
    throttle = Throttle(sandboxkit.Budgets(requests_per_second=10, request_burst=burst), clock)
    tasks = [asyncio.ensure_future(throttle.draw(A, Direction.REQUESTS, 1)) for _ in range(20)]
    await settled()
    assert sum(t.done() for t in tasks) == at_once
    clock.now = 1.0  # 10 tokens refill the debt of 15 in part: the rest is forgiven
    throttle.update(sandboxkit.Budgets(requests_per_second=10, request_burst=burst))
    await settled()
    assert sum(t.done() for t in tasks) == at_once  # an empty bucket, not a new burst
    assert throttle._total[Direction.REQUESTS].tokens == -(20 - at_once)
    for task in tasks:
        task.cancel()


async def test_unlimited_flags_say_nothing_is_drawn() -> None:
    """With no budgets, every flag is False, which is all the hot path reads."""
    throttle = Throttle(sandboxkit.Budgets())
    assert (throttle.downloads, throttle.uploads, throttle.requests) == (False, False, False)
    throttle.update(sandboxkit.Budgets(per_host=sandboxkit.Budgets(requests_per_second=1)))
    assert (throttle.downloads, throttle.uploads, throttle.requests) == (False, False, True)


async def test_an_upload_body_is_cut_into_grains_only_while_limited() -> None:
    """`paced` hands chunks on whole without a limit, in grains (views) with one."""
    throttle = Throttle(sandboxkit.Budgets(), FakeClock())

    async def chunks() -> AsyncGenerator[bytes, None]:
        yield b"x" * (1 << 20)
        throttle.update(sandboxkit.Budgets(upload_bytes_per_second=1 << 40))
        yield b"y" * (1 << 20)

    sizes = [len(piece) async for piece in paced(chunks(), throttle, A)]
    assert sizes == [1 << 20] + [256 << 10] * 4


async def test_per_host_buckets_stay_bounded_over_many_hosts() -> None:
    """20,000 hosts drawing one after another, each refilled 10 ms after its draw, leave the
    throttle holding at most SWEEP_FLOOR buckets, and every first draw goes at once."""
    clock = FakeClock()
    per_host = sandboxkit.Budgets(requests_per_second=100, download_bytes_per_second=1 << 20)
    throttle = TimedThrottle(sandboxkit.Budgets(per_host=per_host), clock)
    most = 0
    for number in range(20_000):
        clock.now = number / 1000
        await throttle.draw(host(number), Direction.REQUESTS, 1)
        await throttle.draw(host(number), Direction.DOWN, 4096)
        most = max(most, len(throttle._hosts))
    assert most <= SWEEP_FLOOR
    assert throttle.waits == []


async def test_a_sweep_keeps_the_hosts_in_debt_and_their_limits_hold() -> None:
    """A sweep drops only full buckets: hosts that all drew just now are all kept, and a host
    that drew its burst right before a sweep still waits its rate's time after it."""
    clock = FakeClock()
    per_host = sandboxkit.Budgets(requests_per_second=10, request_burst=5)
    throttle = TimedThrottle(sandboxkit.Budgets(per_host=per_host), clock)
    busy = 3 * SWEEP_FLOOR  # all at t=0: none is full, so sweeps drop nothing
    for number in range(busy):
        await throttle.draw(host(number), Direction.REQUESTS, 5)
    assert len(throttle._hosts) == busy
    clock.now = 100.0  # every one of them full again
    for _ in range(5):
        await throttle.draw(host(0), Direction.REQUESTS, 1)  # host 0's burst, at once
    assert throttle.waits == []
    for number in range(busy, 2 * busy):  # new hosts: the next sweep comes on one of them
        await throttle.draw(host(number), Direction.REQUESTS, 1)
    kept = {origin for origin, _ in throttle._hosts}
    assert host(0) in kept and host(1) not in kept and len(kept) <= busy + 1
    await throttle.draw(host(0), Direction.REQUESTS, 1)  # its burst is spent: 1/10 s
    assert throttle.waits == pytest.approx([0.1])


async def test_a_sweep_keeps_a_bucket_a_drawer_waits_on() -> None:
    """A host whose drawer waits on its debt keeps its bucket through a sweep, and the
    waiter is not woken by it."""
    clock = FakeClock()
    per_host = sandboxkit.Budgets(requests_per_second=10)
    throttle = Throttle(sandboxkit.Budgets(per_host=per_host), clock)
    waiter = asyncio.ensure_future(throttle.draw(host(0), Direction.REQUESTS, 100_000))
    await settled()
    assert not waiter.done()  # 10,000 s at 10/s
    bucket = throttle._hosts[host(0), Direction.REQUESTS]
    clock.now = 10.0
    for number in range(1, 2 * SWEEP_FLOOR):
        await throttle.draw(host(number), Direction.REQUESTS, 1)
        clock.now += 0.1  # each new host full again before the next one draws
    await settled()
    assert not waiter.done()
    assert throttle._hosts[host(0), Direction.REQUESTS] is bucket
    assert len(throttle._hosts) < SWEEP_FLOOR
    waiter.cancel()
