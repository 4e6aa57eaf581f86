"""The fault plan: scripted and seeded-random faults, cuts, garbage, delays."""

from __future__ import annotations

import contextlib

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Fault, FaultPlan

from .support import Box, data_error, idcs, new_box, upload, v2_error

CONTENT = b"0123456789" * 1000


def put(emu: Emulator, box: Box, content: bytes = CONTENT) -> None:
    (emu.sandbox_root(box.key) / "tmp/f").write_bytes(content)


async def fetch(http: aiohttp.ClientSession, box: Box) -> tuple[int, bytes]:
    async with http.get(box.files, params={"path": "/tmp/f"}, headers=box.auth) as response:
        return response.status, await response.read()


async def test_scripted_faults_in_order_then_normal(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """script() gives the next answers of a route these faults, in order, then normal ones."""
    put(clocked_emulator, wire_box)
    clocked_emulator.faults.script(
        "files.download", Fault.status(429, retry_after="0"), Fault.status(502)
    )
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/f"}, headers=wire_box.auth
    ) as response:
        await data_error(response, 429)
        assert response.headers["Retry-After"] == "0"
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/f"}, headers=wire_box.auth
    ) as response:
        await data_error(response, 502)
        assert "Retry-After" not in response.headers
    assert await fetch(raw_http, wire_box) == (200, CONTENT)
    assert clocked_emulator.faults.injected == {"429": 1, "502": 1}
    assert clocked_emulator.faults.pending("files.download") == 0


async def test_faults_only_hit_their_route(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A scripted fault waits for its own route; other routes answer normally."""
    put(clocked_emulator, wire_box)
    clocked_emulator.faults.script("files.upload", Fault.status(503))
    assert await fetch(raw_http, wire_box) == (200, CONTENT)
    async with await upload(raw_http, wire_box, "/tmp/g", b"x") as response:
        await data_error(response, 503)


async def test_fault_applies_after_authentication(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """An unauthenticated request gets 401 and does not consume the fault."""
    clocked_emulator.faults.script("files.download", Fault.status(503))
    async with raw_http.get(wire_box.files, params={"path": "/tmp/f"}) as response:
        await data_error(response, 401)
    assert clocked_emulator.faults.pending("files.download") == 1
    assert clocked_emulator.journal[-1].status == 401 and clocked_emulator.journal[-1].fault is None


async def test_v2_status_fault_has_v2_body(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A status fault on the console renders the v2 error body with X-Request-ID."""
    clocked_emulator.faults.script(
        "emulator.products", Fault.status(429, retry_after="1"), Fault.status(503)
    )
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await v2_error(response, 429, "Request.Throttled")
        assert response.headers["Retry-After"] == "1"
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await v2_error(response, 503, "Internal.ServerError")


async def test_status_fault_with_body_override(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Fault.status(body=...) sends those bytes verbatim."""
    clocked_emulator.faults.script("files.download", Fault.status(500, body=b"<html>oops</html>"))
    assert await fetch(raw_http, wire_box) == (500, b"<html>oops</html>")


@pytest.mark.parametrize(
    ("status", "body", "content_type"),
    [
        (200, b"{not json", "application/json"),
        (200, b"", "application/json"),
        (200, b'{"data": 5}', "application/json"),
        (502, b"Bad Gateway", "text/html"),
    ],
)
async def test_garbage_answers(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    status: int,
    body: bytes,
    content_type: str,
) -> None:
    """Fault.garbage sends an arbitrary raw answer (malformed JSON, empty, wrong shape)."""
    clocked_emulator.faults.script("emulator.products", Fault.garbage(status, body, content_type))
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        assert response.status == status
        assert response.headers["Content-Type"] == content_type
        assert await response.read() == body
    assert clocked_emulator.faults.injected == {"garbage": 1}


async def test_cut_after_bytes_breaks_the_body(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Fault.cut sends headers and N body bytes, then closes: the client sees a broken body."""
    put(clocked_emulator, wire_box)
    clocked_emulator.faults.script("files.download", Fault.cut(after_bytes=4096))
    received = b""
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/f"}, headers=wire_box.auth
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Length"] == str(len(CONTENT))
        with pytest.raises(aiohttp.ClientPayloadError):
            async for chunk in response.content.iter_any():
                received += chunk
    assert received == CONTENT[:4096]
    assert await fetch(raw_http, wire_box) == (200, CONTENT)
    assert clocked_emulator.journal_for("files.download")[0].fault == "cut"


async def test_cut_beyond_body_sends_everything(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A cut after more bytes than the body holds sends the whole body."""
    put(clocked_emulator, wire_box, b"short")
    clocked_emulator.faults.script("files.download", Fault.cut(after_bytes=1000))
    assert await fetch(raw_http, wire_box) == (200, b"short")


async def test_cut_json_answer(clocked_emulator: Emulator, raw_http: aiohttp.ClientSession) -> None:
    """A cut also breaks a JSON answer of the console mid-body."""
    clocked_emulator.faults.script("emulator.products", Fault.cut(after_bytes=10))
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


async def test_cut_chunked_download(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A cut of a chunked download breaks the chunked framing."""
    box = await new_box(clocked_emulator, "ap-chunked")
    put(clocked_emulator, box)
    clocked_emulator.faults.script("files.download", Fault.cut(after_bytes=100))
    async with raw_http.get(box.files, params={"path": "/tmp/f"}, headers=box.auth) as response:
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


async def test_cut_before_headers(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """cut_before_headers reads the request and closes without any response."""
    put(clocked_emulator, wire_box)
    # aiohttp itself retries an idempotent request once after such a disconnect: cut twice.
    clocked_emulator.faults.script(
        "files.download", Fault.cut_before_headers(), Fault.cut_before_headers()
    )
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await fetch(raw_http, wire_box)
    assert await fetch(raw_http, wire_box) == (200, CONTENT)
    statuses = [(r.status, r.fault) for r in clocked_emulator.journal_for("files.download")]
    assert statuses == [(None, "cut_before_headers")] * 2 + [(200, None)]


async def test_cut_before_headers_on_upload_reads_body(
    clocked_emulator: Emulator, wire_box: Box
) -> None:
    """An upload cut before headers still has its body read (and counted), and writes nothing."""
    clocked_emulator.faults.script("files.upload", Fault.cut_before_headers())
    connector = aiohttp.TCPConnector(resolver=clocked_emulator.resolver, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as http:
        with pytest.raises(aiohttp.ServerDisconnectedError):
            async with await upload(http, wire_box, "/tmp/u", b"z" * 5000):
                pass
    assert clocked_emulator.journal_for("files.upload")[0].body_size > 5000
    assert not (clocked_emulator.sandbox_root(wire_box.key) / "tmp/u").exists()


async def test_delay_then_normal_answer(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Fault.delay waits, then answers normally (a short client timeout notices it)."""
    put(clocked_emulator, wire_box)
    clocked_emulator.faults.script("files.download", Fault.delay(0.3))
    with pytest.raises(TimeoutError):
        async with raw_http.get(
            wire_box.files,
            params={"path": "/tmp/f"},
            headers=wire_box.auth,
            timeout=aiohttp.ClientTimeout(total=0.05),
        ):
            pass
    assert clocked_emulator.faults.injected == {"delay": 1}
    clocked_emulator.faults.script("files.download", Fault.delay(0.01))
    assert await fetch(raw_http, wire_box) == (200, CONTENT)  # waited out, the answer is the file
    assert clocked_emulator.faults.injected == {"delay": 2}


async def _random_sequence(seed: int) -> list[tuple[int | None, str | None]]:
    async with Emulator(idcs=idcs()) as emu:
        box = await new_box(emu)
        put(emu, box)
        emu.faults.random(
            seed=seed, rates={"429": 0.2, "502": 0.2, "cut": 0.2}, routes=("files.download",)
        )
        connector = aiohttp.TCPConnector(resolver=emu.resolver, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as http:
            for _ in range(40):
                with contextlib.suppress(aiohttp.ClientPayloadError):
                    await fetch(http, box)
        return [(r.status, r.fault) for r in emu.journal_for("files.download")]


async def test_random_faults_same_seed_same_sequence() -> None:
    """Seeded-random faults are deterministic: the same seed gives the same fault sequence."""
    first = await _random_sequence(7)
    assert first == await _random_sequence(7)
    assert first != await _random_sequence(8)
    kinds = {fault for _, fault in first}
    assert {"429", "502", "cut", None} <= kinds


async def test_random_429_carries_retry_after_and_scripts_win(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Random 429s carry Retry-After: 0; scripted faults take precedence over random ones."""
    put(clocked_emulator, wire_box)
    clocked_emulator.faults.random(seed=1, rates={"429": 1.0})
    clocked_emulator.faults.script("files.download", Fault.status(503))
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/f"}, headers=wire_box.auth
    ) as response:
        await data_error(response, 503)
    async with raw_http.get(
        wire_box.files, params={"path": "/tmp/f"}, headers=wire_box.auth
    ) as response:
        await data_error(response, 429)
        assert response.headers["Retry-After"] == "0"
    clocked_emulator.faults.clear()
    assert clocked_emulator.faults.injected == {}
    assert await fetch(raw_http, wire_box) == (200, CONTENT)


def test_fault_plan_rejects_bad_rates() -> None:
    """Rates must name known faults, lie within [0, 1] and add up to at most 1."""
    plan = FaultPlan()
    for rates in ({"418x": 0.1}, {"429": 1.5}, {"429": 0.6, "502": 0.6}, {"200": 0.1}):
        with pytest.raises(ValueError):
            plan.random(seed=1, rates=rates)
    with pytest.raises(ValueError):
        Fault.cut(after_bytes=-1)
