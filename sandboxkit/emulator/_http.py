"""The middleware both servers share: journal, header limits, auth, faults, error rendering.

Order per request: record it in the journal, check header sizes, authenticate, apply the
fault plan, run the handler, render errors in the surface's format, apply a cut.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import attrs
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .._core import operations as ops
from ._core import CORE, FAULT, REQUEST_ID, ROUTES, SANDBOX, Core, request_key
from ._dataplane import cut_transport
from ._faults import Fault
from ._v1 import v1_not_found
from ._values import RecordedRequest, frozen_headers
from ._wire import (
    DataProblem,
    Problem,
    V1Problem,
    V2Problem,
    data_error_response,
    json_response,
    new_request_id,
    v1_domain_error,
    v2_code_for_status,
    v2_error_response,
)

__all__ = [
    "MAX_FIELD_BYTES",
    "MAX_HEADER_BYTES",
    "JournalSlot",
    "console_middleware",
    "data_middleware",
    "record_prepared",
]

logger = logging.getLogger("sandboxkit.emulator")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_FIELD_BYTES = 16 * 1024
MAX_HEADER_BYTES = 64 * 1024
MAX_TARGET_BYTES = 16 * 1024
_FAULT_MESSAGES = {429: "rate limit exceeded", 502: "backend call failed"}


class JournalSlot:
    """One request's journal entry: appended on arrival, completed when the answer starts.

    The entry is completed when the response headers are prepared (see
    :func:`record_prepared`), not when the handler returns: a client may read a whole
    streamed body before the handler has returned, and must then find the entry complete.
    """

    def __init__(self, core: Core, request: web.Request, record: RecordedRequest) -> None:
        self.core, self.request, self.record = core, request, record
        self.fault: Fault | None = None
        self.sealed = False
        core.journal.append(record)

    def update(self, status: int | None, *, seal: bool = False) -> None:
        """Record the answer's status (None: no answer); a sealed entry no longer changes."""
        if self.sealed:
            return
        self.sealed = seal
        done = attrs.evolve(
            self.record,
            status=status,
            body_size=self.request.content.total_bytes,
            fault=self.fault.label if self.fault is not None else None,
        )
        journal = self.core.journal
        # Search from the end: the entry is recent, and journal.clear() may have dropped it.
        for index in range(len(journal) - 1, -1, -1):
            if journal[index] is self.record:
                journal[index] = done
                break
        self.record = done


SLOT = request_key("sandboxkit_emulator_slot", JournalSlot)


async def record_prepared(request: web.BaseRequest, response: web.StreamResponse) -> None:
    """``on_response_prepare`` hook: complete the journal entry as the headers go out."""
    slot = request.get(SLOT)
    if slot is not None:
        slot.update(response.status)


def _record(
    request: web.Request, server: str, route: str | None, key: str | None
) -> RecordedRequest:
    return RecordedRequest(
        server=server,
        method=request.method,
        host=request.headers.get("Host", ""),
        path=request.path,
        query={k: v for k, v in request.query.items()},
        headers=frozen_headers(request.headers),
        sandbox_key=key,
        route=route,
        request_id=request.get(REQUEST_ID),
    )


def _oversized(request: web.Request) -> str | None:
    total = 0
    for name, value in request.raw_headers:
        size = len(name) + len(value)
        if size > MAX_FIELD_BYTES:
            return "a request header is too large"
        total += size
    if total > MAX_HEADER_BYTES:
        return "the request headers are too large"
    if len(request.raw_path) > MAX_TARGET_BYTES:
        return "the request target is too long"
    return None


def _fault_problem(surface: str, route: str | None, fault: Fault) -> Problem:
    status = fault.http_status or 500
    problem: Problem
    if surface == "data":
        problem = DataProblem(status, _FAULT_MESSAGES.get(status, "data plane error"))
    elif surface == "v1":
        if route == ops.V1_ORGANIZATIONS_GET and status == 500:
            problem = v1_domain_error(500, "organization", 1201, "database error")
        else:
            problem = v1_domain_error(status, "gateway", status, "injected failure")
    else:
        details = {"resource": "emulated", "limit": 0} if status == 403 else None
        problem = V2Problem(status, v2_code_for_status(status), "injected failure", details)
    if fault.retry_after is not None:
        problem.headers["Retry-After"] = fault.retry_after
    return problem


def _http_problem(surface: str, exc: web.HTTPException) -> Problem:
    """Rendering of aiohttp's own errors (no route, wrong method) in the surface's format."""
    problem: Problem
    if surface == "v1" and exc.status == 404:
        problem = v1_not_found()
    else:
        problem = _generic(surface, exc.status, exc.reason.lower())
    if "Allow" in exc.headers:
        problem.headers["Allow"] = exc.headers["Allow"]
    return problem


def _render(surface: str, problem: Problem, request_id: str | None) -> web.Response:
    if isinstance(problem, V2Problem):
        return v2_error_response(problem, request_id or new_request_id())
    if isinstance(problem, V1Problem):
        return json_response(problem.body, status=problem.status, headers=problem.headers)
    return data_error_response(problem)


async def _drain(request: web.Request) -> None:
    try:
        while await request.content.readany():
            pass
    except (ConnectionError, HttpProcessingError):
        pass  # the client is gone or sent a broken body: either way no answer follows


async def _apply_fault(
    request: web.Request, surface: str, route: str | None, fault: Fault
) -> web.StreamResponse | None:
    """An answer that replaces the normal one; None to answer normally (possibly cut)."""
    if fault.kind == "delay":
        await asyncio.sleep(fault.seconds)
    elif fault.kind == "status" and fault.body is None:
        raise _fault_problem(surface, route, fault)
    elif fault.kind in ("status", "garbage"):
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        if fault.content_type is not None:
            headers["Content-Type"] = fault.content_type
        return web.Response(status=fault.http_status or 200, body=fault.body, headers=headers)
    return None


async def _cut(request: web.Request, response: web.Response, fault: Fault) -> web.StreamResponse:
    body = response.body
    assert isinstance(body, bytes | bytearray)
    cut_at = fault.cut_offset(len(body))
    if cut_at is None:
        return response
    stream = web.StreamResponse(status=response.status, headers=response.headers)
    stream.content_length = len(body)
    await stream.prepare(request)
    if cut_at:
        await stream.write(bytes(body[:cut_at]))
    cut_transport(request)
    return stream


async def _serve(
    request: web.Request,
    handler: Handler,
    *,
    core: Core,
    slot: JournalSlot,
    surface: str,
    route: str | None,
    authenticate: Callable[[], None],
) -> web.StreamResponse:
    fault: Fault | None = None
    request_id = request.get(REQUEST_ID)
    raw = False
    try:
        try:
            reason = _oversized(request)
            if reason is not None:
                raise _generic(surface, 400, reason)
            authenticate()
            fault = slot.fault = core.faults.take(route)
            if fault is not None and fault.kind == "cut_before_headers":
                await _drain(request)
                cut_transport(request)
                slot.update(None, seal=True)
                return web.Response()  # never sent: the connection is closed
            replacement = await _apply_fault(request, surface, route, fault) if fault else None
            if replacement is not None:
                raw = True
                response = replacement
            else:
                if fault is not None:
                    request[FAULT] = fault
                response = await handler(request)
        except web.HTTPException as exc:
            raise _http_problem(surface, exc) from None
    except Problem as problem:
        response = _render(surface, problem, request_id)
    except ConnectionError:
        # The client went away mid-answer; nothing more can be sent. Headers already sent
        # keep their status in the journal.
        cut_transport(request)
        slot.update(slot.record.status, seal=True)
        return web.Response()
    except Exception:
        logger.exception("emulator handler failed on %s %s", request.method, request.path)
        response = _render(surface, _generic(surface, 500, "internal error"), request_id)
    if request_id is not None and not raw and not response.prepared:
        response.headers["X-Request-ID"] = request_id
    if fault is not None and fault.kind == "cut" and isinstance(response, web.Response):
        response = await _cut(request, response, fault)
    slot.update(response.status)
    return response


def _generic(surface: str, status: int, message: str) -> Problem:
    """An error of ``status`` in the surface's format, for conditions with no specific code."""
    if surface == "data":
        return DataProblem(status, message)
    if surface == "v1":
        return v1_domain_error(status, "gateway", status, message)
    return V2Problem(status, v2_code_for_status(status), message)


@web.middleware
async def console_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Journal, auth, faults and error rendering for ``/api/v1`` and ``/api/v2``."""
    core = request.app[CORE]
    route = request.app[ROUTES].name_of(request)
    path = request.path
    surface = "v1" if path == "/api/v1" or path.startswith("/api/v1/") else "v2"
    if surface == "v2":
        request[REQUEST_ID] = new_request_id()
    slot = request[SLOT] = JournalSlot(core, request, _record(request, "console", route, None))

    def authenticate() -> None:
        if route == ops.V1_OAUTH_EXCHANGE or core.bearer_ok(request.headers.get("Authorization")):
            return
        if surface == "v1":
            raise v1_domain_error(401, "auth", 1100, "authentication required")
        raise V2Problem(401, "Auth.Unauthorized", "authentication required")

    return await _serve(
        request,
        handler,
        core=core,
        slot=slot,
        surface=surface,
        route=route,
        authenticate=authenticate,
    )


def sandbox_key_of(host: str, domain: str) -> str | None:
    """The sandbox key in a ``Host`` header ``{key}.{domain}[:port]``, if it is one."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.lower().rstrip(".")
    suffix = "." + domain
    if not name.endswith(suffix):
        return None
    key = name[: -len(suffix)]
    return key if key and "." not in key else None


@web.middleware
async def data_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Journal, token check, faults and ``{message}`` errors for a sandbox's data plane."""
    core = request.app[CORE]
    route = request.app[ROUTES].name_of(request)
    key = sandbox_key_of(request.headers.get("Host", ""), core.suffix)
    slot = request[SLOT] = JournalSlot(core, request, _record(request, "data", route, key))

    def authenticate() -> None:
        token = request.headers.get("X-Access-Token")
        request[SANDBOX] = core.sandboxes.authenticate(key, token)

    return await _serve(
        request,
        handler,
        core=core,
        slot=slot,
        surface="data",
        route=route,
        authenticate=authenticate,
    )
