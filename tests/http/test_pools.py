"""The pool manager and the client's lifecycle: bounds, idle closing, loops, secrets."""

from __future__ import annotations

import asyncio
import gc
import logging
import random

import anyio
import pytest

import sandboxkit
from sandboxkit._core.options import Limits
from sandboxkit._http.hosts import HostKey, HostPools
from sandboxkit._http.transport import StreamingResponse

from ..conftest import API_KEY, ScriptServer, answer, hostile_client, raw
from ..reliability_support import busy_connections


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
    sockets: int = 2, idle: float = 60.0, per_host: int = 2
) -> tuple[HostPools, list[FakeSession], Clock]:
    made: list[FakeSession] = []
    clock = Clock()

    def factory(host: HostKey) -> FakeSession:
        made.append(FakeSession(host.origin))
        return made[-1]

    pools = HostPools(
        Limits(
            max_sandbox_connections=sockets,
            per_host_connections=per_host,
            host_idle_seconds=idle,
        ),
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
    """With both sockets charged, a third host closes the least recently used idle pool."""
    pools, made, _ = make_pools(sockets=2)
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
    """With every socket busy, a new host waits for a release instead of closing a pool in
    flight."""
    pools, made, _ = make_pools(sockets=1, per_host=1)
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
        assert order == [] and not made[0].closed and pools.sockets == 1
        release.set()
    assert order == ["a done", "b in"]


async def test_a_pool_is_charged_its_peak_of_requests_at_once() -> None:
    """Requests one after another share one charged socket; two at once charge two, and
    the charge stays while the pool is idle (its keep-alives are still open)."""
    pools, _, _ = make_pools(sockets=8, per_host=4)
    key = HostKey("http://a", "t")
    for _ in range(3):
        async with pools.lease(key):
            pass
    assert pools.sockets == 1
    async with pools.lease(key), pools.lease(key) as pool:
        assert (pool.active, pool.sockets) == (2, 2)
    async with pools.lease(key):
        pass
    assert (pool.active, pool.sockets, pools.sockets) == (0, 2, 2)


async def test_idle_pools_stay_while_their_sockets_fit() -> None:
    """Eight idle hosts fit eight sockets, whatever their number; the ninth closes only the
    least recently used one, and its charge goes to the newcomer."""
    pools, made, _ = make_pools(sockets=8)
    for origin in [f"http://h{n}" for n in range(8)] + ["http://h0"]:
        async with pools.lease(HostKey(origin, "t")):
            pass
    assert (len(pools), pools.sockets, pools.evicted) == (8, 8, 0)
    assert not any(s.closed for s in made)
    async with pools.lease(HostKey("http://new", "t")):
        pass
    assert [s.origin for s in made if s.closed] == ["http://h1"]
    assert (len(pools), pools.sockets, pools.evicted, pools.opened) == (8, 8, 1, 9)


async def test_a_request_waiting_for_a_socket_takes_its_own_pools_released_one() -> None:
    """With every socket busy, a third request of host A waits; when one of A's requests
    ends, it goes on A's freed socket: nothing is closed, B keeps its two."""
    pools, made, _ = make_pools(sockets=4, per_host=4)
    a, b = HostKey("http://a", "t"), HostKey("http://b", "t")
    held = [pools.lease(k) for k in (a, a, b, b)]
    for lease in held:
        await lease.__aenter__()
    third_in = anyio.Event()

    async def third() -> None:
        async with pools.lease(a):
            third_in.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert not third_in.is_set() and pools.get(a).waiting == 1  # type: ignore[union-attr]
        await held[0].__aexit__(None, None, None)
        with anyio.fail_after(5):
            await third_in.wait()
    assert pools.sockets == 4 and pools.evicted == 0 and not any(s.closed for s in made)
    for lease in held[1:]:
        await lease.__aexit__(None, None, None)


async def test_a_cancelled_wait_for_a_socket_leaves_no_charge_behind() -> None:
    """A request cancelled while it waits for a socket leaves its pool idle and uncharged;
    once the busy host is idle, the next host closes it and takes its socket."""
    pools, made, _ = make_pools(sockets=1, per_host=1)
    busy = pools.lease(HostKey("http://busy", "t"))
    await busy.__aenter__()

    async def late_request() -> None:
        async with pools.lease(HostKey("http://late", "t")):
            pytest.fail("the budget was exceeded")

    async with anyio.create_task_group() as tg:
        tg.start_soon(late_request)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    late = pools.get(HostKey("http://late", "t"))
    assert late is not None and (late.in_flight, late.sockets, late.waiting) == (0, 0, 0)
    assert pools.sockets == 1
    await busy.__aexit__(None, None, None)
    async with pools.lease(HostKey("http://next", "t")):
        assert pools.sockets == 1
    assert [(s.origin, s.closed) for s in made] == [
        ("http://busy", True),
        ("http://late", False),
        ("http://next", False),
    ]


async def test_sockets_freed_by_a_close_go_to_the_waiting_requests() -> None:
    """Two requests wait for sockets while busy host A holds both; A dropped (`discard`)
    closes once its requests end, and its two sockets go to the two waiters, in order."""
    pools, made, _ = make_pools(sockets=2)
    a = HostKey("http://a", "t")
    held = [pools.lease(a) for _ in range(2)]
    for lease in held:
        await lease.__aenter__()
    entered: list[str] = []
    both_in = anyio.Event()

    async def use(origin: str) -> None:
        async with pools.lease(HostKey(origin, "t")):
            entered.append(origin)
            if len(entered) == 2:
                both_in.set()
            await anyio.sleep_forever()

    async with anyio.create_task_group() as tg:
        for origin in ("http://b", "http://c"):
            tg.start_soon(use, origin)
            await anyio.wait_all_tasks_blocked()
        await pools.discard(a)
        for lease in held:
            await lease.__aexit__(None, None, None)
        with anyio.fail_after(5):
            await both_in.wait()
        assert entered == ["http://b", "http://c"] and made[0].closed
        assert pools.sockets == 2 and pools.evicted == 0
        tg.cancel_scope.cancel()


async def test_a_socket_handed_to_a_request_cancelled_at_once_goes_back() -> None:
    """A socket handed over to a waiting request that is cancelled before it runs is given
    back to its pool: the host's next request takes it without waiting."""
    pools, _, _ = make_pools(sockets=4, per_host=4)
    a = HostKey("http://a", "t")
    held = [pools.lease(a) for _ in range(3)]
    held_b = pools.lease(HostKey("http://b", "t"))  # the budget's fourth socket, busy
    await held_b.__aenter__()
    for lease in held:
        await lease.__aenter__()

    async def fourth() -> None:
        async with pools.lease(a):
            pytest.fail("cancelled before it could run")

    waiter = asyncio.ensure_future(fourth())
    await anyio.wait_all_tasks_blocked()
    pool = pools.get(a)
    assert pool is not None and pool.waiting == 1
    await held[0].__aexit__(None, None, None)  # hands its socket to the waiter...
    waiter.cancel()  # ...which is cancelled before it runs (asyncio: no second chance)
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (pool.active, pool.sockets, pool.waiting) == (2, 3, 0)
    async with pools.lease(a):  # a slot and a socket are free: no wait
        assert pool.active == 3
    for lease in [*held[1:], held_b]:
        await lease.__aexit__(None, None, None)


async def test_a_wake_for_an_idle_pool_passes_on_when_its_waiter_is_cancelled() -> None:
    """Told that a pool went idle, a waiting request (of a host still busy otherwise) is
    cancelled before it runs: the next waiter is told instead, closes the idle pool and
    goes on."""
    pools, made, _ = make_pools(sockets=2, per_host=2)
    busy_a = pools.lease(HostKey("http://a", "t"))
    busy_b = pools.lease(HostKey("http://b", "t"))
    for lease in (busy_a, busy_b):
        await lease.__aenter__()

    async def use(origin: str) -> None:
        async with pools.lease(HostKey(origin, "t")):
            pass

    first = asyncio.ensure_future(use("http://b"))  # B's second request: no socket left
    await anyio.wait_all_tasks_blocked()
    second = asyncio.ensure_future(use("http://c"))
    await anyio.wait_all_tasks_blocked()
    await busy_a.__aexit__(None, None, None)  # A is idle: the oldest waiter is told...
    first.cancel()  # ...and cancelled before it runs
    with anyio.fail_after(5):
        await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert [(s.origin, s.closed) for s in made] == [
        ("http://a", True),
        ("http://b", False),
        ("http://c", False),
    ]
    await busy_b.__aexit__(None, None, None)


async def test_a_request_cancelled_while_it_closes_an_idle_pool_keeps_no_socket() -> None:
    """Cancelled while the idle pool it evicts is closing, a request takes no socket: the
    freed one goes to the next request instead."""
    closing = anyio.Event()
    release = anyio.Event()

    class SlowSession(FakeSession):
        async def close(self) -> None:
            self.closed = True
            closing.set()
            await release.wait()

    pools: HostPools[FakeSession] = HostPools(
        Limits(max_sandbox_connections=1, per_host_connections=1),
        lambda host: SlowSession(host.origin),
    )
    async with pools.lease(HostKey("http://a", "t")):
        pass

    async def evict() -> None:
        async with pools.lease(HostKey("http://b", "t")):
            pytest.fail("it was cancelled")

    async with anyio.create_task_group() as tg:
        tg.start_soon(evict)
        await closing.wait()
        tg.cancel_scope.cancel()
    b = pools.get(HostKey("http://b", "t"))
    assert b is not None and (b.active, b.sockets, b.in_flight) == (0, 0, 0)
    assert pools.sockets == 0
    release.set()
    async with pools.lease(HostKey("http://c", "t")) as c:
        assert (c.active, c.sockets, pools.sockets) == (1, 1, 1)


async def test_idle_pools_close_after_idle_seconds() -> None:
    """A pool unused for host_idle_seconds is closed at the next sweep; a fresher one stays."""
    pools, made, clock = make_pools(sockets=4, idle=10.0)
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


class ModelSession(FakeSession):
    """A session as its connector behaves: a request takes an idle connection of its own
    if there is one, else opens one; closing the session closes them all."""

    def __init__(self, origin: str, opened: list[int]) -> None:
        super().__init__(origin)
        self.idle = 0
        self.open = 0
        self._opened = opened  # [open now across every session, the most ever]

    def take(self) -> None:
        if self.idle:
            self.idle -= 1
            return
        self.open += 1
        self._opened[0] += 1
        self._opened[1] = max(self._opened[1], self._opened[0])

    def give_back(self) -> None:
        self.idle += 1

    def drop(self) -> None:  # a request cut short closes its connection
        self.open -= 1
        self._opened[0] -= 1

    async def close(self) -> None:
        # As aiohttp's: every connection is closed at once, then the close waits a loop
        # pass or two for them to be gone (and may be cancelled meanwhile).
        self._opened[0] -= self.open
        self.open = self.idle = 0
        await asyncio.sleep(0)
        await super().close()


def model_pools(
    sockets: int, per_host: int
) -> tuple[HostPools[ModelSession], list[ModelSession], list[int]]:
    """Pools of ModelSessions; the sessions made, in order; [connections open now across
    every session, the most ever]."""
    opened = [0, 0]
    made: list[ModelSession] = []

    def factory(host: HostKey) -> ModelSession:
        made.append(ModelSession(host.origin, opened))
        return made[-1]

    limits = Limits(max_sandbox_connections=sockets, per_host_connections=per_host)
    return HostPools(limits, factory), made, opened


async def test_open_connections_never_exceed_the_budget_under_churn() -> None:
    """600 requests over 40 hosts, 60 at once, with a budget of 6 sockets and 150 of them
    cancelled at random moments: connections open (modelled as a connector opens them)
    never exceed 6, every request not cancelled gets through, and nothing stays charged
    but what idle pools hold."""
    rng = random.Random(18)
    pools, _, opened = model_pools(sockets=6, per_host=3)
    done = cancelled = 0
    gate = anyio.Semaphore(60)
    running: list[anyio.CancelScope] = []

    async def request() -> None:
        nonlocal done
        async with gate:
            key = HostKey(f"http://h{rng.randrange(40)}", "t")
            with anyio.CancelScope() as scope:
                running.append(scope)
                async with pools.lease(key) as pool:
                    pool.session.take()
                    try:
                        for _ in range(rng.randrange(4)):
                            await asyncio.sleep(0)
                    except BaseException:
                        pool.session.drop()
                        raise
                    pool.session.give_back()
                    done += 1
            if scope in running:
                running.remove(scope)

    async def cancel_some() -> None:
        # At random moments: waiting, just handed a socket, closing an idle pool, running.
        nonlocal cancelled
        while cancelled < 150:
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)
            if running:
                running.pop(rng.randrange(len(running))).cancel()
                cancelled += 1

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_some)
            for _ in range(600):
                tg.start_soon(request)
    assert opened[1] <= 6 and pools.evicted > 0
    assert done + cancelled >= 600 and done >= 400
    live = [pools.get(HostKey(f"http://h{n}", "t")) for n in range(40)]
    assert all(p is None or (p.active, p.in_flight, p.waiting) == (0, 0, 0) for p in live)
    assert pools.sockets == sum(p.sockets for p in live if p is not None) <= 6
    assert not pools._waiters
    await pools.aclose()


async def test_a_quiet_hosts_request_waits_only_for_those_queued_before_it() -> None:
    """Host A holds both sockets of the budget; 30 more requests of A queue, with one of
    host B second in line. B's request is served second at the latest, not 31st (it waits
    only for the one queued before it), all are served, and connections open (modelled as
    a connector opens them) never exceed the budget: A's old session is closed for B."""
    pools, made, opened = model_pools(sockets=2, per_host=2)
    a, b = HostKey("http://a", "t"), HostKey("http://b", "t")
    held = [pools.lease(a) for _ in range(2)]
    for lease in held:
        (await lease.__aenter__()).session.take()
    served: list[str] = []

    async def request(name: str, key: HostKey) -> None:
        async with pools.lease(key) as pool:
            pool.session.take()
            served.append(name)
            assert pools.sockets <= 2
            await asyncio.sleep(0)  # in flight for a loop pass: the others stay queued
            pool.session.give_back()

    queue = [("a0", a), ("b", b)] + [(f"a{n}", a) for n in range(1, 30)]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for name, key in queue:
                tg.start_soon(request, name, key)
            await anyio.wait_all_tasks_blocked()
            assert served == [] and pools.get(b).waiting == 1  # type: ignore[union-attr]
            for lease in held:
                pools.get(a).session.give_back()  # type: ignore[union-attr]
                await lease.__aexit__(None, None, None)
    assert served.index("b") <= 1 and sorted(served) == sorted(name for name, _ in queue)
    assert opened[1] <= 2 and pools.sockets <= 2
    assert [s.origin for s in made][:3] == ["http://a", "http://b", "http://a"]
    assert made[0].closed and not pools._waiters  # A's first session was closed for B
    await pools.aclose()


async def test_waiting_requests_of_many_hosts_are_served_in_arrival_order() -> None:
    """Four hosts hold the budget's four sockets; eight requests queue, two per host, in an
    order of their own. Each is served in the order it arrived whichever host's socket frees
    first: no host's request overtakes an older one of another host."""
    pools, _, _ = make_pools(sockets=4, per_host=4)
    keys = {name: HostKey(f"http://{name}", "t") for name in "abcd"}
    held = {name: pools.lease(key) for name, key in keys.items()}
    for lease in held.values():
        await lease.__aenter__()
    served: list[str] = []

    async def request(name: str) -> None:
        async with pools.lease(keys[name[0]]):
            served.append(name)
            await asyncio.sleep(0)

    arrivals = ["c1", "a1", "d1", "a2", "b1", "c2", "b2", "d2"]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for name in arrivals:
                tg.start_soon(request, name)
            await anyio.wait_all_tasks_blocked()
            assert served == []
            for name in "abdc":  # A's socket frees first, then B's, D's, C's
                await held[name].__aexit__(None, None, None)
    assert served == arrivals
    assert pools.sockets <= 4 and not pools._waiters


async def test_a_busy_hosts_session_handed_to_a_cancelled_request_passes_to_the_next() -> None:
    """Host A's two sockets go unused with one more of A's requests coming behind B's: A's
    session is handed to B's request to close; B is cancelled before it runs, so A's request,
    next in line, closes it instead and goes on a fresh session of A's (and no route made of
    the old one: a lean GET on its closed connector waited forever)."""
    pools, made, _ = make_pools(sockets=2, per_host=2)
    a, b = HostKey("http://a", "t"), HostKey("http://b", "t")
    held = [pools.lease(a) for _ in range(2)]
    for lease in held:
        (await lease.__aenter__()).route = "made of A's first session"  # the transport's
    a_in = anyio.Event()

    async def use(key: HostKey) -> None:
        async with pools.lease(key):
            if key == a:
                a_in.set()
                await anyio.sleep_forever()
            pytest.fail("B was cancelled")

    b_request = asyncio.ensure_future(use(b))
    await anyio.wait_all_tasks_blocked()
    a_request = asyncio.ensure_future(use(a))  # waits on A's window, behind B in time
    await anyio.wait_all_tasks_blocked()
    for lease in held:
        await lease.__aexit__(None, None, None)  # the second hands A's session to B...
    b_request.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await b_request
    with anyio.fail_after(5):
        await a_in.wait()
    assert [(s.origin, s.closed) for s in made] == [
        ("http://a", True),
        ("http://b", False),
        ("http://a", False),
    ]
    pool_a = pools.get(a)
    assert pool_a is not None and pool_a.session is made[2]
    assert pool_a.route is None  # what was made of the closed session went with it
    assert (pool_a.active, pool_a.sockets, pools.sockets, pools.evicted) == (1, 1, 1, 1)
    a_request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a_request
    assert not pools._waiters and pools._spare == 0


async def test_a_pool_handed_to_a_request_cancelled_with_no_one_behind_is_closed() -> None:
    """Idle host A is handed to B's waiting request to close for its socket; B is cancelled
    before it runs and no one else waits: A is closed all the same and its socket freed."""
    pools, made, _ = make_pools(sockets=1, per_host=1)
    busy = pools.lease(HostKey("http://a", "t"))
    await busy.__aenter__()

    async def use_b() -> None:
        async with pools.lease(HostKey("http://b", "t")):
            pytest.fail("B was cancelled")

    b_request = asyncio.ensure_future(use_b())
    await anyio.wait_all_tasks_blocked()
    await busy.__aexit__(None, None, None)  # A is idle: handed to B's request...
    b_request.cancel()  # ...which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await b_request
    assert [(s.origin, s.closed) for s in made] == [("http://a", True), ("http://b", False)]
    assert (len(pools), pools.sockets, pools._spare) == (1, 0, 0) and not pools._waiters


async def test_a_request_whose_end_fails_still_gives_back_its_connection_and_slot(
    script_server: ScriptServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error while a data-plane request ends (here in its body's count, where aiohttp
    before 3.11.12 raised for every empty body) still pools its connection and frees its
    slot: a slot kept per failure would leave the host's later requests waiting forever."""
    script_server.always("GET", "/files", raw(b"data", content_type="application/octet-stream"))

    def broken(_: StreamingResponse) -> int:
        raise RuntimeError("the count failed")

    monkeypatch.setattr(StreamingResponse, "received", property(broken))
    limits = Limits(per_host_connections=2, max_sandbox_connections=2)
    async with hostile_client(script_server.url, limits=limits) as client:
        port = script_server.url.rsplit(":", 1)[1]
        sbx = client.sandbox(sandbox_key="s", domain=f"sandbox.test:{port}", access_token="t")
        with anyio.fail_after(10):
            for _ in range(3):  # more than the host's slots
                with pytest.raises(RuntimeError, match="the count failed"):
                    await sbx.files.read_bytes("/f.bin")
            assert busy_connections(client) == 0
            monkeypatch.undo()
            assert await sbx.files.read_bytes("/f.bin") == b"data"
