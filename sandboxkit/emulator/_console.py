"""Control plane v2 routes (``/api/v2``): templates, builds, build logs, products."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from .._core import operations as ops
from ._core import CORE, REQUEST_ID, ROUTES, Core
from ._routes import EMULATOR_PRODUCTS
from ._state import PRODUCTS, Build, Template, canonical
from ._validate import check_idempotency_key, int_query, invalid, template_request
from ._wire import V2Problem, iso, json_response

__all__ = ["LOG_LEVELS", "add_v2_routes"]

LOG_LEVELS = ("debug", "info", "warn", "error")
DEFAULT_LOG_LIMIT = 100


async def read_json(request: web.Request) -> Any:
    """The JSON body of a v2 request.

    Raises:
        V2Problem: 400 for a wrong Content-Type or malformed JSON, 413 past 1 MiB.
    """
    if request.content_type != "application/json":
        raise invalid("Content-Type must be application/json")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise V2Problem(413, "Parameter.Invalid", "the request body is too large") from None
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        raise invalid("the request body is not valid JSON") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _request_id(request: web.Request) -> str:
    return request[REQUEST_ID]


def _template(core: Core, request: web.Request) -> Template:
    template = core.control.templates.get(request.match_info["template_id"])
    if template is None:
        raise V2Problem(404, "Resource.NotFound", "template not found")
    return template


def _build(core: Core, request: web.Request) -> Build:
    template = _template(core, request)
    build = core.control.builds.get(request.match_info["build_id"])
    if build is None or build.template_id != template.id:
        raise V2Problem(404, "Resource.NotFound", "build not found")
    return build


async def create_template(request: web.Request) -> web.Response:
    """POST /api/v2/templates: combined flow with ``build``, split flow without."""
    core = request.app[CORE]
    key = check_idempotency_key(request.headers.get("Idempotency-Key"))
    echo = {"Idempotency-Key": key}
    try:
        return await _create(core, request, key, echo)
    except V2Problem as problem:
        problem.headers.update(echo)
        raise


async def _create(core: Core, request: web.Request, key: str, echo: dict[str, str]) -> web.Response:
    body = await read_json(request)
    fingerprint = canonical(body)
    control = core.control
    record = control.lookup_key(key)
    if record is not None:
        if record.consumed:
            raise V2Problem(
                409, "Sandbox.IdempotentKeyConsumed", "the template of this key was deleted"
            )
        if record.body != fingerprint:
            raise V2Problem(
                400,
                "Sandbox.IdempotentParameterMismatch",
                "this Idempotency-Key was used with a different body",
            )
        build = control.builds[record.build_id]
        data = {
            "id": record.template_id,
            "build_id": build.id,
            "status": build.status(control.now()),
        }
        headers = {**echo, "Idempotency-Replayed": "true"}
        return json_response(
            {"request_id": _request_id(request), "data": data}, status=201, headers=headers
        )
    validated = template_request(body)
    idc = core.resolve_idc(validated.get("idc_name"))
    if "build" not in validated and not idc.supports_split_flow:
        raise V2Problem(
            422, "Parameter.Invalid", f"data center {idc.name} does not support the split flow"
        )
    quota = control.template_quota
    if quota is not None and len(control.templates) >= quota:
        details = {"resource": "templates", "limit": quota, "used": len(control.templates)}
        raise V2Problem(403, "Resource.QuotaExceeded", "template quota exceeded", details)
    template, build = control.create_template(validated, idc.name, key, fingerprint)
    data = {"id": template.id, "build_id": build.id, "status": build.status(control.now())}
    return json_response(
        {"request_id": _request_id(request), "data": data}, status=201, headers=echo
    )


async def list_builds(request: web.Request) -> web.Response:
    """GET /api/v2/templates/{id}/builds?page=&page_size=: newest first."""
    core = request.app[CORE]
    template = _template(core, request)
    page = int_query(request.query, "page", 1, 1, None)
    page_size = int_query(request.query, "page_size", 20, 1, 100)
    builds = core.control.builds_newest_first(template)
    now = core.control.now()
    first = (page - 1) * page_size
    items = [b.render(now) for b in builds[first : first + page_size]]
    body = {
        "request_id": _request_id(request),
        "total": len(builds),
        "page": page,
        "page_size": page_size,
        "items": items,
    }
    return json_response(body)


async def start_build(request: web.Request) -> web.Response:
    """POST /api/v2/templates/{id}/builds/{id}: start a build that was never started."""
    core = request.app[CORE]
    build = _build(core, request)
    if build.started is not None:
        raise V2Problem(409, "Resource.StateConflict", "the build was already started")
    core.control.start(build)
    data = {"id": build.id, "status": build.status(core.control.now())}
    return json_response({"request_id": _request_id(request), "data": data})


async def build_logs(request: web.Request) -> web.Response:
    """GET .../builds/{id}/logs?offset=&limit=&level=: a page of the filtered collection.

    ``has_more`` is true exactly when entries exist beyond this page now; a running
    build's later entries are not promised by it (poll again to follow).
    """
    core = request.app[CORE]
    build = _build(core, request)
    offset = int_query(request.query, "offset", 0, 0, None)
    limit = int_query(request.query, "limit", DEFAULT_LOG_LIMIT, 1, 100)
    level = request.query.get("level")
    if level is not None and level not in LOG_LEVELS:
        raise invalid(f"level must be one of {', '.join(LOG_LEVELS)}")
    entries = [e for e in build.logs(core.control.now()) if level is None or e[0] == level]
    page = entries[offset : offset + limit]
    rendered = [
        {"offset": offset + i, "level": lvl, "message": msg, "timestamp": iso(at)}
        for i, (lvl, msg, at) in enumerate(page)
    ]
    next_offset = offset + len(page)
    data = {"entries": rendered, "next_offset": next_offset, "has_more": next_offset < len(entries)}
    return json_response({"request_id": _request_id(request), "data": data})


async def list_products(request: web.Request) -> web.Response:
    """GET /api/v2/products: the preset catalog (not shown by the interface)."""
    data = [dict(p) for p in PRODUCTS]
    return json_response({"request_id": _request_id(request), "data": data})


def add_v2_routes(app: web.Application) -> None:
    """Register every v2 route with its name."""
    table = app[ROUTES]
    builds = "/api/v2/templates/{template_id}/builds"
    table.add(app, "POST", "/api/v2/templates", create_template, ops.TEMPLATES_CREATE)
    table.add(app, "GET", builds, list_builds, ops.BUILDS_LIST)
    table.add(app, "POST", builds + "/{build_id}", start_build, ops.BUILDS_START)
    table.add(app, "GET", builds + "/{build_id}/logs", build_logs, ops.BUILDS_LOGS)
    table.add(app, "GET", "/api/v2/products", list_products, EMULATOR_PRODUCTS)
