"""Exact v1 wire shapes (paths, camelCase bodies, auth) against a scripted loopback server."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

import sandboxkit
from sandboxkit.models import EnvVar

from ..conftest import API_KEY, ScriptServer, answer

ORG = "0b6f1c2e-4a53-4e8f-9d62-3f1f0c7c9a10"
TPL = "7d3c2b1a-0f9e-4d8c-b7a6-958473625140"
INSTANCE = "5a0a4c8e-1f0e-4c55-9f0d-2b8e8f1f7e01"
EXPIRES = 4_102_444_800  # 2100-01-01
EXPIRES_AT = datetime.fromtimestamp(EXPIRES, UTC)


CASES: list[tuple[str, Any, str, str, Any, Any, bool]] = [
    # (name, call, method, path, expected JSON body, answer, authenticated)
    (
        "oauth",
        lambda c: c.v1.exchange_oauth_code("github", "code-1"),
        "POST", "/api/v1/oauth/token", {"provider": "github", "code": "code-1"},
        {"accessToken": "oat-1"}, False,
    ),
    (
        "api_key",
        lambda c: c.v1.create_api_key(ORG, "ci", "ce_resource", EXPIRES_AT),
        "POST", f"/api/v1/organizations/{ORG}/api-keys",
        {"name": "ci", "scope": "ce_resource", "expiresAt": EXPIRES}, {"key": "sk-1"}, True,
    ),
    (
        "api_key_no_expiry",
        lambda c: c.v1.create_api_key(ORG, "ci"),
        "POST", f"/api/v1/organizations/{ORG}/api-keys",
        {"name": "ci", "scope": "ie_model"}, {"key": "sk-1"}, True,
    ),
    (
        "organization",
        lambda c: c.v1.get_organization(ORG),
        "GET", f"/api/v1/organizations/{ORG}", None, {"name": "Acme"}, True,
    ),
    (
        "images",
        lambda c: c.v1.list_images(name="ubuntu", os_series="ubuntu"),
        "GET", "/api/v1/images", None, [], True,
    ),
    (
        "template",
        lambda c: c.v1.get_template(TPL),
        "GET", f"/api/v1/templates/{TPL}", None, {"id": TPL}, True,
    ),
    ("templates", lambda c: c.v1.list_templates(), "GET", "/api/v1/templates", None, [], True),
    (
        "container_create",
        lambda c: c.v1.containers.create(
            name="w", template_id=TPL, count=3, product="sku", envs=[EnvVar("A", "1")]
        ),
        "POST", "/api/v1/containers",
        {"name": "w", "templateId": TPL, "count": 3, "product": "sku", "idc": "us-denver-1",
         "envs": [{"name": "A", "value": "1"}]},
        {"ids": ["c1", "c2", "c3"]}, True,
    ),
    (
        "container_get",
        lambda c: c.v1.containers.get("c/1"),
        "GET", "/api/v1/containers/c%2F1", None, {"id": "c/1"}, True,
    ),
    (
        "container_delete",
        lambda c: c.v1.containers.delete("c1"),
        "DELETE", "/api/v1/containers/c1", None, {"result": "ok"}, True,
    ),
    (
        "container_shell",
        lambda c: c.v1.containers.shell("c1"),
        "POST", "/api/v1/containers/c1/shell", None, {"urlPath": "/s/c1"}, True,
    ),
    (
        "eip_associate",
        lambda c: c.v1.elastic_ips.associate("e1", instance_id=INSTANCE),
        "POST", "/api/v1/elastic-ips/e1/associate", {"instanceID": INSTANCE},
        {"result": "ok"}, True,
    ),
    (
        "eip_release",
        lambda c: c.v1.elastic_ips.release("e1"),
        "DELETE", "/api/v1/elastic-ips/e1", None, {"result": "ok"}, True,
    ),
    (
        "vpc_release",
        lambda c: c.v1.vpcs.release("v1"),
        "DELETE", "/api/v1/vpcs/v1", None, {"result": "ok"}, True,
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "method", "path", "body", "reply", "authenticated"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_v1_requests_on_the_wire(
    script_server: ScriptServer,
    script_client: sandboxkit.Client,
    call: Any,
    method: str,
    path: str,
    body: Any,
    reply: Any,
    authenticated: bool,
) -> None:
    """Each v1 operation sends its method, path, exact camelCase body and auth as shown."""
    script_server.on(method, path, answer(reply))
    await call(script_client)
    (seen,) = script_server.requests()
    assert (seen.method, seen.path) == (method, path)
    assert (json.loads(seen.body) if seen.body else None) == body
    if authenticated:
        assert seen.headers["Authorization"] == f"Bearer {API_KEY}"
    else:
        assert "Authorization" not in seen.headers


async def test_image_filters_in_query(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """Image filters go out as `name` and `os_series`; absent ones are not sent."""
    script_server.always("GET", "/api/v1/images", answer([]))
    await script_client.v1.list_images(name="deb", os_series="debian")
    await script_client.v1.list_images(os_series="debian")
    assert [s.query for s in script_server.requests()] == [
        {"name": "deb", "os_series": "debian"},
        {"os_series": "debian"},
    ]


async def test_v1_validation_body_decoded(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A v1 validation body gives BadRequestError with every validationDetail record."""
    details = [
        {"field": "name", "expression": "max=64", "originalValue": "x" * 65, "reason": "too long"},
        {"field": "scope", "expression": "oneof", "originalValue": "", "reason": "unknown"},
    ]
    script_server.on(
        "POST",
        f"/api/v1/organizations/{ORG}/api-keys",
        answer({"group": "request", "code": 0, "validationDetail": details}, 400),
    )
    with pytest.raises(sandboxkit.BadRequestError) as caught:
        await script_client.v1.create_api_key(ORG, "ci")
    error = caught.value
    assert (error.group, error.code, error.surface) == ("request", 0, "v1")
    assert [
        (d.field, d.expression, d.original_value, d.reason) for d in error.validation_detail
    ] == [
        ("name", "max=64", "x" * 65, "too long"),
        ("scope", "oneof", "", "unknown"),
    ]


async def test_v1_domain_error_fields(
    script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """A v1 domain error keeps group, integer code, message and traces."""
    script_server.on(
        "GET",
        f"/api/v1/organizations/{ORG}",
        answer({"group": "organization", "code": 1201, "message": "db", "traces": ["t1"]}, 500),
    )
    with pytest.raises(sandboxkit.InternalServerError) as caught:
        await script_client.v1.get_organization(ORG)
    error = caught.value
    assert (error.group, error.code, error.message, error.traces) == (
        "organization",
        1201,
        "db",
        ("t1",),
    )
