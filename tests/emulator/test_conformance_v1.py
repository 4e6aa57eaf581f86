"""Conformance of the version 1 operations: bodies, auth, validation and domain errors."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Fault, ManualClock

from .support import v1_error, v1_validation

IMAGE_STRINGS = (
    "id",
    "name",
    "BootMode",
    "OSArchitecture",
    "OSSeries",
    "OSVersion",
    "SystemDiskSize",
    "icon",
    "path",
    "idc",
    "orgId",
    "createdAt",
    "type",
)


def v1(emu: Emulator, path: str) -> str:
    return f"{emu.base_url}/api/v1{path}"


async def ok(response: aiohttp.ClientResponse, status: int = 200) -> Any:
    assert response.status == status, await response.text()
    return await response.json()


async def containers(http: aiohttp.ClientSession, emu: Emulator, bearer: dict[str, str]) -> str:
    body = {
        "name": "c1",
        "templateId": emu.v1_template_ids[0],
        "count": 1,
        "product": "p-1",
        "envs": [{"name": "SSH_PUBLIC_KEY", "value": "ssh-ed25519 AAAA"}],
    }
    async with http.post(v1(emu, "/containers"), json=body, headers=bearer) as response:
        created = await ok(response, 201)
    assert created["result"] == "ok"
    return str(created["ids"][0])


# -- OAuth ----------------------------------------------------------------------------------------


async def test_oauth_exchange_without_credential(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """POST /oauth/token shows no credential and returns {accessToken}, usable as a bearer."""
    body = {"provider": "github", "code": clocked_emulator.oauth_code}
    async with raw_http.post(v1(clocked_emulator, "/oauth/token"), json=body) as response:
        token = (await ok(response))["accessToken"]
    headers = {"Authorization": f"Bearer {token}"}
    async with raw_http.get(
        v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}"), headers=headers
    ) as response:
        await ok(response)
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        await ok(response)


async def test_oauth_bad_or_used_code_1200(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A failed code exchange is group oauth, code 1200; codes are one-time."""
    code = clocked_emulator.issue_oauth_code()
    async with raw_http.post(
        v1(clocked_emulator, "/oauth/token"), json={"provider": "g", "code": code}
    ) as r:
        await ok(r)
    for attempt in (code, "oac-made-up"):
        body = {"provider": "g", "code": attempt}
        async with raw_http.post(v1(clocked_emulator, "/oauth/token"), json=body) as response:
            await v1_error(response, 400, "oauth", 1200)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "x"}, "provider"),
        ({"provider": "g"}, "code"),
        ({"provider": "g", "code": 5}, "code"),
        ({"provider": "", "code": "x"}, "provider"),
    ],
)
async def test_oauth_missing_fields_validation(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, body: dict[str, Any], field: str
) -> None:
    """provider and code are both required: a validation body names the field."""
    async with raw_http.post(v1(clocked_emulator, "/oauth/token"), json=body) as response:
        await v1_validation(response, field)


async def test_v1_malformed_json_validation(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A malformed JSON body is a 400 validation body."""
    headers = {"Content-Type": "application/json"}
    async with raw_http.post(
        v1(clocked_emulator, "/oauth/token"), data=b"{nope", headers=headers
    ) as response:
        await v1_validation(response, "body")


# -- API keys -------------------------------------------------------------------------------------


async def test_api_key_created_once_and_usable(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    bearer: dict[str, str],
    manual_clock: ManualClock,
) -> None:
    """POST /organizations/{orgId}/api-keys returns {key}; it authenticates until expiresAt."""
    body = {"name": "ci", "scope": "ce_resource", "expiresAt": int(manual_clock()) + 60}
    async with raw_http.post(
        v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}/api-keys"),
        json=body,
        headers=bearer,
    ) as r:
        key = (await ok(r, 201))["key"]
    headers = {"Authorization": f"Bearer {key}"}
    async with raw_http.get(v1(clocked_emulator, "/images"), headers=headers) as response:
        await ok(response)
    manual_clock.advance(61)
    async with raw_http.get(v1(clocked_emulator, "/images"), headers=headers) as response:
        await v1_error(response, 401, "auth", 1100)


async def test_api_key_defaults_never_expire(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    bearer: dict[str, str],
    manual_clock: ManualClock,
) -> None:
    """scope defaults to ie_model and a key without expiresAt does not expire."""
    url = v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}/api-keys")
    async with raw_http.post(url, json={"name": "forever"}, headers=bearer) as response:
        key = (await ok(response, 201))["key"]
    manual_clock.advance(10 * 365 * 86400)
    async with raw_http.get(
        v1(clocked_emulator, "/images"), headers={"Authorization": f"Bearer {key}"}
    ) as r:
        await ok(r)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": "k", "scope": "admin"}, "scope"),
        ({"name": "k", "expiresAt": 1}, "expiresAt"),
        ({"name": "k", "expiresAt": "soon"}, "expiresAt"),
    ],
)
async def test_api_key_validation(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    bearer: dict[str, str],
    body: dict[str, Any],
    field: str,
) -> None:
    """name is required, scope is ie_model or ce_resource, expiresAt must be after now."""
    url = v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}/api-keys")
    async with raw_http.post(url, json=body, headers=bearer) as response:
        await v1_validation(response, field)


async def test_api_key_org_errors(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """orgId must be a UUID (else validation) of an existing organization (else organization/2)."""
    body = {"name": "k"}
    async with raw_http.post(
        v1(clocked_emulator, "/organizations/not-a-uuid/api-keys"), json=body, headers=bearer
    ) as r:
        await v1_validation(r, "org_id")
    other = str(uuid.uuid4())
    async with raw_http.post(
        v1(clocked_emulator, f"/organizations/{other}/api-keys"), json=body, headers=bearer
    ) as r:
        await v1_error(r, 404, "organization", 2)


# -- organizations --------------------------------------------------------------------------------


async def test_get_organization(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /organizations/{orgId} returns {name}."""
    async with raw_http.get(
        v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}"), headers=bearer
    ) as response:
        body = await ok(response)
    assert isinstance(body["name"], str) and body["name"]


async def test_get_organization_errors(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Unknown organization is organization/2, a database error organization/1201 with 500."""
    async with raw_http.get(
        v1(clocked_emulator, f"/organizations/{uuid.uuid4()}"), headers=bearer
    ) as response:
        await v1_error(response, 404, "organization", 2)
    async with raw_http.get(v1(clocked_emulator, "/organizations/123"), headers=bearer) as response:
        await v1_validation(response, "org_id")
    clocked_emulator.break_org_reads()
    async with raw_http.get(
        v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}"), headers=bearer
    ) as response:
        await v1_error(response, 500, "organization", 1201)
    clocked_emulator.break_org_reads(False)
    clocked_emulator.faults.script("v1.organizations.get", Fault.status(500))
    async with raw_http.get(
        v1(clocked_emulator, f"/organizations/{clocked_emulator.org_id}"), headers=bearer
    ) as response:
        await v1_error(response, 500, "organization", 1201)


# -- images and templates -------------------------------------------------------------------------


async def test_images_have_every_field(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /images returns an array of Image with every field of the Image table."""
    async with raw_http.get(v1(clocked_emulator, "/images"), headers=bearer) as response:
        images = await ok(response)
    assert len(images) >= 2
    for image in images:
        for field in IMAGE_STRINGS:
            assert isinstance(image[field], str), field
        assert uuid.UUID(image["id"]) and uuid.UUID(image["orgId"])
        assert image["BootMode"] in ("UEFI", "Legacy")
        assert image["type"] in ("Public", "Customized")
        assert len(image["name"]) <= 50
        assert len(image["supportedProducts"]) >= 1
        for partition in image["DefaultPartitionTable"]:
            assert set(partition) == {"fileSystem", "mountPoint", "name", "size"}


async def test_images_filters(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """The two optional filters (name, os_series) narrow the list."""
    async with raw_http.get(
        v1(clocked_emulator, "/images"), params={"name": "UBUNTU"}, headers=bearer
    ) as r:
        assert [i["name"] for i in await ok(r)] == ["ubuntu-22.04"]
    async with raw_http.get(
        v1(clocked_emulator, "/images"), params={"os_series": "debian"}, headers=bearer
    ) as r:
        assert [i["OSSeries"] for i in await ok(r)] == ["debian"]


@pytest.mark.parametrize(
    "query",
    [{"name": "a" * 51}, {"name": "bad name"}, {"os_series": "x/y"}, {"os_series": "s" * 257}],
)
async def test_images_filter_bounds(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    bearer: dict[str, str],
    query: dict[str, str],
) -> None:
    """Filter length and pattern bounds (letters, digits, ., _, -) give a validation body."""
    async with raw_http.get(
        v1(clocked_emulator, "/images"), params=query, headers=bearer
    ) as response:
        await v1_validation(response, next(iter(query)))


async def test_get_template(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /templates/{id} returns a Template (v1) with its fields."""
    template_id = clocked_emulator.v1_template_ids[0]
    async with raw_http.get(
        v1(clocked_emulator, f"/templates/{template_id}"), headers=bearer
    ) as response:
        body = await ok(response)
    assert body["id"] == template_id
    assert isinstance(body["official"], bool)
    assert set(body["credential"]) == {"secret", "username"}
    assert body["status"] in ("draft", "published", "unpublished")
    for field in ("name", "path", "orgId", "description"):
        assert isinstance(body[field], str)


async def test_get_template_errors(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """An unknown template is a domain error 404; a non-UUID id a validation body."""
    async with raw_http.get(
        v1(clocked_emulator, f"/templates/{uuid.uuid4()}"), headers=bearer
    ) as response:
        await v1_error(response, 404, "template", 2)
    async with raw_http.get(v1(clocked_emulator, "/templates/xyz"), headers=bearer) as response:
        await v1_validation(response, "id")


async def test_list_templates_not_guaranteed_shape(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /templates lists container templates; shape as Template v1 is not guaranteed."""
    async with raw_http.get(v1(clocked_emulator, "/templates"), headers=bearer) as response:
        body = await ok(response)
    assert isinstance(body, list) and len(body) == len(clocked_emulator.v1_template_ids)
    assert any(
        "credential" not in t or t.get("status") not in ("draft", "published", "unpublished")
        for t in body
    )


# -- containers, elastic IPs, VPCs ----------------------------------------------------------------


async def test_container_lifecycle(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Containers: create, GET record, POST shell {urlPath}, DELETE {result}; then 404."""
    container_id = await containers(raw_http, clocked_emulator, bearer)
    async with raw_http.get(
        v1(clocked_emulator, f"/containers/{container_id}"), headers=bearer
    ) as response:
        record = await ok(response)
    assert record["id"] == container_id and record["idc"] == "us-denver-1"
    async with raw_http.post(
        v1(clocked_emulator, f"/containers/{container_id}/shell"), headers=bearer
    ) as response:
        assert (await ok(response))["urlPath"].startswith("/")
    async with raw_http.delete(
        v1(clocked_emulator, f"/containers/{container_id}"), headers=bearer
    ) as response:
        assert isinstance((await ok(response))["result"], str)
    async with raw_http.get(
        v1(clocked_emulator, f"/containers/{container_id}"), headers=bearer
    ) as response:
        await v1_error(response, 404, "container", 2)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"name": None}, "name"),
        ({"templateId": "nope"}, "templateId"),
        ({"count": 0}, "count"),
        ({"product": 3}, "product"),
        ({"envs": [{"name": "A"}]}, "envs"),
        ({"idc": "mars"}, "idc"),
    ],
)
async def test_container_create_validation(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    bearer: dict[str, str],
    changes: dict[str, Any],
    field: str,
) -> None:
    """Container create request fields are validated with a validation body."""
    body = {
        "name": "c",
        "templateId": clocked_emulator.v1_template_ids[0],
        "count": 2,
        "product": "p",
    }
    body.update(changes)
    body = {k: v for k, v in body.items() if v is not None}
    async with raw_http.post(
        v1(clocked_emulator, "/containers"), json=body, headers=bearer
    ) as response:
        await v1_validation(response, field)


async def test_elastic_ip_associate_and_release(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Associating ({instanceID}) and releasing an elastic IP both return {result}."""
    container_id = await containers(raw_http, clocked_emulator, bearer)
    eip = clocked_emulator.elastic_ip_ids[0]
    url = v1(clocked_emulator, f"/elastic-ips/{eip}/associate")
    async with raw_http.post(url, json={"instanceID": container_id}, headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with raw_http.post(url, json={"instanceID": "not-uuid"}, headers=bearer) as response:
        await v1_validation(response, "instanceID")
    async with raw_http.post(
        url, json={"instanceID": str(uuid.uuid4())}, headers=bearer
    ) as response:
        await v1_error(response, 404, "container", 2)
    async with raw_http.delete(
        v1(clocked_emulator, f"/elastic-ips/{eip}"), headers=bearer
    ) as response:
        assert isinstance((await ok(response))["result"], str)
    async with raw_http.delete(
        v1(clocked_emulator, f"/elastic-ips/{eip}"), headers=bearer
    ) as response:
        await v1_error(response, 404, "elastic_ip", 2)


async def test_release_default_vpc(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """DELETE /vpcs/{id} releases the default VPC with {result}; again it is gone."""
    (vpc,) = clocked_emulator.vpc_ids
    async with raw_http.delete(v1(clocked_emulator, f"/vpcs/{vpc}"), headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with raw_http.delete(v1(clocked_emulator, f"/vpcs/{vpc}"), headers=bearer) as response:
        await v1_error(response, 404, "vpc", 2)


# -- auth and unknown paths -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/images"),
        ("GET", "/templates"),
        ("POST", "/containers"),
        ("DELETE", "/vpcs/x"),
        ("GET", "/organizations/x"),
    ],
)
async def test_v1_requires_bearer(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, method: str, path: str
) -> None:
    """Every v1 API except the OAuth exchange requires a bearer: a domain error with 401."""
    async with raw_http.request(
        method, v1(clocked_emulator, path), headers={"Authorization": "Bearer bad"}
    ) as r:
        await v1_error(r, 401, "auth", 1100)


async def test_v1_unknown_path(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """An unknown v1 path is a 404 domain error, not a v2 body."""
    async with raw_http.get(v1(clocked_emulator, "/nothing/here"), headers=bearer) as response:
        await v1_error(response, 404, "gateway", 404)
