"""The emulator's own routes, under ``/_emulator`` on the console: not the service's.

The service's interface shows no sandbox create operation yet, so an emulator started on its
own (``sandboxkit emulator``) could serve only the sandboxes it made at start. This route
makes more, for any process holding the API key; :func:`request_sandbox` calls it.
"""

from __future__ import annotations

import json
import ssl as ssl_module
from typing import Any

import aiohttp
from aiohttp import web

from ..errors import APIConnectionError, APITimeoutError, ResponseDecodeError, error_class
from ._console import read_json
from ._core import CORE, REQUEST_ID, ROUTES
from ._routes import EMULATOR_SANDBOXES_CREATE
from ._validate import invalid
from ._wire import json_response

__all__ = ["SANDBOXES_PATH", "add_emulator_routes", "request_sandbox"]

SANDBOXES_PATH = "/_emulator/sandboxes"


async def create_sandbox(request: web.Request) -> web.Response:
    """``POST /_emulator/sandboxes`` with an optional ``{"idc_name": ...}``: 201 and the
    body :meth:`Emulator.create_sandbox` returns."""
    core = request.app[CORE]
    body = await read_json(request) if request.can_read_body else {}
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    unknown = sorted(set(body) - {"idc_name"})
    if unknown:
        raise invalid(f"unknown field(s): {', '.join(unknown)}")
    idc_name = body.get("idc_name")
    if idc_name is not None and not isinstance(idc_name, str):
        raise invalid("idc_name must be a string")
    answer = core.create_sandbox(core.resolve_idc(idc_name), request[REQUEST_ID])
    return json_response(answer, status=201)


def add_emulator_routes(app: web.Application) -> None:
    """Register the emulator-only routes on the console application."""
    app[ROUTES].add(app, "POST", SANDBOXES_PATH, create_sandbox, EMULATOR_SANDBOXES_CREATE)


async def request_sandbox(
    base_url: str,
    api_key: str,
    *,
    idc_name: str | None = None,
    ssl: ssl_module.SSLContext | bool = True,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """Ask a running emulator for a new sandbox (``POST /_emulator/sandboxes``).

    Args:
        base_url: the emulator's console, as it prints it.
        api_key: its API key.
        idc_name: the data center; None for the default one.
        ssl: as for ``sandboxkit.Client`` (an emulator started with a CA needs a context
            trusting it).
        timeout: seconds for the whole request.

    Returns:
        ``{"request_id": ..., "data": {"sandbox_key", "domain", "sandbox_access_token"}}``,
        for ``client.sandbox_from_response``.

    Raises:
        sandboxkit.APIError: the emulator refused (``AuthenticationError`` for a wrong key,
            ``BadRequestError`` for an unknown data center, ``NotFoundError`` when the server
            is not an emulator).
        sandboxkit.TransportError: the emulator could not be reached in time.
    """
    url = base_url.rstrip("/") + SANDBOXES_PATH
    payload = {} if idc_name is None else {"idc_name": idc_name}
    failure: Exception | None = None
    try:
        async with (
            aiohttp.ClientSession(trust_env=False) as http,
            http.post(
                url,
                json=payload,
                headers={"Authorization": f"Bearer {api_key}"},
                ssl=ssl,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response,
        ):
            status, raw = response.status, await response.read()
    except TimeoutError:  # before OSError, its base class (aiohttp's timeouts are both)
        failure = APITimeoutError(f"the emulator at {base_url} did not answer in time")
    except (aiohttp.ClientError, OSError) as exc:
        failure = APIConnectionError(f"cannot reach the emulator at {base_url}: {exc}")
    if failure is not None:
        raise failure  # out of the except block: no aiohttp object (headers, key) as context
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if status == 201 and isinstance(body, dict) and isinstance(body.get("data"), dict):
        return body
    if status == 201:
        raise ResponseDecodeError("the emulator's answer is not a create body", status=status)
    error = body if isinstance(body, dict) else {}
    code = error.get("code")
    raise error_class(status, code)(
        str(error.get("message") or f"status {status}"),
        status=status,
        surface="v2",
        request_id=error.get("request_id"),
        code=code,
    )
