"""The emulator's shared state, reachable from every route through the application."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from aiohttp import web

from ._faults import Fault, FaultPlan
from ._routes import ROUTE_NAMES
from ._sandboxes import Sandbox, SandboxRegistry
from ._state import ControlState
from ._v1state import V1State
from ._values import Idc, RecordedRequest
from ._wire import V2Problem, new_request_id

__all__ = [
    "CORE",
    "FAULT",
    "REQUEST_ID",
    "ROUTES",
    "SANDBOX",
    "Core",
    "RouteTable",
    "new_api_key",
    "request_key",
]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")

# aiohttp 3.14 types what a request carries (`web.RequestKey`) and warns of a plain str key;
# before it there is no such class, and a request takes str keys (and never warns).
_REQUEST_KEY: Any = getattr(web, "RequestKey", None)


class RouteTable:
    """Route names by aiohttp route, since aiohttp names resources, not method+path pairs."""

    def __init__(self) -> None:
        self._names: dict[object, str] = {}

    def add(
        self, app: web.Application, method: str, path: str, handler: Handler, name: str
    ) -> None:
        """Register ``handler`` for ``method path`` under route name ``name``."""
        route = app.router.add_route(method, path, handler)
        self._names[route] = name

    @property
    def names(self) -> frozenset[str]:
        """The route names registered so far."""
        return frozenset(self._names.values())

    def name_of(self, request: web.Request) -> str | None:
        """The route name of ``request``, None when no route matched."""
        return self._names.get(request.match_info.route)


class Core:
    """Everything the routes share: data centers, state, fault plan, journal."""

    def __init__(
        self,
        *,
        idcs: list[Idc],
        default_idc: str | None,
        api_key: str,
        clock: Callable[[], float],
        build_seconds: float,
        base: Path,
        suffix: str,
        route_names: frozenset[str] = ROUTE_NAMES,
    ) -> None:
        names = [idc.name for idc in idcs]
        if not idcs or len(set(names)) != len(names):
            raise ValueError("give at least one IDC, each with a distinct name")
        if default_idc is not None and default_idc not in names:
            raise ValueError(f"default_idc {default_idc!r} is not one of {names}")
        self.idcs = {idc.name: idc for idc in idcs}
        self.default_idc = default_idc
        self.api_key = api_key
        self.clock = clock
        self.control = ControlState(clock, build_seconds)
        self.v1 = V1State(clock, names)
        self.sandboxes = SandboxRegistry(base)
        self.faults = FaultPlan(route_names)
        self.journal: list[RecordedRequest] = []
        self.suffix = suffix  # sandbox hosts are {key}.{suffix}:{port}
        self.domain = ""  # "{suffix}:{port}" once the data plane listens
        self.scheme = "http"

    def bearer_ok(self, header: str | None) -> bool:
        """Whether an ``Authorization`` header carries a token valid on v1 and v2."""
        if not header:
            return False
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return False
        if hmac.compare_digest(self.api_key.encode(), token.encode("utf-8", "surrogateescape")):
            return True
        return self.v1.token_ok(token)

    def resolve_idc(self, idc_name: str | None) -> Idc:
        """The IDC a template goes to; blank means the organization's default.

        Raises:
            V2Problem: 400 when blank without a default, or unknown.
        """
        if idc_name is None or not idc_name.strip():
            if self.default_idc is None:
                raise V2Problem(
                    400, "Parameter.Invalid", "idc_name is required: no default data center"
                )
            return self.idcs[self.default_idc]
        idc = self.idcs.get(idc_name)
        if idc is None:
            raise V2Problem(400, "Parameter.Invalid", f"unknown data center {idc_name!r}")
        return idc

    def new_sandbox_idc(self, idc_name: str | None) -> Idc:
        """The IDC for :meth:`Emulator.create_sandbox` (ValueError instead of a 400)."""
        try:
            return self.resolve_idc(idc_name)
        except V2Problem as exc:
            raise ValueError(exc.message) from None

    def create_sandbox(self, idc: Idc, request_id: str | None = None) -> dict[str, Any]:
        """A new sandbox in ``idc``, as a create body: ``{request_id, data: {sandbox_key,
        domain, sandbox_access_token}}`` (a fresh request id unless given)."""
        sandbox = self.sandboxes.create(idc)
        data = {
            "sandbox_key": sandbox.key,
            "domain": self.domain,
            "sandbox_access_token": sandbox.token,
        }
        return {"request_id": request_id or new_request_id(), "data": data}


CORE = web.AppKey("sandboxkit_emulator_core", Core)
ROUTES = web.AppKey("sandboxkit_emulator_routes", RouteTable)


def request_key(name: str, kind: type[T]) -> web.RequestKey[T]:
    """A key for a value a request carries from the middleware to its route: aiohttp's
    typed `web.RequestKey` where it has one (3.14 on), else the plain str `name`, which an
    older aiohttp's request takes as it is (so the emulator runs on aiohttp 3.13 too)."""
    if _REQUEST_KEY is None:
        return cast("web.RequestKey[T]", name)
    return cast("web.RequestKey[T]", _REQUEST_KEY(name, kind))


REQUEST_ID = request_key("sandboxkit_emulator_request_id", str)
SANDBOX = request_key("sandboxkit_emulator_sandbox", Sandbox)
FAULT = request_key("sandboxkit_emulator_fault", Fault)


def new_api_key() -> str:
    """A random emulator API key."""
    return "sk-emu-" + secrets.token_urlsafe(24)
