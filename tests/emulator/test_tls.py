"""TLS with a caller's CA: the console and every sandbox host are served over https."""

from __future__ import annotations

import aiohttp
import pytest

from sandboxkit.emulator import Emulator

from .support import new_box


async def test_https_data_plane_by_hostname(tls_emulator: Emulator) -> None:
    """An https data-plane request by host name, through emu.resolver and emu.ssl_context, works."""
    emu = tls_emulator
    assert emu.data_plane_scheme == "https" and emu.base_url.startswith("https://127.0.0.1:")
    box = await new_box(emu)
    (emu.sandbox_root(box.key) / "tmp/f").write_bytes(b"secure")
    url = f"{emu.data_plane_scheme}://{box.key}.{emu.domain}/files"
    connector = aiohttp.TCPConnector(resolver=emu.resolver, ssl=emu.ssl_context)
    async with aiohttp.ClientSession(connector=connector) as http:
        async with http.get(url, params={"path": "/tmp/f"}, headers=box.auth) as response:
            assert response.status == 200
            assert await response.read() == b"secure"
        headers = {"Authorization": f"Bearer {emu.api_key}"}
        async with http.get(f"{emu.base_url}/api/v2/products", headers=headers) as response:
            assert response.status == 200


async def test_https_without_trust_fails(tls_emulator: Emulator) -> None:
    """Without trusting the CA the certificate is rejected."""
    emu = tls_emulator
    box = await new_box(emu)
    url = f"https://{box.key}.{emu.domain}/files"
    connector = aiohttp.TCPConnector(resolver=emu.resolver)
    async with aiohttp.ClientSession(connector=connector) as http:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with http.get(url, params={"path": "/tmp/f"}, headers=box.auth):
                pass


async def test_plain_http_has_no_ssl_context(clocked_emulator: Emulator) -> None:
    """Without a CA the emulator speaks plain HTTP and offers no SSL context."""
    assert clocked_emulator.ssl_context is None
    assert clocked_emulator.data_plane_scheme == "http" and clocked_emulator.base_url.startswith(
        "http://"
    )
