"""The emulator resolver: its own names go to 127.0.0.1, nothing else resolves."""

from __future__ import annotations

import socket

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, EmulatorResolver


@pytest.mark.parametrize(
    "host",
    [
        "sbx-1.sandbox.test",
        "SANDBOX.TEST",
        "a.b.sandbox.test.",
        "localhost",
        "sbx-1.localhost",
        "A.LocalHost.",
    ],
)
async def test_emulator_names_resolve_to_loopback(host: str) -> None:
    """Names equal to or under sandbox.test or localhost resolve to 127.0.0.1."""
    (result,) = await EmulatorResolver().resolve(host, 8080)
    assert (result["host"], result["port"], result["family"]) == ("127.0.0.1", 8080, socket.AF_INET)


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "sandbox.test.example.com",
        "notsandbox.test",
        "notlocalhost",
        "localhost.example.com",
    ],
)
async def test_other_names_never_resolve(host: str) -> None:
    """Any other name raises OSError: no real host is ever looked up."""
    with pytest.raises(OSError, match="emulator resolver does not resolve"):
        await EmulatorResolver().resolve(host)


async def test_session_with_resolver_cannot_reach_outside(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A session using emu.resolver fails to connect to an outside name, refused by the
    resolver itself (not by a lookup or a connection that happened to fail)."""
    with pytest.raises(aiohttp.ClientConnectorError) as caught:
        async with raw_http.get("http://example.invalid/"):
            pass
    assert "emulator resolver does not resolve" in str(caught.value.os_error)
