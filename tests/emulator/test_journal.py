"""The journal: every request either server received, with what it was and how it ended."""

from __future__ import annotations

import aiohttp
import attrs
import pytest

from sandboxkit.emulator import Emulator, Fault, RecordedRequest

from .support import Box, upload


async def test_console_request_recorded(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A console request is recorded with its method, host, path, query, headers, route, status."""
    url = f"{clocked_emulator.base_url}/api/v2/templates/tpl-x/builds"
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}", "X-Custom": "yes"}
    async with raw_http.get(
        url, params={"page": "2", "page_size": "5"}, headers=headers
    ) as response:
        await response.read()
    (record,) = clocked_emulator.journal
    assert record.server == "console"
    assert (record.method, record.path, record.route) == (
        "GET",
        "/api/v2/templates/tpl-x/builds",
        "builds.list",
    )
    assert record.host == clocked_emulator.base_url.removeprefix("http://")
    assert record.query == {"page": "2", "page_size": "5"}
    assert record.headers["x-custom"] == "yes" and record.headers["X-CUSTOM"] == "yes"
    assert record.sandbox_key is None
    assert (record.status, record.body_size, record.fault) == (404, 0, None)
    assert record.request_id == response.headers["X-Request-ID"]


async def test_data_request_recorded_with_streamed_body_size(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A data-plane upload is recorded with its sandbox key, route and the bytes received."""
    content = b"x" * 300_000
    async with await upload(raw_http, wire_box, "/tmp/in", content) as response:
        assert response.status == 200
    (record,) = clocked_emulator.journal_for("files.upload")
    assert (record.server, record.method, record.sandbox_key) == ("data", "POST", wire_box.key)
    assert record.host == f"{wire_box.key}.{wire_box.domain}"
    assert record.query == {"path": "/tmp/in"}
    assert record.headers["X-Access-Token"] == wire_box.token
    assert record.status == 200
    assert len(content) < record.body_size < len(content) + 500
    assert record.request_id is None


async def test_journal_order_filter_and_clear(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Entries are in arrival order; journal_for filters by route; journal.clear() empties it."""
    clocked_emulator.faults.script("files.download", Fault.status(429))
    for path in ("/tmp/a", "/tmp/b"):
        async with raw_http.get(
            wire_box.files, params={"path": path}, headers=wire_box.auth
        ) as response:
            await response.read()
    async with raw_http.get(f"{clocked_emulator.base_url}/api/v1/images") as response:
        await response.read()
    assert [r.route for r in clocked_emulator.journal] == [
        "files.download",
        "files.download",
        "v1.images.list",
    ]
    assert [(r.status, r.fault) for r in clocked_emulator.journal_for("files.download")] == [
        (429, "429"),
        (404, None),
    ]
    assert clocked_emulator.journal[2].status == 401
    clocked_emulator.journal.clear()
    assert clocked_emulator.journal == [] and clocked_emulator.journal_for("files.download") == []


async def test_unmatched_route_recorded_as_none(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A request that matches no route is recorded with route None."""
    async with raw_http.get(
        wire_box.files.replace("/files", "/other"), headers=wire_box.auth
    ) as response:
        await response.read()
    assert clocked_emulator.journal[0].route is None and clocked_emulator.journal[0].status == 404


def test_recorded_request_is_frozen() -> None:
    """RecordedRequest is a frozen attrs value."""
    from sandboxkit.emulator._values import frozen_headers

    record = RecordedRequest(
        "data", "GET", "h", "/files", {}, frozen_headers({}), "k", "files.download"
    )
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        record.status = 200  # type: ignore[misc]
