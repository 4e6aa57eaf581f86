"""Version 1 routes (``/api/v1``): bodies are not wrapped and use camelCase names."""

from __future__ import annotations

import json
import re
import secrets
import uuid
from typing import Any

from aiohttp import web

from .._core import operations as ops
from ._core import CORE, ROUTES, Core
from ._wire import UUID_RE, V1Problem, iso, json_response, v1_domain_error

__all__ = ["add_v1_routes", "v1_not_found"]

_FILTER = re.compile(r"^[A-Za-z0-9._-]+$")
_SCOPES = ("ie_model", "ce_resource")
MAX_CONTAINERS_PER_REQUEST = 100


class _Checks:
    """Collects validation failures so one 400 can name all of them."""

    def __init__(self) -> None:
        self.details: list[dict[str, str]] = []

    def fail(self, field: str, expression: str, original: Any, reason: str) -> None:
        shown = "" if original is None else str(original)
        self.details.append(
            {"field": field, "expression": expression, "originalValue": shown, "reason": reason}
        )

    def done(self) -> None:
        if self.details:
            raise V1Problem(400, {"group": "request", "code": 0, "validationDetail": self.details})

    def string(self, body: dict[str, Any], field: str, *, required: bool, max_len: int) -> None:
        value = body.get(field)
        if value is None:
            if required:
                self.fail(field, "required", None, f"{field} is required")
        elif not isinstance(value, str):
            self.fail(field, "string", value, f"{field} must be a string")
        elif required and not value:
            self.fail(field, "required", value, f"{field} must not be empty")
        elif len(value) > max_len:
            self.fail(field, f"max={max_len}", value, f"{field} is longer than {max_len}")


def _uuid_param(request: web.Request, name: str) -> str:
    value = request.match_info[name]
    if not UUID_RE.match(value):
        checks = _Checks()
        checks.fail(name, "uuid", value, f"{name} must be a UUID")
        checks.done()
    return value.lower()


async def _json_object(request: web.Request) -> dict[str, Any]:
    checks = _Checks()
    body: Any = None
    if request.content_type != "application/json":
        checks.fail("body", "json", None, "Content-Type must be application/json")
    else:
        try:
            body = json.loads(await request.read())
        except web.HTTPRequestEntityTooLarge:
            checks.fail("body", "max", None, "the body is too large")
        except (ValueError, RecursionError):
            checks.fail("body", "json", None, "the body is not valid JSON")
        else:
            if not isinstance(body, dict):
                checks.fail("body", "object", None, "the body must be a JSON object")
    checks.done()
    assert isinstance(body, dict)
    return body


def _not_found(group: str, what: str) -> V1Problem:
    return v1_domain_error(404, group, 2, f"{what} does not exist")


def v1_not_found() -> V1Problem:
    """The answer to a v1 path no route serves."""
    return v1_domain_error(404, "gateway", 404, "no such operation")


async def oauth_token(request: web.Request) -> web.Response:
    """POST /oauth/token: exchange a one-time authorization code."""
    core = request.app[CORE]
    body = await _json_object(request)
    checks = _Checks()
    checks.string(body, "provider", required=True, max_len=64)
    checks.string(body, "code", required=True, max_len=512)
    checks.done()
    token = core.v1.exchange(body["code"])
    if token is None:
        raise v1_domain_error(400, "oauth", 1200, "exchange of the authorization code failed")
    return json_response({"accessToken": token})


def _own_org(core: Core, request: web.Request) -> str:
    org_id = _uuid_param(request, "org_id")
    if org_id != core.v1.org_id:
        # Only users within the organization see it; any other one looks absent.
        raise _not_found("organization", "the organization")
    return org_id


async def create_api_key(request: web.Request) -> web.Response:
    """POST /organizations/{orgId}/api-keys: a key shown once."""
    core = request.app[CORE]
    _own_org(core, request)
    body = await _json_object(request)
    checks = _Checks()
    checks.string(body, "name", required=True, max_len=64)
    scope = body.get("scope", "ie_model")
    if scope not in _SCOPES:
        checks.fail("scope", "oneof=ie_model ce_resource", scope, "unknown scope")
    expires_at = body.get("expiresAt")
    if expires_at is not None:
        if not isinstance(expires_at, int) or isinstance(expires_at, bool):
            checks.fail("expiresAt", "int", expires_at, "expiresAt must be UNIX seconds")
        elif expires_at <= core.clock():
            checks.fail("expiresAt", "gt=now", expires_at, "expiresAt must be in the future")
    checks.done()
    key = core.v1.create_api_key(body["name"], scope, expires_at)
    return json_response({"key": key}, status=201)


async def get_organization(request: web.Request) -> web.Response:
    """GET /organizations/{orgId}."""
    core = request.app[CORE]
    _own_org(core, request)
    if core.v1.break_org_reads:
        raise v1_domain_error(500, "organization", 1201, "database error on organization read")
    return json_response({"name": core.v1.org_name})


async def list_images(request: web.Request) -> web.Response:
    """GET /images?name=&os_series=: ``name`` is a case-insensitive substring filter,
    ``os_series`` an exact (case-insensitive) match on ``OSSeries``."""
    core = request.app[CORE]
    checks = _Checks()
    filters = {}
    for field, max_len in (("name", 50), ("os_series", 256)):
        value = request.query.get(field, "")
        if value and len(value) > max_len:
            checks.fail(field, f"max={max_len}", value, f"{field} is longer than {max_len}")
        elif value and not _FILTER.match(value):
            checks.fail(field, f"regexp={_FILTER.pattern}", value, "letters, digits, . _ - only")
        filters[field] = value.lower()
    checks.done()
    images = [
        image
        for image in core.v1.images
        if filters["name"] in image["name"].lower()
        and (not filters["os_series"] or image["OSSeries"].lower() == filters["os_series"])
    ]
    return json_response(images)


async def get_template(request: web.Request) -> web.Response:
    """GET /templates/{id}."""
    record = request.app[CORE].v1.template(_uuid_param(request, "id"))
    if record is None:
        raise _not_found("template", "the template")
    return json_response(record)


async def list_templates(request: web.Request) -> web.Response:
    """GET /templates: a plain array; one record has an unusual shape on purpose."""
    return json_response(request.app[CORE].v1.templates)


def _check_container(core: Core, body: dict[str, Any], checks: _Checks) -> None:
    checks.string(body, "name", required=True, max_len=255)
    checks.string(body, "product", required=True, max_len=255)
    template_id = body.get("templateId")
    if not isinstance(template_id, str) or not UUID_RE.match(template_id):
        checks.fail("templateId", "uuid", template_id, "templateId must be a UUID")
    count = body.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool):
        checks.fail("count", "int", count, "count must be an integer")
    elif not 1 <= count <= MAX_CONTAINERS_PER_REQUEST:
        checks.fail("count", f"min=1,max={MAX_CONTAINERS_PER_REQUEST}", count, "out of range")
    idc = body.get("idc", "us-denver-1")
    if not isinstance(idc, str) or (idc != "us-denver-1" and idc not in core.v1.idc_names):
        checks.fail("idc", "oneof", idc, "unknown data center")
    envs = body.get("envs", [])
    if not isinstance(envs, list) or not all(
        isinstance(e, dict)
        and isinstance(e.get("name"), str)
        and e["name"]
        and isinstance(e.get("value"), str)
        for e in envs
    ):
        checks.fail("envs", "dive", None, "envs must be an array of {name, value} strings")


async def create_containers(request: web.Request) -> web.Response:
    """POST /containers: answers 201 ``{"ids": [...], "result": "ok"}``."""
    core = request.app[CORE]
    body = await _json_object(request)
    checks = _Checks()
    _check_container(core, body, checks)
    checks.done()
    template = core.v1.template(body["templateId"])
    if template is None:
        raise _not_found("template", "the template")
    ids = []
    for _ in range(body.get("count", 1)):
        container_id = str(uuid.uuid4())
        core.v1.containers[container_id] = {
            "id": container_id,
            "name": body["name"],
            "templateId": template["id"],
            "product": body["product"],
            "idc": body.get("idc", "us-denver-1"),
            "status": "running",
            "envs": [{"name": e["name"], "value": e["value"]} for e in body.get("envs", [])],
            "createdAt": iso(core.clock()),
        }
        ids.append(container_id)
    return json_response({"ids": ids, "result": "ok"}, status=201)


def _container(core: Core, request: web.Request) -> dict[str, Any]:
    record = core.v1.containers.get(_uuid_param(request, "id"))
    if record is None:
        raise _not_found("container", "the container")
    return record


async def get_container(request: web.Request) -> web.Response:
    """GET /containers/{id}."""
    return json_response(_container(request.app[CORE], request))


async def delete_container(request: web.Request) -> web.Response:
    """DELETE /containers/{id}."""
    core = request.app[CORE]
    record = _container(core, request)
    del core.v1.containers[record["id"]]
    for eip in core.v1.elastic_ips.values():
        if eip["instanceID"] == record["id"]:
            eip["instanceID"] = None
    return json_response({"result": "ok"})


async def container_shell(request: web.Request) -> web.Response:
    """POST /containers/{id}/shell: a URL path for a shell session."""
    record = _container(request.app[CORE], request)
    ticket = secrets.token_urlsafe(16)
    return json_response({"urlPath": f"/shell/{record['id']}?ticket={ticket}"})


async def associate_eip(request: web.Request) -> web.Response:
    """POST /elastic-ips/{id}/associate with ``{instanceID}`` (an existing container)."""
    core = request.app[CORE]
    eip_id = _uuid_param(request, "id")
    body = await _json_object(request)
    instance = body.get("instanceID")
    if not isinstance(instance, str) or not UUID_RE.match(instance):
        checks = _Checks()
        checks.fail("instanceID", "uuid", instance, "instanceID must be a UUID")
        checks.done()
    eip = core.v1.elastic_ips.get(eip_id)
    if eip is None:
        raise _not_found("elastic_ip", "the elastic IP")
    if str(instance).lower() not in core.v1.containers:
        raise _not_found("container", "the instance")
    eip["instanceID"] = str(instance).lower()
    return json_response({"result": "ok"})


async def release_eip(request: web.Request) -> web.Response:
    """DELETE /elastic-ips/{id}: release it."""
    core = request.app[CORE]
    if core.v1.elastic_ips.pop(_uuid_param(request, "id"), None) is None:
        raise _not_found("elastic_ip", "the elastic IP")
    return json_response({"result": "ok"})


async def release_vpc(request: web.Request) -> web.Response:
    """DELETE /vpcs/{id}: release the default VPC."""
    core = request.app[CORE]
    if core.v1.vpcs.pop(_uuid_param(request, "id"), None) is None:
        raise _not_found("vpc", "the VPC")
    return json_response({"result": "ok"})


def add_v1_routes(app: web.Application) -> None:
    """Register every v1 route with its name."""
    table = app[ROUTES]
    v1 = "/api/v1"
    for method, path, handler, name in (
        ("POST", "/oauth/token", oauth_token, ops.V1_OAUTH_EXCHANGE),
        ("POST", "/organizations/{org_id}/api-keys", create_api_key, ops.V1_API_KEYS_CREATE),
        ("GET", "/organizations/{org_id}", get_organization, ops.V1_ORGANIZATIONS_GET),
        ("GET", "/images", list_images, ops.V1_IMAGES_LIST),
        ("GET", "/templates/{id}", get_template, ops.V1_TEMPLATES_GET),
        ("GET", "/templates", list_templates, ops.V1_TEMPLATES_LIST),
        ("POST", "/containers", create_containers, ops.V1_CONTAINERS_CREATE),
        ("GET", "/containers/{id}", get_container, ops.V1_CONTAINERS_GET),
        ("DELETE", "/containers/{id}", delete_container, ops.V1_CONTAINERS_DELETE),
        ("POST", "/containers/{id}/shell", container_shell, ops.V1_CONTAINERS_SHELL),
        ("POST", "/elastic-ips/{id}/associate", associate_eip, ops.V1_ELASTIC_IPS_ASSOCIATE),
        ("DELETE", "/elastic-ips/{id}", release_eip, ops.V1_ELASTIC_IPS_RELEASE),
        ("DELETE", "/vpcs/{id}", release_vpc, ops.V1_VPCS_RELEASE),
    ):
        table.add(app, method, v1 + path, handler, name)
