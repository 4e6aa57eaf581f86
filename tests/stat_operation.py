"""A data-plane operation the interface does not have, added the way a real one would be.

`GET /files/stat?path=` answering `{path, size, type}`: a model, one function over the
sandbox's `DataPlane`, and an emulator route over the emulator's own building blocks. Test
code only (not public API); tests/transfer/test_extending.py counts its lines and runs it
against the emulator.
"""

from __future__ import annotations

import attrs
from aiohttp import web

import sandboxkit
from sandboxkit._core.options import CallOptions
from sandboxkit._http.calls import decode_reply
from sandboxkit.emulator import Emulator
from sandboxkit.emulator._core import ROUTES, SANDBOX
from sandboxkit.emulator._dataplane import check_path, check_user, local_path
from sandboxkit.emulator._wire import DataProblem, json_response

STAT_PATH = "/files/stat"


@attrs.frozen
class FileStat:
    """What `stat` reports of one sandbox path."""

    path: str
    size: int
    type: str


async def stat(
    sandbox: sandboxkit.Sandbox,
    remote: str,
    *,
    timeout: sandboxkit.Timeout | None = None,
    retry: sandboxkit.RetryPolicy | None = None,
) -> FileStat:
    """The size and type of one sandbox path (retried as a GET, path checked first)."""
    plane = sandbox._plane
    reply = await plane.call_json(
        "GET",
        STAT_PATH,
        operation="files.stat",
        params=plane.params(remote, None),
        options=CallOptions(timeout, retry),
    )
    return decode_reply(reply, reply.payload, FileStat)


async def stat_route(request: web.Request) -> web.StreamResponse:
    """The emulator's `GET /files/stat`: token, faults and journal come from its middleware."""
    sandbox = request[SANDBOX]
    segments = check_path(request.query.get("path"))
    check_user(sandbox, segments, request.query.get("username"))
    target = local_path(sandbox, segments)
    if not target.exists():
        raise DataProblem(404, "file not found")
    kind = "directory" if target.is_dir() else "file"
    return json_response(
        {"path": "/" + "/".join(segments), "size": target.stat().st_size, "type": kind}
    )


class StatEmulator(Emulator):
    """The emulator with the extra route, registered under its operation name."""

    route_names = Emulator.route_names | {"files.stat"}  # so faults and journal accept it

    def _data_app(self) -> web.Application:
        app = super()._data_app()
        app[ROUTES].add(app, "GET", STAT_PATH, stat_route, "files.stat")
        return app
