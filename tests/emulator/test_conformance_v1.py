"""Conformance of the version 1 operations: bodies, auth, validation and domain errors."""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Fault, ManualClock

from .conftest import v1_error, v1_validation

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
    emu: Emulator, http: aiohttp.ClientSession
) -> None:
    """POST /oauth/token shows no credential and returns {accessToken}, usable as a bearer."""
    body = {"provider": "github", "code": emu.oauth_code}
    async with http.post(v1(emu, "/oauth/token"), json=body) as response:
        token = (await ok(response))["accessToken"]
    headers = {"Authorization": f"Bearer {token}"}
    async with http.get(v1(emu, f"/organizations/{emu.org_id}"), headers=headers) as response:
        await ok(response)
    async with http.get(f"{emu.base_url}/api/v2/products", headers=headers) as response:
        await ok(response)


async def test_oauth_bad_or_used_code_1200(emu: Emulator, http: aiohttp.ClientSession) -> None:
    """A failed code exchange is group oauth, code 1200; codes are one-time."""
    code = emu.issue_oauth_code()
    async with http.post(v1(emu, "/oauth/token"), json={"provider": "g", "code": code}) as r:
        await ok(r)
    for attempt in (code, "oac-made-up"):
        body = {"provider": "g", "code": attempt}
        async with http.post(v1(emu, "/oauth/token"), json=body) as response:
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
    emu: Emulator, http: aiohttp.ClientSession, body: dict[str, Any], field: str
) -> None:
    """provider and code are both required: a validation body names the field."""
    async with http.post(v1(emu, "/oauth/token"), json=body) as response:
        await v1_validation(response, field)


async def test_v1_malformed_json_validation(emu: Emulator, http: aiohttp.ClientSession) -> None:
    """A malformed JSON body is a 400 validation body."""
    headers = {"Content-Type": "application/json"}
    async with http.post(v1(emu, "/oauth/token"), data=b"{nope", headers=headers) as response:
        await v1_validation(response, "body")


# -- API keys -------------------------------------------------------------------------------------


async def test_api_key_created_once_and_usable(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str], clock: ManualClock
) -> None:
    """POST /organizations/{orgId}/api-keys returns {key}; it authenticates until expiresAt."""
    body = {"name": "ci", "scope": "ce_resource", "expiresAt": int(clock()) + 60}
    async with http.post(
        v1(emu, f"/organizations/{emu.org_id}/api-keys"), json=body, headers=bearer
    ) as r:
        key = (await ok(r, 201))["key"]
    headers = {"Authorization": f"Bearer {key}"}
    async with http.get(v1(emu, "/images"), headers=headers) as response:
        await ok(response)
    clock.advance(61)
    async with http.get(v1(emu, "/images"), headers=headers) as response:
        await v1_error(response, 401, "auth", 1100)


async def test_api_key_defaults_never_expire(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str], clock: ManualClock
) -> None:
    """scope defaults to ie_model and a key without expiresAt does not expire."""
    url = v1(emu, f"/organizations/{emu.org_id}/api-keys")
    async with http.post(url, json={"name": "forever"}, headers=bearer) as response:
        key = (await ok(response, 201))["key"]
    clock.advance(10 * 365 * 86400)
    async with http.get(v1(emu, "/images"), headers={"Authorization": f"Bearer {key}"}) as r:
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
    emu: Emulator,
    http: aiohttp.ClientSession,
    bearer: dict[str, str],
    body: dict[str, Any],
    field: str,
) -> None:
    """name is required, scope is ie_model or ce_resource, expiresAt must be after now."""
    url = v1(emu, f"/organizations/{emu.org_id}/api-keys")
    async with http.post(url, json=body, headers=bearer) as response:
        await v1_validation(response, field)


async def test_api_key_org_errors(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """orgId must be a UUID (else validation) of an existing organization (else organization/2)."""
    body = {"name": "k"}
    async with http.post(
        v1(emu, "/organizations/not-a-uuid/api-keys"), json=body, headers=bearer
    ) as r:
        await v1_validation(r, "org_id")
    other = str(uuid.uuid4())
    async with http.post(
        v1(emu, f"/organizations/{other}/api-keys"), json=body, headers=bearer
    ) as r:
        await v1_error(r, 404, "organization", 2)


# -- organizations --------------------------------------------------------------------------------


async def test_get_organization(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /organizations/{orgId} returns {name}."""
    async with http.get(v1(emu, f"/organizations/{emu.org_id}"), headers=bearer) as response:
        body = await ok(response)
    assert isinstance(body["name"], str) and body["name"]


async def test_get_organization_errors(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Unknown organization is organization/2, a database error organization/1201 with 500."""
    async with http.get(v1(emu, f"/organizations/{uuid.uuid4()}"), headers=bearer) as response:
        await v1_error(response, 404, "organization", 2)
    async with http.get(v1(emu, "/organizations/123"), headers=bearer) as response:
        await v1_validation(response, "org_id")
    emu.break_org_reads()
    async with http.get(v1(emu, f"/organizations/{emu.org_id}"), headers=bearer) as response:
        await v1_error(response, 500, "organization", 1201)
    emu.break_org_reads(False)
    emu.faults.script("v1.organizations.get", Fault.status(500))
    async with http.get(v1(emu, f"/organizations/{emu.org_id}"), headers=bearer) as response:
        await v1_error(response, 500, "organization", 1201)


# -- images and templates -------------------------------------------------------------------------


async def test_images_have_every_field(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /images returns an array of Image with every field of the Image table."""
    async with http.get(v1(emu, "/images"), headers=bearer) as response:
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
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """The two optional filters (name, os_series) narrow the list."""
    async with http.get(v1(emu, "/images"), params={"name": "UBUNTU"}, headers=bearer) as r:
        assert [i["name"] for i in await ok(r)] == ["ubuntu-22.04"]
    async with http.get(v1(emu, "/images"), params={"os_series": "debian"}, headers=bearer) as r:
        assert [i["OSSeries"] for i in await ok(r)] == ["debian"]


@pytest.mark.parametrize(
    "query",
    [{"name": "a" * 51}, {"name": "bad name"}, {"os_series": "x/y"}, {"os_series": "s" * 257}],
)
async def test_images_filter_bounds(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str], query: dict[str, str]
) -> None:
    """Filter length and pattern bounds (letters, digits, ., _, -) give a validation body."""
    async with http.get(v1(emu, "/images"), params=query, headers=bearer) as response:
        await v1_validation(response, next(iter(query)))


async def test_get_template(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /templates/{id} returns a Template (v1) with its fields."""
    template_id = emu.v1_template_ids[0]
    async with http.get(v1(emu, f"/templates/{template_id}"), headers=bearer) as response:
        body = await ok(response)
    assert body["id"] == template_id
    assert isinstance(body["official"], bool)
    assert set(body["credential"]) == {"secret", "username"}
    assert body["status"] in ("draft", "published", "unpublished")
    for field in ("name", "path", "orgId", "description"):
        assert isinstance(body[field], str)


async def test_get_template_errors(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """An unknown template is a domain error 404; a non-UUID id a validation body."""
    async with http.get(v1(emu, f"/templates/{uuid.uuid4()}"), headers=bearer) as response:
        await v1_error(response, 404, "template", 2)
    async with http.get(v1(emu, "/templates/xyz"), headers=bearer) as response:
        await v1_validation(response, "id")


async def test_list_templates_not_guaranteed_shape(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """GET /templates lists container templates; shape as Template v1 is not guaranteed."""
    async with http.get(v1(emu, "/templates"), headers=bearer) as response:
        body = await ok(response)
    assert isinstance(body, list) and len(body) == len(emu.v1_template_ids)
    assert any(
        "credential" not in t or t.get("status") not in ("draft", "published", "unpublished")
        for t in body
    )


# -- containers, elastic IPs, VPCs ----------------------------------------------------------------


async def test_container_lifecycle(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Containers: create, GET record, POST shell {urlPath}, DELETE {result}; then 404."""
    container_id = await containers(http, emu, bearer)
    async with http.get(v1(emu, f"/containers/{container_id}"), headers=bearer) as response:
        record = await ok(response)
    assert record["id"] == container_id and record["idc"] == "us-denver-1"
    async with http.post(v1(emu, f"/containers/{container_id}/shell"), headers=bearer) as response:
        assert (await ok(response))["urlPath"].startswith("/")
    async with http.delete(v1(emu, f"/containers/{container_id}"), headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with http.get(v1(emu, f"/containers/{container_id}"), headers=bearer) as response:
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
    emu: Emulator,
    http: aiohttp.ClientSession,
    bearer: dict[str, str],
    changes: dict[str, Any],
    field: str,
) -> None:
    """Container create request fields are validated with a validation body."""
    body = {"name": "c", "templateId": emu.v1_template_ids[0], "count": 2, "product": "p"}
    body.update(changes)
    body = {k: v for k, v in body.items() if v is not None}
    async with http.post(v1(emu, "/containers"), json=body, headers=bearer) as response:
        await v1_validation(response, field)


async def test_elastic_ip_associate_and_release(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """Associating ({instanceID}) and releasing an elastic IP both return {result}."""
    container_id = await containers(http, emu, bearer)
    eip = emu.elastic_ip_ids[0]
    url = v1(emu, f"/elastic-ips/{eip}/associate")
    async with http.post(url, json={"instanceID": container_id}, headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with http.post(url, json={"instanceID": "not-uuid"}, headers=bearer) as response:
        await v1_validation(response, "instanceID")
    async with http.post(url, json={"instanceID": str(uuid.uuid4())}, headers=bearer) as response:
        await v1_error(response, 404, "container", 2)
    async with http.delete(v1(emu, f"/elastic-ips/{eip}"), headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with http.delete(v1(emu, f"/elastic-ips/{eip}"), headers=bearer) as response:
        await v1_error(response, 404, "elastic_ip", 2)


async def test_release_default_vpc(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """DELETE /vpcs/{id} releases the default VPC with {result}; again it is gone."""
    (vpc,) = emu.vpc_ids
    async with http.delete(v1(emu, f"/vpcs/{vpc}"), headers=bearer) as response:
        assert isinstance((await ok(response))["result"], str)
    async with http.delete(v1(emu, f"/vpcs/{vpc}"), headers=bearer) as response:
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
    emu: Emulator, http: aiohttp.ClientSession, method: str, path: str
) -> None:
    """Every v1 API except the OAuth exchange requires a bearer: a domain error with 401."""
    async with http.request(method, v1(emu, path), headers={"Authorization": "Bearer bad"}) as r:
        await v1_error(r, 401, "auth", 1100)


async def test_v1_unknown_path(
    emu: Emulator, http: aiohttp.ClientSession, bearer: dict[str, str]
) -> None:
    """An unknown v1 path is a 404 domain error, not a v2 body."""
    async with http.get(v1(emu, "/nothing/here"), headers=bearer) as response:
        await v1_error(response, 404, "gateway", 404)
