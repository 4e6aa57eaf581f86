"""Conformance of control plane v2: template create, builds, logs, auth and error bodies."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Fault, Idc, ManualClock

from .support import SIMPLE_CUSTOM, create_template, idcs, v2_error

BUILD_FIELDS = {
    "id",
    "template_id",
    "trigger",
    "status",
    "artifact_state",
    "source_type",
    "resources",
    "created_at",
    "source",
    "commands",
    "start_cmd",
}


def builds_url(emu: Emulator, template_id: str) -> str:
    return f"{emu.base_url}/api/v2/templates/{template_id}/builds"


async def created(response: aiohttp.ClientResponse) -> dict[str, Any]:
    """Check a successful create and return its data."""
    assert 200 <= response.status < 300, await response.text()
    body = await response.json()
    assert set(body) == {"request_id", "data"}
    assert body["request_id"] == response.headers["X-Request-ID"]
    assert set(body["data"]) == {"id", "build_id", "status"}
    return dict(body["data"])


async def list_builds(
    http: aiohttp.ClientSession, emu: Emulator, template_id: str, **query: str
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {emu.api_key}"}
    async with http.get(builds_url(emu, template_id), params=query, headers=headers) as response:
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
    return body


# -- POST /api/v2/templates ---------------------------------------------------------------


async def test_create_combined_flow(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Create with build: {request_id, data: {id, build_id, status}}, key echoed, build started."""
    async with await create_template(
        raw_http, clocked_emulator, key="k-combined", build={"commands": ["ls"]}
    ) as r:
        data = await created(r)
        assert r.headers["Idempotency-Key"] == "k-combined"
        assert "Idempotency-Replayed" not in r.headers
    assert data["status"] == "waiting"
    builds = (await list_builds(raw_http, clocked_emulator, data["id"]))["items"]
    assert [b["id"] for b in builds] == [data["build_id"]]
    assert set(builds[0]) >= BUILD_FIELDS
    assert builds[0]["trigger"] == "initial_build"
    assert builds[0]["commands"] == ["ls"]
    assert clocked_emulator.build_status(data["build_id"]) == "waiting"  # queued: it started
    manual_clock.advance(0.5)
    assert clocked_emulator.build_status(data["build_id"]) == "building"


async def test_create_split_flow_leaves_build_waiting(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Split flow: a Build in waiting, initial_build, absent, image; nothing starts until asked."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    manual_clock.advance(3600)
    build = (await list_builds(raw_http, clocked_emulator, data["id"]))["items"][0]
    assert (build["status"], build["trigger"], build["artifact_state"], build["source_type"]) == (
        "waiting",
        "initial_build",
        "absent",
        "image",
    )
    assert "started_at" not in build
    assert build["resources"] == {
        "cpu_count": 2,
        "memory_mb": 2048,
        "disk_size_mb": 10240,
        "architecture": "x86_64",
    }


async def test_start_build_then_conflict(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Starting a waiting build answers 200 {id, status}; starting it again is 409."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    url = f"{builds_url(clocked_emulator, data['id'])}/{data['build_id']}"
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.post(url, headers=headers) as response:
        assert response.status == 200
        body = await response.json()
        assert body["data"]["id"] == data["build_id"]
        assert body["data"]["status"] in ("waiting", "building")
        assert body["request_id"] == response.headers["X-Request-ID"]
    async with raw_http.post(url, headers=headers) as response:
        await v2_error(response, 409, "Resource.StateConflict")
    async with raw_http.post(
        f"{builds_url(clocked_emulator, data['id'])}/bld-nope", headers=headers
    ) as response:
        await v2_error(response, 404, "Resource.NotFound")
    async with raw_http.post(
        f"{builds_url(clocked_emulator, 'tpl-nope')}/{data['build_id']}", headers=headers
    ) as r:
        await v2_error(r, 404, "Resource.NotFound")


async def test_split_flow_unsupported_422(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Split flow in a data center that does not support it is rejected with 422."""
    async with await create_template(raw_http, clocked_emulator, idc_name="eu-lite") as response:
        await v2_error(response, 422, "Parameter.Invalid")
    async with await create_template(
        raw_http, clocked_emulator, key="k2", idc_name="eu-lite", build={}
    ) as response:
        await created(response)


@pytest.mark.parametrize("idc_name", [None, "", "   ", "us-denver-1"])
async def test_blank_idc_name_selects_default(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, idc_name: str | None
) -> None:
    """Omitted, empty and whitespace-only idc_name are equivalent: the default data center."""
    fields = {} if idc_name is None else {"idc_name": idc_name}
    async with await create_template(raw_http, clocked_emulator, **fields) as response:
        await created(response)


async def test_no_default_idc_and_blank_idc_name_400(raw_http: aiohttp.ClientSession) -> None:
    """If the organization has no default data center, a blank idc_name returns 400."""
    async with Emulator(idcs=idcs(), default_idc=None) as emu:
        connector = aiohttp.TCPConnector(resolver=emu.resolver)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with await create_template(session, emu, idc_name=" ") as response:
                await v2_error(response, 400, "Parameter.Invalid")
            async with await create_template(session, emu, idc_name="us-denver-1") as response:
                await created(response)


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "ok", "resources": dict(SIMPLE_CUSTOM)}
    for key, value in changes.items():
        if key.startswith("r_"):
            body["resources"][key[2:]] = value
        else:
            body[key] = value
    return body


INVALID_BODIES = {
    "name missing": {"resources": SIMPLE_CUSTOM},
    "name empty": _body(name=""),
    "name 65 chars": _body(name="a" * 65),
    "name bad chars": _body(name="has space"),
    "name not string": _body(name=7),
    "description 257": _body(description="d" * 257),
    "resources missing": {"name": "ok"},
    "resources not object": _body(resources="custom"),
    "resources no type": _body(resources={"cpu_count": 2, "memory_mb": 1, "disk_size_mb": 1}),
    "preset and custom mixed": _body(
        resources={"type": "preset", "product": "sku-small", "cpu_count": 2}
    ),
    "custom with product": _body(r_product="sku-small"),
    "preset unknown product": _body(resources={"type": "preset", "product": "sku-nope"}),
    "cpu 17": _body(r_cpu_count=17),
    "cpu 0": _body(r_cpu_count=0),
    "cpu string": _body(r_cpu_count="2"),
    "cpu bool": _body(r_cpu_count=True),
    "memory 65537": _body(r_memory_mb=65537),
    "disk 65537": _body(r_disk_size_mb=65537),
    "disk missing": {"name": "ok", "resources": {"type": "custom", "cpu_count": 1, "memory_mb": 1}},
    "architecture arm": _body(r_architecture="arm64"),
    "labels not strings": _body(labels={"a": 1}),
    "build not object": _body(build=["ls"]),
    "unknown field": _body(colour="blue"),
    "unknown idc": _body(idc_name="mars-1"),
    "body is array": [1, 2],
}


@pytest.mark.parametrize("body", list(INVALID_BODIES.values()), ids=list(INVALID_BODIES))
async def test_create_validation_400(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, body: Any
) -> None:
    """Template create request rules and limits: a broken one is 400 Parameter.Invalid."""
    async with await create_template(raw_http, clocked_emulator, body) as response:
        await v2_error(response, 400, "Parameter.Invalid")
        assert response.headers["Idempotency-Key"] == "key-1"


async def test_create_accepts_the_limits(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Name of 64, description of 256, 16 vCPU, 65536 MiB memory and disk are accepted."""
    body = _body(
        name="n" * 64,
        description="d" * 256,
        r_cpu_count=16,
        r_memory_mb=65536,
        r_disk_size_mb=65536,
        labels={"team": "a"},
    )
    async with await create_template(raw_http, clocked_emulator, body) as response:
        await created(response)


async def test_preset_resources_echo_product(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Preset resources: the catalog entry is used as configured, beyond the custom limits."""
    body = {"name": "big", "resources": {"type": "preset", "product": "sku-xlarge"}}
    async with await create_template(raw_http, clocked_emulator, body) as response:
        data = await created(response)
    build = (await list_builds(raw_http, clocked_emulator, data["id"]))["items"][0]
    assert (build["product"], build["product_name"]) == ("sku-xlarge", "X_LARGE")
    assert build["resources"]["cpu_count"] == 32


@pytest.mark.parametrize("key", [None, "", "has space", "tab\tkey", "k" * 65, "é-key"])
async def test_idempotency_key_rules_400(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, key: str | None
) -> None:
    """Idempotency-Key is required: 1-64 printable ASCII characters, no whitespace."""
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    body = {"name": "x", "resources": SIMPLE_CUSTOM}
    url = f"{clocked_emulator.base_url}/api/v2/templates"
    async with raw_http.post(url, json=body, headers=headers) as response:
        await v2_error(response, 400, "Parameter.Invalid")


async def test_idempotency_key_of_64_printable_chars(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A 64-character key of printable ASCII is accepted and matched byte for byte."""
    key = "!~" * 32
    async with await create_template(raw_http, clocked_emulator, key=key) as response:
        await created(response)
        assert response.headers["Idempotency-Key"] == key


async def test_replay_returns_same_ids(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Replay: an identical body under the same key returns the same Template and Build."""
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        first = await created(response)
    body = {"resources": SIMPLE_CUSTOM, "name": "tpl"}  # same JSON, other key order
    async with await create_template(raw_http, clocked_emulator, body, key="k") as response:
        again = await created(response)
        assert response.headers["Idempotency-Replayed"] == "true"
        assert response.headers["Idempotency-Key"] == "k"
    assert (again["id"], again["build_id"]) == (first["id"], first["build_id"])
    assert (await list_builds(raw_http, clocked_emulator, first["id"]))["total"] == 1


async def test_same_key_other_body_400_mismatch(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Same Idempotency-Key with a different body: 400 Sandbox.IdempotentParameterMismatch."""
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        await created(response)
    async with await create_template(
        raw_http, clocked_emulator, key="k", description="changed"
    ) as response:
        await v2_error(response, 400, "Sandbox.IdempotentParameterMismatch")


async def test_key_of_deleted_template_409_consumed(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Template deleted: the key used for its creation answers 409 Sandbox.IdempotentKeyConsumed."""
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        data = await created(response)
    clocked_emulator.delete_template(data["id"])
    async with await create_template(raw_http, clocked_emulator, key="k") as response:
        await v2_error(response, 409, "Sandbox.IdempotentKeyConsumed")
    async with raw_http.get(
        builds_url(clocked_emulator, data["id"]),
        headers={"Authorization": f"Bearer {clocked_emulator.api_key}"},
    ) as r:
        await v2_error(r, 404, "Resource.NotFound")


async def test_quota_exceeded_403_with_details(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Resource.QuotaExceeded carries details (status 403 in the emulator)."""
    clocked_emulator.template_quota = 1
    async with await create_template(raw_http, clocked_emulator, key="a") as response:
        await created(response)
    async with await create_template(raw_http, clocked_emulator, key="b") as response:
        body = await v2_error(response, 403, "Resource.QuotaExceeded")
    assert isinstance(body["details"], dict) and body["details"]["limit"] == 1


@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        ("application/json", b"{not json"),
        ("application/json", b""),
        ("text/plain", b"{}"),
        ("application/json", b'{"name": NaN}'),
    ],
)
async def test_malformed_body_400(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, content_type: str, data: bytes
) -> None:
    """A body that is not a JSON object sent as application/json is 400 Parameter.Invalid."""
    headers = {
        "Authorization": f"Bearer {clocked_emulator.api_key}",
        "Idempotency-Key": "k",
        "Content-Type": content_type,
    }
    async with raw_http.post(
        f"{clocked_emulator.base_url}/api/v2/templates", data=data, headers=headers
    ) as r:
        await v2_error(r, 400, "Parameter.Invalid")


# -- GET .../builds -------------------------------------------------------------------------


async def test_builds_list_paging_newest_first(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """List Builds: {request_id, total, page, page_size, items}, newest first, defaults 1 and 20."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    manual_clock.advance(1)
    extra = clocked_emulator.add_builds(data["id"], 44)
    body = await list_builds(raw_http, clocked_emulator, data["id"])
    assert set(body) == {"request_id", "total", "page", "page_size", "items"}
    assert (body["total"], body["page"], body["page_size"]) == (45, 1, 20)
    assert [b["id"] for b in body["items"]] == extra[::-1][:20]
    last = await list_builds(raw_http, clocked_emulator, data["id"], page="3", page_size="20")
    assert [b["id"] for b in last["items"]] == [*extra[::-1][40:], data["build_id"]]
    beyond = await list_builds(raw_http, clocked_emulator, data["id"], page="9", page_size="100")
    assert (beyond["items"], beyond["total"]) == ([], 45)


@pytest.mark.parametrize(
    "query",
    [
        {"page": "0"},
        {"page": "-1"},
        {"page": "x"},
        {"page": "1.5"},
        {"page_size": "0"},
        {"page_size": "101"},
        {"page_size": ""},
        {"page_size": "2e1"},
    ],
)
async def test_builds_list_bad_paging_400(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, query: dict[str, str]
) -> None:
    """Page min 1 and page size 1-100, integers only: otherwise 400 Parameter.Invalid."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(
        builds_url(clocked_emulator, data["id"]), params=query, headers=headers
    ) as response:
        await v2_error(response, 400, "Parameter.Invalid")


async def test_builds_list_page_size_bounds_accepted(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """page_size 1 and 100 are accepted."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    assert (await list_builds(raw_http, clocked_emulator, data["id"], page_size="1"))[
        "page_size"
    ] == 1
    assert (await list_builds(raw_http, clocked_emulator, data["id"], page_size="100"))[
        "page_size"
    ] == 100


async def test_builds_list_unknown_template_404(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """List Builds of an unknown template: 404 Resource.NotFound."""
    async with raw_http.get(
        builds_url(clocked_emulator, "tpl-x"),
        headers={"Authorization": f"Bearer {clocked_emulator.api_key}"},
    ) as r:
        await v2_error(r, 404, "Resource.NotFound")


# -- GET .../logs -------------------------------------------------------------------------------


async def _finished_build(emu: Emulator, http: aiohttp.ClientSession, clock: ManualClock) -> str:
    async with await create_template(http, emu, build={"commands": ["a", "b"]}) as response:
        data = await created(response)
    clock.advance(5)
    return f"{builds_url(emu, data['id'])}/{data['build_id']}/logs"


async def test_logs_page_shape(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Logs: {request_id, data: {entries: [{offset, level, message, timestamp}], next_offset,
    has_more}}."""
    url = await _finished_build(clocked_emulator, raw_http, manual_clock)
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(url, params={"limit": "3"}, headers=headers) as response:
        assert response.status == 200
        body = await response.json()
    assert body["request_id"] == response.headers["X-Request-ID"]
    page = body["data"]
    assert [e["offset"] for e in page["entries"]] == [0, 1, 2]
    assert set(page["entries"][0]) == {"offset", "level", "message", "timestamp"}
    assert page["entries"][0]["timestamp"].endswith("Z")
    assert (page["next_offset"], page["has_more"]) == (3, True)


async def test_logs_level_filter_offsets_over_filtered(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """Offsets are zero-based over the filtered collection; all four levels appear."""
    url = await _finished_build(clocked_emulator, raw_http, manual_clock)
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    for level in ("debug", "info", "warn", "error"):
        async with raw_http.get(url, params={"level": level}, headers=headers) as response:
            page = (await response.json())["data"]
        assert page["entries"], level
        assert {e["level"] for e in page["entries"]} == {level}
        assert [e["offset"] for e in page["entries"]] == list(range(len(page["entries"])))
        assert (page["next_offset"], page["has_more"]) == (len(page["entries"]), False)


@pytest.mark.parametrize(
    "query",
    [
        {"offset": "-1"},
        {"offset": "a"},
        {"limit": "0"},
        {"limit": "101"},
        {"level": "trace"},
        {"level": "INFO"},
    ],
)
async def test_logs_bad_query_400(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    manual_clock: ManualClock,
    query: dict[str, str],
) -> None:
    """Log query rules: offset >= 0, limit 1-100, level one of the four: else 400."""
    url = await _finished_build(clocked_emulator, raw_http, manual_clock)
    async with raw_http.get(
        url, params=query, headers={"Authorization": f"Bearer {clocked_emulator.api_key}"}
    ) as r:
        await v2_error(r, 400, "Parameter.Invalid")


async def test_logs_unknown_build_404(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Logs of an unknown build: 404 Resource.NotFound."""
    async with await create_template(raw_http, clocked_emulator) as response:
        data = await created(response)
    url = f"{builds_url(clocked_emulator, data['id'])}/bld-none/logs"
    async with raw_http.get(
        url, headers={"Authorization": f"Bearer {clocked_emulator.api_key}"}
    ) as response:
        await v2_error(response, 404, "Resource.NotFound")


# -- auth, errors, other routes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "authorization",
    # "{key}" is the emulator's real API key: right key, wrong scheme must fail too.
    [None, "Bearer", "Bearer wrong", "Basic abc", "sk-emu", "{key}", "Basic {key}", "Token {key}"],
)
async def test_v2_requires_bearer_401(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, authorization: str | None
) -> None:
    """Control plane v2 requires Authorization: Bearer: otherwise 401 Auth.Unauthorized."""
    headers = (
        {"Authorization": authorization.format(key=clocked_emulator.api_key)}
        if authorization
        else {}
    )
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await v2_error(response, 401, "Auth.Unauthorized")


async def test_builds_list_quota_error_body(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """The quota error defined for list Builds carries details (shown via the fault plan)."""
    clocked_emulator.faults.script("builds.list", Fault.status(403))
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(builds_url(clocked_emulator, "tpl-x"), headers=headers) as response:
        body = await v2_error(response, 403, "Resource.QuotaExceeded")
    assert isinstance(body["details"], dict)


async def test_internal_error_500(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Internal.ServerError is a 5xx v2 error body (shown via the fault plan)."""
    clocked_emulator.faults.script("builds.list", Fault.status(500))
    async with raw_http.get(
        builds_url(clocked_emulator, "tpl-x"),
        headers={"Authorization": f"Bearer {clocked_emulator.api_key}"},
    ) as r:
        await v2_error(r, 500, "Internal.ServerError")


async def test_products_and_unknown_path(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """GET /api/v2/products lists SKUs; an unknown v2 path is 404 Resource.NotFound."""
    headers = {"Authorization": f"Bearer {clocked_emulator.api_key}"}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        body = await response.json()
        assert body["request_id"] == response.headers["X-Request-ID"]
    assert "sku-small" in [p["product"] for p in body["data"]]
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/nothing", headers=headers
    ) as response:
        await v2_error(response, 404, "Resource.NotFound")
    async with raw_http.delete(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await v2_error(response, 405, "Parameter.Invalid")


async def test_failed_build_leaves_template(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, manual_clock: ManualClock
) -> None:
    """A failed initial Build has failure {code, message}; the Template remains and can rebuild."""
    clocked_emulator.fail_next_build("TemplateBuild.OutOfMemory", "out of memory at step 2")
    async with await create_template(raw_http, clocked_emulator, build={}) as response:
        data = await created(response)
    manual_clock.advance(2)
    build = (await list_builds(raw_http, clocked_emulator, data["id"]))["items"][0]
    assert build["status"] == "failed"
    assert build["failure"] == {
        "code": "TemplateBuild.OutOfMemory",
        "message": "out of memory at step 2",
    }
    assert "finished_at" in build
    (rebuild,) = clocked_emulator.add_builds(data["id"], 1)
    url = f"{builds_url(clocked_emulator, data['id'])}/{rebuild}"
    async with raw_http.post(
        url, headers={"Authorization": f"Bearer {clocked_emulator.api_key}"}
    ) as response:
        assert response.status == 200
    manual_clock.advance(2)
    assert (await list_builds(raw_http, clocked_emulator, data["id"]))["items"][0][
        "status"
    ] == "ready"


async def test_idc_options_are_per_emulator() -> None:
    """An emulator rejects a default IDC it does not have."""
    with pytest.raises(ValueError, match="default_idc"):
        Emulator(idcs=[Idc("a-1")], default_idc="b-2")
