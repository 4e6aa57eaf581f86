"""State that moves with the clock: idempotency retention, build progression, logs."""

from __future__ import annotations

from typing import Any

import aiohttp

from sandboxkit.emulator import Emulator, ManualClock

from .support import create_template


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
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Keys are retained 24 hours by the clock: a replay before, a fresh create after."""
    first = await _create(raw_http, clocked_emulator, "k")
    manual_clock.advance(24 * 3600 - 1)
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        assert response.headers["Idempotency-Replayed"] == "true"
        assert (await response.json())["data"]["id"] == first["id"]
    async with await create_template(
        raw_http, clocked_emulator, key="k", description="other"
    ) as response:
        assert response.status == 400
    manual_clock.advance(1)
    again = await _create(raw_http, clocked_emulator, "k", description="other")
    assert again["id"] != first["id"]


async def test_consumed_key_freed_after_retention(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """A consumed key answers 409 within 24 hours and is free again after."""
    first = await _create(raw_http, clocked_emulator, "k")
    clocked_emulator.delete_template(first["id"])
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        assert response.status == 409
    manual_clock.advance(24 * 3600)
    assert (await _create(raw_http, clocked_emulator, "k"))["id"] != first["id"]


async def test_build_moves_waiting_building_ready(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """A started build goes waiting -> building -> ready over build_seconds, with timestamps."""
    data = await _create(raw_http, clocked_emulator, "k", build={"commands": ["make"]})
    (build,) = await _builds(raw_http, clocked_emulator, data["id"])
    assert build["status"] == "waiting" and "started_at" not in build
    manual_clock.advance(0.2)
    (build,) = await _builds(raw_http, clocked_emulator, data["id"])
    assert build["status"] == "building" and "started_at" in build and "finished_at" not in build
    manual_clock.advance(0.8)
    (build,) = await _builds(raw_http, clocked_emulator, data["id"])
    assert (build["status"], build["artifact_state"]) == ("ready", "present")
    assert build["started_at"] < build["finished_at"]
    assert "failure" not in build


async def test_logs_grow_with_progress_at_all_levels(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Logs come from build progress: few at start, more later, all four levels when done."""
    data = await _create(raw_http, clocked_emulator, "k", build={"commands": ["a", "b", "c"]})
    early = await _logs(raw_http, clocked_emulator, data)
    manual_clock.advance(0.5)
    middle = await _logs(raw_http, clocked_emulator, data)
    manual_clock.advance(0.5)
    done = await _logs(raw_http, clocked_emulator, data)
    assert 0 < len(early["entries"]) < len(middle["entries"]) < len(done["entries"])
    assert {e["level"] for e in done["entries"]} == {"debug", "info", "warn", "error"}
    assert done["entries"][: len(middle["entries"])] == middle["entries"]
    assert [e["offset"] for e in done["entries"]] == list(range(len(done["entries"])))
    stamps = [e["timestamp"] for e in done["entries"]]
    assert stamps == sorted(stamps)


async def test_logs_paging_has_more_and_next_offset(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Pages chain through next_offset; has_more is false on the last page."""
    data = await _create(raw_http, clocked_emulator, "k", build={"commands": ["a", "b"]})
    manual_clock.advance(2)
    everything = (await _logs(raw_http, clocked_emulator, data))["entries"]
    seen: list[dict[str, Any]] = []
    offset = 0
    while True:
        page = await _logs(raw_http, clocked_emulator, data, offset=str(offset), limit="4")
        seen += page["entries"]
        assert page["next_offset"] == offset + len(page["entries"])
        offset = page["next_offset"]
        if not page["has_more"]:
            break
    assert seen == everything
    past = await _logs(raw_http, clocked_emulator, data, offset="1000")
    assert (past["entries"], past["next_offset"], past["has_more"]) == ([], 1000, False)


async def test_failed_build_logs_error_and_failure(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """A build made to fail ends failed with its failure and an error log naming the code."""
    clocked_emulator.fail_next_build()
    data = await _create(raw_http, clocked_emulator, "k", build={})
    manual_clock.advance(0.5)
    assert (await _builds(raw_http, clocked_emulator, data["id"]))[0]["status"] == "building"
    manual_clock.advance(0.5)
    (build,) = await _builds(raw_http, clocked_emulator, data["id"])
    assert build["status"] == "failed"
    assert build["failure"]["code"] == "TemplateBuild.OutOfMemory"
    errors = (await _logs(raw_http, clocked_emulator, data, level="error"))["entries"]
    assert "TemplateBuild.OutOfMemory" in errors[-1]["message"]


async def test_split_build_has_no_logs_until_started(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """A waiting split-flow build has no log entries until it is started."""
    data = await _create(raw_http, clocked_emulator, "k")
    manual_clock.advance(100)
    assert (await _logs(raw_http, clocked_emulator, data))["entries"] == []
    url = f"{clocked_emulator.base_url}/api/v2/templates/{data['id']}/builds/{data['build_id']}"
    async with raw_http.post(
        url, headers={"Authorization": f"Bearer {clocked_emulator.api_key}"}
    ) as response:
        assert response.status == 200
    assert (await _logs(raw_http, clocked_emulator, data))["entries"]
