"""Budgets over real loopback sockets against the emulator: transfers paced by the bytes they
draw, live changes, the request rate, per-host buckets, the sync client, batch, the CLI.

Time is asserted only as a lower bound (what the limit implies), never as an upper one.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest

import sandboxkit
from sandboxkit import batch, sync
from sandboxkit._core.budgets import grain_for
from sandboxkit._http import transport
from sandboxkit._http.throttle import Direction, Throttle
from sandboxkit.emulator import Emulator

from ..files_support import Box, new_box, payload

KiB, MiB = 1 << 10, 1 << 20
FAST = sandboxkit.RetryPolicy.no_delay()


class Draws:
    """Every draw the throttle makes: (when it returned on the monotonic clock, origin,
    direction, amount)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[float, str, Direction, int]] = []
        draw = Throttle.draw

        async def recorded(
            throttle: Throttle, origin: str, direction: Direction, amount: int
        ) -> None:
            await draw(throttle, origin, direction, amount)
            self.seen.append((time.monotonic(), origin, direction, amount))

        monkeypatch.setattr(Throttle, "draw", recorded)

    def of(self, direction: Direction, since: float = 0.0) -> list[tuple[float, int]]:
        return [(t, n) for t, _, d, n in self.seen if d is direction and t >= since]

    def total(self, direction: Direction, origin: str | None = None) -> int:
        return sum(n for _, o, d, n in self.seen if d is direction and origin in (None, o))


@pytest.fixture
def draws(monkeypatch: pytest.MonkeyPatch) -> Draws:
    """The throttle's draws, recorded."""
    return Draws(monkeypatch)


def paced_at_most(entries: list[tuple[float, int]], since: float, rate: float, grain: int) -> None:
    """The bytes drawn after `since` took at least what `rate` implies (one grain may have
    been saved up: a bucket's capacity)."""
    moved = sum(n for _, n in entries)
    assert moved > 0
    took = max(t for t, _ in entries) - since
    assert took >= (moved - grain) / rate - 1e-3, (moved, took)


async def client_box(emulator: Emulator, **options: Any) -> tuple[sandboxkit.Client, Box]:
    client = emulator.client(retry=FAST, **options)
    return client, await new_box(emulator, client)


async def test_a_download_takes_the_time_its_limit_implies(
    emulator: Emulator, draws: Draws, tmp_path: Path
) -> None:
    """2 MiB under 4 MiB/s: every byte drawn in grains of at most 1/8 s, at least 0.44 s."""
    rate = 4 * MiB
    data = payload(2 * MiB)
    client, box = await client_box(
        emulator, budgets=sandboxkit.Budgets(download_bytes_per_second=rate)
    )
    async with client:
        box.put("/home/user/big.bin", data)
        started = time.monotonic()
        result = await box.files.download("/home/user/big.bin", tmp_path / "big.bin")
    assert (tmp_path / "big.bin").read_bytes() == data and result.size == len(data)
    entries = draws.of(Direction.DOWN)
    assert sum(n for _, n in entries) == len(data)
    assert max(n for _, n in entries) <= grain_for(rate)
    paced_at_most(entries, started, rate, grain_for(rate))


async def test_an_upload_takes_the_time_its_limit_implies(emulator: Emulator, draws: Draws) -> None:
    """2 MiB up under 4 MiB/s (the download side unlimited): drawn in grains, at least 0.44 s."""
    rate = 4 * MiB
    data = payload(2 * MiB, seed=1)
    client, box = await client_box(emulator, budgets=sandboxkit.Budgets.from_bwlimit("4M:off"))
    async with client:
        started = time.monotonic()
        await box.files.upload("/home/user/up.bin", data)
    assert box.get("/home/user/up.bin") == data
    assert draws.total(Direction.DOWN) == 0
    entries = draws.of(Direction.UP)
    assert sum(n for _, n in entries) == len(data)
    assert max(n for _, n in entries) <= grain_for(rate)
    paced_at_most(entries, started, rate, grain_for(rate))


async def test_a_limit_set_mid_download_paces_the_rest_even_below_the_parser(
    emulator: Emulator, draws: Draws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download begun unlimited (read below the parser, `ring`) is paced from the moment a
    progress callback sets a limit: its later bytes take the time the limit implies."""
    monkeypatch.setattr(transport, "RING_MIN_BODY", 1 * MiB)  # the ring for a small file
    take_over = transport.StreamingResponse._take_over
    rings: list[object] = []

    def taken(response: transport.StreamingResponse) -> object:
        rings.append(ring := take_over(response))
        return ring

    monkeypatch.setattr(transport.StreamingResponse, "_take_over", taken)
    rate = 8 * MiB
    data = payload(12 * MiB, seed=2)
    client, box = await client_box(emulator)
    changed: list[float] = []

    def progress(done: int, total: int | None) -> None:
        if not changed and done >= 1:
            client.set_budgets(sandboxkit.Budgets(download_bytes_per_second=rate))
            changed.append(time.monotonic())

    async with client:
        box.put("/home/user/ring.bin", data)
        await box.files.download("/home/user/ring.bin", tmp_path / "ring.bin", progress=progress)
    assert (tmp_path / "ring.bin").read_bytes() == data
    assert len(rings) == 1 and rings[0] is not None  # it was read below the parser
    later = draws.of(Direction.DOWN, since=changed[0])
    paced_at_most(later, changed[0], rate, grain_for(rate))


async def test_a_lowered_limit_paces_an_upload_already_running(
    emulator: Emulator, draws: Draws
) -> None:
    """An upload under 64 MiB/s lowered to 2 MiB/s after its first MiB: the rest is paced at
    the new rate (no debt of the old rate waited out first)."""
    data = payload(3 * MiB, seed=3)
    client, box = await client_box(
        emulator, budgets=sandboxkit.Budgets(upload_bytes_per_second=64 * MiB)
    )
    changed: list[float] = []

    def progress(done: int, total: int | None) -> None:
        if not changed and done >= MiB:
            client.set_budgets(sandboxkit.Budgets(upload_bytes_per_second=2 * MiB))
            changed.append(time.monotonic())

    async with client:
        await box.files.upload("/home/user/slow.bin", data, progress=progress)
    assert box.get("/home/user/slow.bin") == data
    assert client.budgets.upload_bytes_per_second == 2 * MiB
    later = draws.of(Direction.UP, since=changed[0])
    assert sum(n for _, n in later) >= MiB  # the rest, less the grain being sent
    paced_at_most(later, changed[0], 2 * MiB, grain_for(2 * MiB))


async def test_requests_take_a_token_each_burst_then_rate(emulator: Emulator) -> None:
    """At 20 requests/s with a burst of 4, the k-th request goes no earlier than
    (k + 1 - 4) / 20 s after the client was made; every request sent took one."""
    sent: list[float] = []
    started = time.monotonic()
    client = emulator.client(
        retry=FAST,
        budgets=sandboxkit.Budgets(requests_per_second=20, request_burst=4),
        on_request=lambda _: sent.append(time.monotonic()),
    )
    async with client:
        box = await new_box(emulator, client)
        box.put("/home/user/small.txt", b"hi")
        emulator.journal.clear()
        for _ in range(12):
            assert await box.files.read_bytes("/home/user/small.txt") == b"hi"
    assert len(sent) == len(emulator.journal) == 12
    for index, when in enumerate(sent):
        assert when - started >= (index + 1 - 4) / 20 - 1e-3


async def test_per_host_budgets_give_each_sandbox_its_own_bucket(
    emulator: Emulator, draws: Draws, tmp_path: Path
) -> None:
    """Two sandboxes under a per-host limit each draw their own bytes from their own bucket."""
    budgets = sandboxkit.Budgets(per_host=sandboxkit.Budgets(download_bytes_per_second=8 * MiB))
    client, first = await client_box(emulator, budgets=budgets)
    second = await new_box(emulator, client)
    async with client:
        first.put("/home/user/a.bin", payload(MiB, seed=4))
        second.put("/home/user/b.bin", payload(2 * MiB, seed=5))
        await asyncio.gather(
            first.files.download("/home/user/a.bin", tmp_path / "a.bin"),
            second.files.download("/home/user/b.bin", tmp_path / "b.bin"),
        )
        hosts = client._transport.throttle._hosts
    origins = sorted({origin for origin, _ in hosts})
    assert len(origins) == 2 and all(direction is Direction.DOWN for _, direction in hosts)
    assert sorted(draws.total(Direction.DOWN, origin) for origin in origins) == [MiB, 2 * MiB]


async def test_unlimited_transfers_never_draw(
    emulator: Emulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the default budgets no draw is made, on any path: aiohttp's, the ring, uploads,
    bounded reads, control-plane calls."""

    async def refused(*_: object) -> None:
        raise AssertionError("drew from an unlimited budget")

    monkeypatch.setattr(Throttle, "draw", refused)
    monkeypatch.setattr(transport, "RING_MIN_BODY", 1 * MiB)
    client, box = await client_box(emulator)
    async with client:
        assert client.budgets == sandboxkit.Budgets()
        await box.files.upload("/home/user/u.bin", payload(2 * MiB))
        await box.files.download("/home/user/u.bin", tmp_path / "u.bin")
        assert len(await box.files.read_bytes("/home/user/u.bin")) == 2 * MiB
        await client.v1.list_templates()


async def test_a_batch_summary_shows_the_limits_and_batches_draw(
    emulator: Emulator, draws: Draws, tmp_path: Path
) -> None:
    """download_many runs on the client's budgets, and its summary says which were in effect."""
    budgets = sandboxkit.Budgets(download_bytes_per_second=32 * MiB)
    client, box = await client_box(emulator, budgets=budgets)
    async with client:
        for index in range(4):
            box.put(f"/home/user/{index}.bin", payload(100 * KiB, seed=index))
        ref = sandboxkit.SandboxRef(box.handle.sandbox_key, box.handle.domain, emulator_token(box))
        jobs = [
            batch.DownloadJob(ref, f"/home/user/{i}.bin", tmp_path / f"{i}.bin") for i in range(4)
        ]
        result = await batch.download_many(client, jobs)
    assert result.ok and result.summary.budgets == budgets
    assert "budgets='download 32 MiB/s, upload off, requests off'" in repr(result.summary)
    assert draws.total(Direction.DOWN) == 400 * KiB


def emulator_token(box: Box) -> str:
    """The sandbox token the handle holds (the handle never shows it)."""
    return box.handle._plane.host.token


@pytest.mark.parametrize(
    "budgets",
    ["10M", 10, sandboxkit.Budgets],
)
def test_bad_budgets_are_refused_before_any_request(budgets: object) -> None:
    """A value other than a `Budgets` is a ValidationError when the client is made."""
    with pytest.raises(sandboxkit.ValidationError, match=r"must be a sandboxkit\.Budgets"):
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:9", budgets=budgets)  # type: ignore[arg-type]


async def test_set_budgets_refuses_a_bad_value_and_keeps_the_old(emulator: Emulator) -> None:
    """`set_budgets` checks its value; a refused one leaves the limits as they were."""
    budgets = sandboxkit.Budgets(download_bytes_per_second=MiB)
    async with emulator.client(budgets=budgets) as client:
        with pytest.raises(sandboxkit.ValidationError):
            client.set_budgets("1M")  # type: ignore[arg-type]
        assert client.budgets == budgets


def test_the_config_carries_budgets_to_workers() -> None:
    """`ClientConfig.budgets` pickles and `Client.from_config` uses it."""
    budgets = sandboxkit.Budgets.from_bwlimit("1M:2M", requests_per_second=3)
    config = pickle.loads(
        pickle.dumps(
            sandboxkit.ClientConfig(api_key="k", base_url="http://127.0.0.1:9", budgets=budgets)
        )
    )
    client = sandboxkit.Client.from_config(config)
    assert client.budgets == budgets
    with pytest.raises(sandboxkit.ValidationError, match="budgets must be a Budgets"):
        sandboxkit.ClientConfig(budgets="1M")  # type: ignore[arg-type]


@pytest.fixture
def portal_emulator() -> Iterator[tuple[Emulator, anyio.from_thread.BlockingPortal]]:
    """An emulator served from a portal's loop thread, for the sync client."""
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(Emulator()) as emu,
    ):
        yield emu, portal


def test_the_sync_client_honours_and_changes_budgets(
    portal_emulator: tuple[Emulator, anyio.from_thread.BlockingPortal], tmp_path: Path
) -> None:
    """sync.Client takes `budgets=`, paces a download by them, and `set_budgets` changes them
    from another thread."""
    emu, portal = portal_emulator
    rate = 4 * MiB
    data = payload(MiB + 5, seed=7)
    with sync.Client(
        api_key=emu.api_key,
        base_url=emu.base_url,
        data_plane_scheme=emu.data_plane_scheme,
        resolver=emu.resolver,
        retry=FAST,
        budgets=sandboxkit.Budgets(download_bytes_per_second=rate),
    ) as client:
        body: dict[str, Any] = portal.call(emu.create_sandbox)
        sbx = client.sandbox_from_response(body)
        sbx.files.upload("/home/user/s.bin", data)
        started = time.monotonic()
        assert sbx.files.read_bytes("/home/user/s.bin") == data
        took = time.monotonic() - started
        assert took >= (len(data) - grain_for(rate)) / rate
        client.set_budgets(sandboxkit.Budgets())
        assert client.budgets == sandboxkit.Budgets()
        assert not client._target._transport.throttle.downloads
