"""``Emulator.client()`` returns a sandboxkit Client wired to the emulator."""

from __future__ import annotations

import importlib.util

import pytest
import trustme

from sandboxkit.emulator import Emulator

from .support import idcs

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("sandboxkit.client") is None, reason="sandboxkit.client not there yet"
)


async def test_client_reaches_both_planes(clocked_emulator: Emulator) -> None:
    """The returned client talks to the console with the emulator's key and to a sandbox."""
    async with clocked_emulator.client() as client:
        body = await client.request("GET", "/api/v2/products")
        assert "sku-small" in str(body)
        assert (
            clocked_emulator.journal[-1].headers["Authorization"]
            == f"Bearer {clocked_emulator.api_key}"
        )
        sandbox = client.sandbox_from_response(await clocked_emulator.create_sandbox())
        await sandbox.files.upload("/tmp/g", b"up")
        assert await sandbox.files.read_bytes("/tmp/g") == b"up"


async def test_client_over_tls() -> None:
    """With a CA the client gets the emulator's SSL context and speaks https to both planes."""
    async with Emulator(idcs=idcs(), ca=trustme.CA()) as emu, emu.client() as client:
        assert "sku-small" in str(await client.request("GET", "/api/v2/products"))
        sandbox = client.sandbox_from_response(await emu.create_sandbox())
        await sandbox.files.upload("/tmp/g", b"tls")
        assert await sandbox.files.read_bytes("/tmp/g") == b"tls"
        assert {r.server for r in emu.journal} == {"console", "data"}
