"""Wire helpers shared by the routes: error bodies per surface, JSON answers, timestamps.

Handlers raise one of the ``*Problem`` exceptions; the middleware renders it in the
surface's own error format, so no handler writes an error body by hand.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import secrets
from collections.abc import Mapping
from typing import Any

from aiohttp import web

__all__ = [
    "UUID_RE",
    "DataProblem",
    "Problem",
    "V1Problem",
    "V2Problem",
    "data_error_response",
    "iso",
    "json_response",
    "new_request_id",
    "v1_domain_error",
    "v1_validation",
    "v2_code_for_status",
    "v2_error_response",
]

JSON_TYPE = "application/json"


def iso(seconds: float) -> str:
    """An ISO 8601 UTC timestamp (``2023-11-14T22:13:20.000Z``) for a clock value."""
    stamp = dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def new_request_id() -> str:
    """A fresh correlation id for one v2 answer."""
    return "req-" + secrets.token_hex(12)


def json_response(
    body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """A compact JSON answer."""
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return web.Response(body=text.encode(), status=status, content_type=JSON_TYPE, headers=headers)


class Problem(Exception):
    """An error answer a handler wants sent; rendered by the middleware."""

    status: int

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers: dict[str, str] = {}


class V2Problem(Problem):
    """A v2 error: ``{code, message, request_id}`` plus ``details`` for quota errors."""

    def __init__(
        self, status: int, code: str, message: str, details: Mapping[str, Any] | None = None
    ) -> None:
        super().__init__(status, message)
        self.code = code
        self.details = details


class V1Problem(Problem):
    """A v1 error with its full body (domain error or validation body)."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        super().__init__(status, str(body.get("message", "validation failed")))
        self.body = dict(body)


class DataProblem(Problem):
    """A data-plane error: ``{message}`` only."""


# Codes for statuses the interface names; 429 has no v2 code in the interface, so the
# emulator uses its own (clients branch on the status, and on the code only where the
# interface defines one).
_V2_CODES = {
    400: "Parameter.Invalid",
    401: "Auth.Unauthorized",
    403: "Resource.QuotaExceeded",
    404: "Resource.NotFound",
    409: "Resource.StateConflict",
    413: "Parameter.Invalid",
    422: "Parameter.Invalid",
    429: "Request.Throttled",
}


def v2_code_for_status(status: int) -> str:
    """The v2 code the emulator answers for an HTTP status with no more specific code."""
    if status >= 500:
        return "Internal.ServerError"
    return _V2_CODES.get(status, "Parameter.Invalid")


def v2_error_response(problem: V2Problem, request_id: str) -> web.Response:
    """Render a v2 error body; the caller adds ``X-Request-ID``."""
    body: dict[str, Any] = {
        "code": problem.code,
        "message": problem.message,
        "request_id": request_id,
    }
    if problem.details is not None:
        body["details"] = dict(problem.details)
    return json_response(body, status=problem.status, headers=problem.headers)


def v1_domain_error(status: int, group: str, code: int, message: str) -> V1Problem:
    """A v1 domain error ``{group, code, message}``."""
    return V1Problem(status, {"group": group, "code": code, "message": message})


def v1_validation(field: str, expression: str, original: Any, reason: str) -> V1Problem:
    """A v1 validation error (status 400) for one field."""
    detail = {
        "field": field,
        "expression": expression,
        "originalValue": "" if original is None else str(original),
        "reason": reason,
    }
    return V1Problem(400, {"group": "request", "code": 0, "validationDetail": [detail]})


def data_error_response(problem: Problem) -> web.Response:
    """Render a data-plane error body: ``{"message": ...}`` and nothing else."""
    return json_response(
        {"message": problem.message}, status=problem.status, headers=problem.headers
    )


UUID_RE = re.compile(
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)
