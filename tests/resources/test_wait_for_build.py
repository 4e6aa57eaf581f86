"""templates.wait_for_build over loopback against the emulator (and a hanging server).

The emulator runs on a ManualClock with 60 s builds; the client's injected sleep moves that
clock instead of waiting, and its injected clock reads it, so every wait here is logical.
"""

from __future__ import annotations

import asyncio
import math
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

import sandboxkit
from sandboxkit import BuildStatus
from sandboxkit.emulator import Emulator, ManualClock

from ..conftest import ScriptServer

BUILD = {"source": {"image": "ubuntu:22.04"}, "commands": ["make"]}
RESOURCES = sandboxkit.CustomResources(cpu_count=1, memory_mb=512, disk_size_mb=1024)
BUILD_SECONDS = 60.0


class ClockedSleep:
    """A client sleep that moves the emulator's clock by the delay and records it."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.clock.advance(delay)


@pytest.fixture
async def slow_builds(manual_clock: ManualClock) -> AsyncIterator[Emulator]:
    """An emulator on manual_clock whose builds take 60 s of it."""
    async with Emulator(clock=manual_clock, build_seconds=BUILD_SECONDS) as running:
        yield running


@pytest.fixture
async def clocked_client(
    slow_builds: Emulator, manual_clock: ManualClock
) -> AsyncIterator[sandboxkit.Client]:
    """A client on slow_builds whose sleep moves manual_clock and whose clock reads it."""
    async with slow_builds.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        client._calls.sleep = ClockedSleep(manual_clock)
        client._calls.clock = manual_clock
        yield client


def sleeps(client: sandboxkit.Client) -> list[float]:
    sleeper = client._calls.sleep
    assert isinstance(sleeper, ClockedSleep)
    return sleeper.delays


def build_polls(emu: Emulator, template_id: str) -> int:
    """How many Build list requests the emulator answered for this template."""
    path = f"/api/v2/templates/{template_id}/builds"
    return sum(1 for r in emu.journal if r.method == "GET" and r.path == path)


# -- wait_for_build -------------------------------------------------------------------------


async def test_wait_returns_the_ready_build_backing_off_by_the_injected_clock(
    slow_builds: Emulator, clocked_client: sandboxkit.Client, manual_clock: ManualClock
) -> None:
    """A running build is polled at 0.5, 1, 2, 4 then every 5 s (the default backoff) of the
    emulator's clock until it is ready; the ready Build comes back with a BuildStatus."""
    created = await clocked_client.templates.create(name="w", resources=RESOURCES, build=BUILD)
    started = manual_clock()
    build = await clocked_client.templates.wait_for_build(created.id, created.build_id)
    assert build.id == created.build_id
    assert build.status is BuildStatus.READY
    assert build.finished_at is not None and build.is_finished
    delays = sleeps(clocked_client)
    assert delays[:5] == [0.5, 1.0, 2.0, 4.0, 5.0] and set(delays[4:]) == {5.0}
    # Ready at 60 s: the poll at 62.5 s saw it, the one at 57.5 s did not.
    assert manual_clock() - started == 62.5 == sum(delays)
    assert build_polls(slow_builds, created.id) == len(delays) + 1


async def test_wait_returns_a_failed_build_or_raises_when_asked(
    slow_builds: Emulator, clocked_client: sandboxkit.Client
) -> None:
    """A failed build is returned, status FAILED with its failure; raise_on_failure makes it
    BuildFailedError with the failure's code."""
    slow_builds.fail_next_build("TemplateBuild.OutOfMemory", "oom")
    created = await clocked_client.templates.create(name="f", resources=RESOURCES, build=BUILD)
    build = await clocked_client.templates.wait_for_build(created.id, created.build_id)
    assert build.status is BuildStatus.FAILED
    assert build.failure == sandboxkit.BuildFailure("TemplateBuild.OutOfMemory", "oom")
    with pytest.raises(sandboxkit.BuildFailedError) as info:
        await clocked_client.templates.wait_for_build(
            created.id, created.build_id, raise_on_failure=True
        )
    assert (info.value.build_id, info.value.code) == (created.build_id, "TemplateBuild.OutOfMemory")
    ready = await clocked_client.templates.create(name="ok", resources=RESOURCES, build=BUILD)
    done = await clocked_client.templates.wait_for_build(
        ready.id, ready.build_id, raise_on_failure=True
    )
    assert done.status is BuildStatus.READY


@pytest.mark.parametrize(
    "timeout", [10.0, sandboxkit.Timeout(connect=5.0, read=5.0, total=10.0)], ids=["s", "Timeout"]
)
async def test_wait_gives_up_at_the_timeout_with_the_last_build_seen(
    slow_builds: Emulator,
    clocked_client: sandboxkit.Client,
    manual_clock: ManualClock,
    timeout: float | sandboxkit.Timeout,
) -> None:
    """When `timeout` (seconds, or a Timeout's total) passes first, the wait raises
    BuildWaitTimeoutError (an APITimeoutError) then, not before, holding the Build as last
    seen; the build itself goes on. The error pickles with its fields."""
    created = await clocked_client.templates.create(name="t", resources=RESOURCES, build=BUILD)
    started = manual_clock()
    with pytest.raises(sandboxkit.APITimeoutError) as info:
        await clocked_client.templates.wait_for_build(created.id, created.build_id, timeout=timeout)
    error = info.value
    assert isinstance(error, sandboxkit.BuildWaitTimeoutError)
    assert (error.template_id, error.build_id, error.timeout) == (
        created.id,
        created.build_id,
        10.0,
    )
    assert error.build is not None and error.build.status is BuildStatus.BUILDING
    assert "not final after 10.0s" in str(error) and "building" in str(error)
    assert sleeps(clocked_client) == [0.5, 1.0, 2.0, 4.0, 2.5]  # the last one ends at 10 s
    assert manual_clock() - started == 10.0
    assert build_polls(slow_builds, created.id) == 5  # at 0, 0.5, 1.5, 3.5 and 7.5 s
    assert slow_builds.build_status(created.build_id) == "building"
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.build, copy.timeout) == (
        type(error),
        str(error),
        error.build,
        10.0,
    )


async def test_a_build_never_started_times_out_waiting(
    slow_builds: Emulator, clocked_client: sandboxkit.Client
) -> None:
    """A split-flow build nobody starts stays waiting: the wait ends at its timeout."""
    created = await clocked_client.templates.create(name="split", resources=RESOURCES)
    with pytest.raises(sandboxkit.BuildWaitTimeoutError) as info:
        await clocked_client.templates.wait_for_build(created.id, created.build_id, timeout=3)
    assert info.value.build is not None and info.value.build.status is BuildStatus.WAITING


async def test_a_missing_build_or_template_is_not_found(
    slow_builds: Emulator, clocked_client: sandboxkit.Client
) -> None:
    """An unknown build of a real template is NotFoundError (404, at the first look, no
    wait); an unknown template is the service's own 404."""
    created = await clocked_client.templates.create(name="nf", resources=RESOURCES, build=BUILD)
    with pytest.raises(sandboxkit.NotFoundError) as info:
        await clocked_client.templates.wait_for_build(created.id, "no-such-build")
    assert info.value.status == 404 and "no build no-such-build" in str(info.value)
    assert sleeps(clocked_client) == []
    with pytest.raises(sandboxkit.NotFoundError) as service:
        await clocked_client.templates.wait_for_build("no-such-template", created.build_id)
    assert service.value.request_id is not None  # the emulator's answer, not ours


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (("", "b"), {}, "template_id"),
        (("t", ""), {}, "build_id"),
        (("t", "b"), {"timeout": -1}, "timeout"),
        (("t", "b"), {"timeout": 0}, "timeout"),
        (("t", "b"), {"timeout": math.nan}, "timeout"),
        (("t", "b"), {"timeout": True}, "timeout"),
        (("t", "b"), {"timeout": "60"}, "timeout"),
        (("t", "b"), {"poll_interval": 0}, "poll_interval"),
        (("t", "b"), {"max_poll_interval": -5}, "max_poll_interval"),
        (("t", "b"), {"poll_interval": 2, "max_poll_interval": 1}, "max_poll_interval"),
    ],
)
async def test_bad_input_is_refused_before_any_request(
    slow_builds: Emulator,
    clocked_client: sandboxkit.Client,
    args: tuple[str, str],
    kwargs: dict[str, Any],
    named: str,
) -> None:
    """Empty ids, and timeouts or intervals that are not positive seconds, raise
    ValidationError naming the argument; nothing is sent."""
    with pytest.raises(sandboxkit.ValidationError, match=f"^{named}="):
        await clocked_client.templates.wait_for_build(*args, **kwargs)
    assert slow_builds.journal == []


async def test_a_poll_hanging_past_the_deadline_is_cut_short(script_server: ScriptServer) -> None:
    """A poll whose answer never comes ends at the deadline (the event loop's clock) with
    BuildWaitTimeoutError, though the request's own read limit is longer."""
    never = asyncio.Event()

    async def hang(_: web.Request) -> web.StreamResponse:
        await never.wait()
        raise AssertionError("unreachable")

    script_server.always("GET", "/api/v2/templates/t/builds", hang)
    async with sandboxkit.Client(
        api_key="k",
        base_url=script_server.url,
        timeout=sandboxkit.Timeout(read=3.0),
        retry=sandboxkit.RetryPolicy.none(),
    ) as client:
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(sandboxkit.BuildWaitTimeoutError) as info:
                await client.templates.wait_for_build("t", "b", timeout=0.2)
        finally:
            never.set()  # the server's shutdown waits for its handler
        assert loop.time() - started < 2  # not the 3 s read timeout
    assert info.value.build is None
