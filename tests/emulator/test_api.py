"""The emulator's Python API: sandboxes, values, and clean shutdown."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Idc, ManualClock

from ..reliability_support import port_of
from .support import Box, idcs, new_box


async def test_fresh_sandbox_has_home_and_tmp(clocked_emulator: Emulator) -> None:
    """A fresh sandbox has /home/user and /tmp, and a create-shaped body."""
    body = await clocked_emulator.create_sandbox("eu-lite")
    assert set(body) == {"request_id", "data"}
    assert set(body["data"]) == {"sandbox_key", "domain", "sandbox_access_token"}
    assert body["data"]["domain"] == clocked_emulator.domain
    root = clocked_emulator.sandbox_root(body["data"]["sandbox_key"])
    assert (root / "home/user").is_dir() and (root / "tmp").is_dir()


async def test_create_sandbox_rejects_unknown_or_missing_idc() -> None:
    """An unknown IDC, or no IDC without a default, is a ValueError."""
    async with Emulator(idcs=idcs(), default_idc=None) as emu:
        with pytest.raises(ValueError):
            await emu.create_sandbox()
        with pytest.raises(ValueError):
            await emu.create_sandbox("mars-1")
        await emu.create_sandbox("eu-lite")


async def test_delete_sandbox_removes_its_files(clocked_emulator: Emulator, wire_box: Box) -> None:
    """Deleting a sandbox removes its directory; it is no longer addressable."""
    root = clocked_emulator.sandbox_root(wire_box.key)
    await clocked_emulator.delete_sandbox(wire_box.key)
    assert not root.exists()
    with pytest.raises(KeyError):
        clocked_emulator.sandbox_root(wire_box.key)


async def test_close_removes_everything_and_is_idempotent(manual_clock: ManualClock) -> None:
    """close() stops both servers and deletes the temporary files; a second close is harmless."""
    emu = Emulator(idcs=idcs(), clock=manual_clock)
    await emu.start()
    root = emu.sandbox_root((await emu.create_sandbox())["data"]["sandbox_key"])
    ports = [port_of(emu.base_url), port_of(emu.domain)]
    await emu.close()
    await emu.close()
    assert not root.exists()
    for port in ports:  # both servers stopped: nothing listens any more
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)


async def test_client_dropping_a_download_is_quiet(
    clocked_emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    """A client that drops a download midway causes no server error, even through shutdown."""
    box = await new_box(clocked_emulator)
    (clocked_emulator.sandbox_root(box.key) / "tmp/big").write_bytes(b"\1" * (16 * 2**20))
    connector = aiohttp.TCPConnector(resolver=clocked_emulator.resolver)
    async with aiohttp.ClientSession(connector=connector) as http:
        response = await http.get(box.files, params={"path": "/tmp/big"}, headers=box.auth)
        await response.content.readexactly(1024)
        response.close()
        async with http.get(box.files, params={"path": "/tmp/none"}, headers=box.auth) as again:
            assert again.status == 404
    await clocked_emulator.close()  # waits for the dropped handler to finish
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]


def test_values_validate() -> None:
    """Idc names and limits are checked, and a ManualClock never goes back."""
    with pytest.raises(ValueError):
        Idc("Bad Name")
    with pytest.raises(ValueError):
        Idc("ok-1", max_upload_bytes=-1)
    clock = ManualClock(10.0)
    clock.advance(5)
    assert clock() == 15.0
    with pytest.raises(ValueError):
        clock.advance(-1)
