"""State that moves with the clock: idempotency retention, build progression, logs."""

from __future__ import annotations

from typing import Any

import aiohttp

from sandboxkit.emulator import Emulator, ManualClock

from .conftest import create_template


async def _create(
    http: aiohttp.ClientSession, emu: Emulator, key: str, **fields: Any
) -> dict[str, Any]:
    async with await create_template(http, emu, key=key, **fields) as response:
        assert response.status == 201, await response.text()
        body: dict[str, Any] = await response.json()
    return body["data"]


async def _builds(
    http: aiohttp.ClientSession, emu: Emulator, template_id: str
) -> list[dict[str, Any]]:
    url = f"{emu.base_url}/api/v2/templates/{template_id}/builds"
    async with http.get(url, headers={"Authorization": f"Bearer {emu.api_key}"}) as response:
        items: list[dict[str, Any]] = (await response.json())["items"]
    return items


async def _logs(
    http: aiohttp.ClientSession, emu: Emulator, data: dict[str, Any], **query: str
) -> dict[str, Any]:
    url = f"{emu.base_url}/api/v2/templates/{data['id']}/builds/{data['build_id']}/logs"
    async with http.get(url, params=query, headers={"Authorization": f"Bearer {emu.api_key}"}) as r:
        assert r.status == 200
        page: dict[str, Any] = (await r.json())["data"]
    return page


async def test_idempotency_key_retained_24_hours(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """Keys are retained 24 hours by the clock: a replay before, a fresh create after."""
    first = await _create(http, emu, "k")
    clock.advance(24 * 3600 - 1)
    async with await create_template(http, emu, key="k") as response:
        assert response.headers["Idempotency-Replayed"] == "true"
        assert (await response.json())["data"]["id"] == first["id"]
    async with await create_template(http, emu, key="k", description="other") as response:
        assert response.status == 400
    clock.advance(1)
    again = await _create(http, emu, "k", description="other")
    assert again["id"] != first["id"]


async def test_consumed_key_freed_after_retention(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """A consumed key answers 409 within 24 hours and is free again after."""
    first = await _create(http, emu, "k")
    emu.delete_template(first["id"])
    async with await create_template(http, emu, key="k") as response:
        assert response.status == 409
    clock.advance(24 * 3600)
    assert (await _create(http, emu, "k"))["id"] != first["id"]


async def test_build_moves_waiting_building_ready(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """A started build goes waiting -> building -> ready over build_seconds, with timestamps."""
    data = await _create(http, emu, "k", build={"commands": ["make"]})
    (build,) = await _builds(http, emu, data["id"])
    assert build["status"] == "waiting" and "started_at" not in build
    clock.advance(0.2)
    (build,) = await _builds(http, emu, data["id"])
    assert build["status"] == "building" and "started_at" in build and "finished_at" not in build
    clock.advance(0.8)
    (build,) = await _builds(http, emu, data["id"])
    assert (build["status"], build["artifact_state"]) == ("ready", "present")
    assert build["started_at"] < build["finished_at"]
    assert "failure" not in build


async def test_logs_grow_with_progress_at_all_levels(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """Logs come from build progress: few at start, more later, all four levels when done."""
    data = await _create(http, emu, "k", build={"commands": ["a", "b", "c"]})
    early = await _logs(http, emu, data)
    clock.advance(0.5)
    middle = await _logs(http, emu, data)
    clock.advance(0.5)
    done = await _logs(http, emu, data)
    assert 0 < len(early["entries"]) < len(middle["entries"]) < len(done["entries"])
    assert {e["level"] for e in done["entries"]} == {"debug", "info", "warn", "error"}
    assert done["entries"][: len(middle["entries"])] == middle["entries"]
    assert [e["offset"] for e in done["entries"]] == list(range(len(done["entries"])))
    stamps = [e["timestamp"] for e in done["entries"]]
    assert stamps == sorted(stamps)


async def test_logs_paging_has_more_and_next_offset(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """Pages chain through next_offset; has_more is false on the last page."""
    data = await _create(http, emu, "k", build={"commands": ["a", "b"]})
    clock.advance(2)
    everything = (await _logs(http, emu, data))["entries"]
    seen: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await _logs(http, emu, data, offset=str(offset), limit="4")
        seen += page["entries"]
        assert page["next_offset"] == offset + len(page["entries"])
        offset = page["next_offset"]
        if not page["has_more"]:
            break
    assert seen == everything
    past = await _logs(http, emu, data, offset="1000")
    assert (past["entries"], past["next_offset"], past["has_more"]) == ([], 1000, False)


async def test_failed_build_logs_error_and_failure(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """A build made to fail ends failed with its failure and an error log naming the code."""
    emu.fail_next_build()
    data = await _create(http, emu, "k", build={})
    clock.advance(0.5)
    assert (await _builds(http, emu, data["id"]))[0]["status"] == "building"
    clock.advance(0.5)
    (build,) = await _builds(http, emu, data["id"])
    assert build["status"] == "failed"
    assert build["failure"]["code"] == "TemplateBuild.OutOfMemory"
    errors = (await _logs(http, emu, data, level="error"))["entries"]
    assert "TemplateBuild.OutOfMemory" in errors[-1]["message"]


async def test_split_build_has_no_logs_until_started(
    emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock
) -> None:
    """A waiting split-flow build has no log entries until it is started."""
    data = await _create(http, emu, "k")
    clock.advance(100)
    assert (await _logs(http, emu, data))["entries"] == []
    url = f"{emu.base_url}/api/v2/templates/{data['id']}/builds/{data['build_id']}"
    async with http.post(url, headers={"Authorization": f"Bearer {emu.api_key}"}) as response:
        assert response.status == 200
    assert (await _logs(http, emu, data))["entries"]
