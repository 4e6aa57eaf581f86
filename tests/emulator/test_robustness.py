"""Bad input never crashes the emulator: each bad request gets its error, then a good one works."""

from __future__ import annotations

import asyncio

import aiohttp

from sandboxkit.emulator import Emulator

from .support import MULTIPART_TYPE, Box, data_error, multipart, upload, v1_validation, v2_error


async def still_serving(emu: Emulator, http: aiohttp.ClientSession, box: Box) -> None:
    """A good console request and a good data-plane request both succeed."""
    headers = {"Authorization": f"Bearer {emu.api_key}"}
    async with http.get(f"{emu.base_url}/api/v2/products", headers=headers) as response:
        assert response.status == 200
    async with await upload(http, box, "/tmp/ok", b"fine") as response:
        assert response.status == 200


async def test_malformed_json_v2_and_v1(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Malformed JSON: v2 400 Parameter.Invalid, v1 400 validation body; then it serves."""
    headers = {
        "Authorization": f"Bearer {clocked_emulator.api_key}",
        "Idempotency-Key": "k",
        "Content-Type": "application/json",
    }
    for data in (b"{", b"\xff\xfe garbage", b"[" * 100_000, b'{"name": "a", "resources": '):
        async with raw_http.post(
            f"{clocked_emulator.base_url}/api/v2/templates", data=data, headers=headers
        ) as r:
            await v2_error(r, 400, "Parameter.Invalid")
        async with raw_http.post(
            f"{clocked_emulator.base_url}/api/v1/containers", data=data, headers=headers
        ) as r:
            await v1_validation(r, "body")
    await still_serving(clocked_emulator, raw_http, wire_box)


async def test_wrong_types(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Wrong JSON types get 400s in each surface's format; then it serves."""
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}", "Idempotency-Key": "k"}
    for body in (
        {"name": ["x"], "resources": 5},
        {"name": "x", "resources": {"type": None}},
        "str",
        3,
        None,
    ):
        async with raw_http.post(
            f"{clocked_emulator.base_url}/api/v2/templates", json=body, headers=headers
        ) as r:
            await v2_error(r, 400, "Parameter.Invalid")
    async with raw_http.post(
        f"{clocked_emulator.base_url}/api/v1/containers",
        json={"name": {}, "count": "2"},
        headers=headers,
    ) as response:
        await v1_validation(response, "name")
    await still_serving(clocked_emulator, raw_http, wire_box)


async def test_huge_headers(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Huge headers get 400 with the surface's error body; then it serves."""
    big = {"X-Big": "b" * 100_000}
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/x"}, headers={**wire_box.auth, **big}
    ) as r:
        await data_error(r, 400)
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}", **big}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await v2_error(response, 400, "Parameter.Invalid")
    many = {f"X-H{i}": "v" * 1000 for i in range(100)}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers={**headers, **many}
    ) as r:
        await v2_error(r, 400, "Parameter.Invalid")
    async with raw_http.get(
        wire_box.files, params={"path": "/" + "a" * 20_000}, headers=wire_box.auth
    ) as r:
        await data_error(r, 400)
    await still_serving(clocked_emulator, raw_http, wire_box)


async def test_truncated_and_malformed_multipart(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Truncated or malformed multipart bodies get 400 and leave nothing behind; then it serves."""
    headers = {**wire_box.auth, "Content-Type": MULTIPART_TYPE}
    full = multipart(("file", "f", b"a" * 100_000))
    bodies = [
        full[:-10],
        full[:50],
        b"",
        b"no boundary at all",
        full.replace(b"\r\n\r\n", b"\r\n", 1),
    ]
    for body in bodies:
        async with raw_http.post(
            wire_box.files, params={"path": "/tmp/f"}, data=body, headers=headers
        ) as r:
            await data_error(r, 400)
    bad_boundary = {**wire_box.auth, "Content-Type": "multipart/form-data"}
    async with raw_http.post(
        wire_box.files, params={"path": "/tmp/f"}, data=full, headers=bad_boundary
    ) as r:
        await data_error(r, 400)
    assert not (clocked_emulator.sandbox_root(wire_box.key) / "tmp/f").exists()
    await still_serving(clocked_emulator, raw_http, wire_box)


async def test_client_vanishing_mid_upload(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A connection dropped mid-upload leaves no file and no staging debris; then it serves."""
    host, port = "127.0.0.1", int(clocked_emulator.domain.rsplit(":", 1)[1])
    _, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /files?path=/tmp/gone HTTP/1.1\r\nHost: {wire_box.key}.{wire_box.domain}\r\n"
        f"X-Access-Token: {wire_box.token}\r\nContent-Type: {MULTIPART_TYPE}\r\n"
        "Content-Length: 1000000\r\n\r\n"
    )
    writer.write(head.encode() + multipart(("file", "f", b"x" * 5000), close=False))
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    await still_serving(clocked_emulator, raw_http, wire_box)
    # The server learns of the disconnect asynchronously: wait (bounded) for its answer.
    for _ in range(200):
        if clocked_emulator.journal[0].status is not None:
            break
        await asyncio.sleep(0.01)
    assert clocked_emulator.journal[0].status == 400
    assert not (clocked_emulator.sandbox_root(wire_box.key) / "tmp/gone").exists()
    assert list((clocked_emulator.sandbox_root(wire_box.key).parent / "staging").iterdir()) == []


async def test_non_http_bytes(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Bytes that are not HTTP (a TLS hello on the plain port) are refused; then it serves."""
    port = int(clocked_emulator.base_url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64)
    await writer.drain()
    answer = await reader.read(100)
    writer.close()
    await writer.wait_closed()
    assert answer.split(b"\r\n", 1)[0] in (b"HTTP/1.0 400 Bad Request", b"HTTP/1.1 400 Bad Request")
    await still_serving(clocked_emulator, raw_http, wire_box)
