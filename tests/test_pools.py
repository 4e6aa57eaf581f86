"""The pool manager and the client's lifecycle: bounds, idle closing, loops, secrets."""

from __future__ import annotations

import asyncio
import gc
import logging

import anyio
import pytest

import sandboxkit
from sandboxkit._config import Limits
from sandboxkit._pools import HostKey, HostPools

from .conftest import API_KEY, ScriptServer, answer


class FakeSession:
    """Stands in for an aiohttp session: records closing."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_pools(
    max_hosts: int = 2, idle: float = 60.0
) -> tuple[HostPools, list[FakeSession], Clock]:
    made: list[FakeSession] = []
    clock = Clock()

    def factory(host: HostKey) -> FakeSession:
        made.append(FakeSession(host.origin))
        return made[-1]

    pools = HostPools(
        Limits(max_sandbox_hosts=max_hosts, per_host_connections=2, host_idle_seconds=idle),
        factory,  # type: ignore[arg-type]
        clock,
    )
    return pools, made, clock


async def test_one_session_per_host_reused() -> None:
    """Leases of one host share its session; another host gets its own."""
    pools, made, _ = make_pools()
    async with pools.lease(HostKey("http://a", "t")) as first:
        pass
    async with pools.lease(HostKey("http://a", "t")) as again:
        assert again is first
    async with pools.lease(HostKey("http://b", "t")):
        pass
    assert [s.origin for s in made] == ["http://a", "http://b"]


async def test_lru_evicts_least_recently_used_idle_pool() -> None:
    """A third host closes the least recently used idle pool, keeping the bound."""
    pools, made, _ = make_pools(max_hosts=2)
    for origin in ("http://a", "http://b", "http://a", "http://c"):
        async with pools.lease(HostKey(origin, "t")):
            pass
    assert len(pools) == 2
    assert [(s.origin, s.closed) for s in made] == [
        ("http://a", False),
        ("http://b", True),
        ("http://c", False),
    ]


async def test_busy_pools_are_never_closed_new_host_waits() -> None:
    """With every pool busy, a new host waits for a release instead of closing one in flight."""
    pools, made, _ = make_pools(max_hosts=1)
    entered = anyio.Event()
    release = anyio.Event()
    order: list[str] = []

    async def hold_a() -> None:
        async with pools.lease(HostKey("http://a", "t")):
            entered.set()
            await release.wait()
            order.append("a done")

    async def use_b() -> None:
        await entered.wait()
        async with pools.lease(HostKey("http://b", "t")):
            order.append("b in")
            assert made[0].closed

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold_a)
        tg.start_soon(use_b)
        await entered.wait()
        await anyio.wait_all_tasks_blocked()
        assert order == [] and not made[0].closed and len(pools) == 1
        release.set()
    assert order == ["a done", "b in"]


async def test_idle_pools_close_after_idle_seconds() -> None:
    """A pool unused for host_idle_seconds is closed at the next sweep; a fresher one stays."""
    pools, made, clock = make_pools(max_hosts=4, idle=10.0)
    async with pools.lease(HostKey("http://a", "t")):
        pass
    clock.now = 6.0
    async with pools.lease(HostKey("http://b", "t")):
        pass
    clock.now = 10.5
    assert await pools.close_idle() == 1
    assert [s.closed for s in made] == [True, False]
    assert len(pools) == 1


async def test_discard_waits_for_in_flight_request() -> None:
    """Dropping a host pool under a request closes it only when that request ends."""
    pools, made, _ = make_pools()
    async with pools.lease(HostKey("http://a", "t")):
        await pools.discard(HostKey("http://a", "t"))
        assert not made[0].closed
    assert made[0].closed
    assert len(pools) == 0


async def test_throttled_host_limits_only_itself() -> None:
    """A 429 on one host halves that host's slots; another host keeps all of its own."""
    pools, _, _ = make_pools()
    async with pools.lease(HostKey("http://a", "t")) as a:
        a.on_throttled()
    async with pools.lease(HostKey("http://b", "t")) as b:
        pass
    assert a.limiter.total_tokens == 1
    assert b.limiter.total_tokens == 2


async def test_repr_and_errors_never_show_the_key(script_server: ScriptServer) -> None:
    """Neither repr(client) nor an exception's text carries the API key."""
    script_server.on(
        "GET", "/api/v2/p", answer({"code": "Auth.Unauthorized", "message": "no"}, 401)
    )
    async with sandboxkit.Client(api_key=API_KEY, base_url=script_server.url) as client:
        assert API_KEY not in repr(client)
        with pytest.raises(sandboxkit.AuthenticationError) as info:
            await client.request("GET", "/api/v2/p")
        assert API_KEY not in str(info.value) and API_KEY not in repr(info.value)


async def test_sessions_are_created_lazily_and_closed() -> None:
    """A client made outside any call opens no session until used, and aclose is idempotent."""
    client = sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:9")
    assert client._transport._control is None
    await client.aclose()
    await client.aclose()
    assert client.closed
    with pytest.raises(sandboxkit.ClientStateError, match="closed"):
        await client.request("GET", "/api/v2/x")


def test_client_refuses_a_second_event_loop() -> None:
    """A client bound to one loop raises ClientStateError on another, and still closes."""
    client = sandboxkit.Client(
        api_key="k", base_url="http://127.0.0.1:9", retry=sandboxkit.RetryPolicy.none()
    )
    first = asyncio.new_event_loop()
    second = asyncio.new_event_loop()
    try:
        with pytest.raises(sandboxkit.APIConnectionError):
            first.run_until_complete(client.request("GET", "/api/v2/x"))
        with pytest.raises(sandboxkit.ClientStateError, match="another event loop"):
            second.run_until_complete(client.request("GET", "/api/v2/x"))
        first.run_until_complete(client.aclose())
    finally:
        first.close()
        second.close()
    gc.collect()


async def test_many_concurrent_tasks_share_one_client(script_server: ScriptServer) -> None:
    """Two hundred concurrent calls on one client all succeed over one control pool."""
    script_server.always("GET", "/api/v2/p", answer({"request_id": "r", "data": 1}))
    async with sandboxkit.Client(
        api_key="k",
        base_url=script_server.url,
        limits=sandboxkit.Limits(control_plane_connections=10),
    ) as client:
        results: list[int] = []

        async def one() -> None:
            results.append(await client.request("GET", "/api/v2/p"))

        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(one)
        assert results == [1] * 200
        connector = client._transport._control.connector  # type: ignore[union-attr]
        assert connector is not None and connector.limit == 10


async def test_debug_logs_never_carry_the_key(
    script_server: ScriptServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Even at DEBUG, no log record of any logger holds the API key."""
    script_server.always("GET", "/api/v2/p", answer({"code": "x", "message": "m"}, 503))
    with caplog.at_level(logging.DEBUG):
        async with sandboxkit.Client(
            api_key=API_KEY, base_url=script_server.url, retry=sandboxkit.RetryPolicy.no_delay(3)
        ) as client:
            with pytest.raises(sandboxkit.ServiceUnavailableError):
                await client.request("GET", "/api/v2/p")
    assert caplog.records
    assert all(API_KEY not in r.getMessage() for r in caplog.records)


async def test_idle_pools_close_by_themselves_with_no_request_to_sweep_them() -> None:
    """With no further lease, idle pools are closed once `host_idle_seconds` pass (by the
    pools' own timer), a busy one is kept, and the timer ends with the last pool."""
    clock = Clock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:  # the timer's waits, on the fake clock
        slept.append(seconds)
        clock.now += seconds
        await asyncio.sleep(0)

    made: list[FakeSession] = []
    first_closed = asyncio.Event()

    class Session(FakeSession):
        async def close(self) -> None:
            await super().close()
            first_closed.set()

    def make(host: HostKey) -> FakeSession:
        made.append(Session(host.origin))
        return made[-1]

    pools: HostPools[FakeSession] = HostPools(
        Limits(per_host_connections=2, host_idle_seconds=5.0), make, clock, sleep
    )
    async with pools.lease(HostKey("http://idle", "t")):
        pass
    busy = pools.lease(HostKey("http://busy", "t"))
    await busy.__aenter__()
    timer = pools._timer
    assert timer is not None
    with anyio.fail_after(5):
        await first_closed.wait()
    assert pools.get(HostKey("http://idle", "t")) is None
    assert [(s.origin, s.closed) for s in made] == [("http://idle", True), ("http://busy", False)]
    assert clock.now >= 5.0 and set(slept) == {0.5}
    await busy.__aexit__(None, None, None)
    with anyio.fail_after(5):
        await timer  # closes the busy one once it is idle long enough, then ends
    assert made[1].closed and len(pools) == 0
