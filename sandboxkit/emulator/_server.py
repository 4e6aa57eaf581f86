"""The :class:`Emulator`: two aiohttp.web servers (console and data plane) on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
import shutil
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from aiohttp import web

from ..client import Client  # the emulator sits above the client (docs/design.md section 3)
from ._admin import add_emulator_routes
from ._console import add_v2_routes
from ._core import CORE, ROUTES, Core, RouteTable, new_api_key
from ._dataplane import add_data_routes
from ._faults import FaultPlan
from ._http import console_middleware, data_middleware, record_prepared
from ._outage import Outage, cut_connections, outage_gate
from ._resolver import DATA_PLANE_SUFFIX, EmulatorResolver
from ._routes import ROUTE_NAMES, check_routes
from ._tls import CertificateAuthority, client_context, server_context
from ._v1 import add_v1_routes
from ._values import Idc, RecordedRequest

__all__ = ["Emulator"]

# The parser's own limits are raised so oversized headers reach the middleware, which
# answers them in the surface's error format instead of aiohttp's plain-text 400.
_PARSER_LIMIT = 1024 * 1024
_JSON_BODY_LIMIT = 1024 * 1024
# A DNS name of one or more labels, without a port: sandbox hosts are {key}.{domain}:PORT.
_DOMAIN = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*$")


class _Default(enum.Enum):
    FIRST_IDC = "first"


class Emulator:
    """The whole service on loopback: control plane v1/v2 and per-sandbox data planes.

    Args:
        idcs: the data centers; default one ``Idc("us-denver-1")``.
        default_idc: the organization's default IDC; None means it has none (template
            create with a blank ``idc_name`` then gets 400). Default: the first IDC.
        api_key: the bearer token valid on v1 and v2; default a random ``sk-emu-...``.
        ca: a CA such as ``trustme.CA()``; both servers then speak TLS with a certificate
            for 127.0.0.1, localhost and every sandbox host. None: plain HTTP.
        clock: seconds since the epoch; drives builds, logs, key retention and API-key
            expiry. Default ``time.time``; pass a :class:`ManualClock` in tests.
        build_seconds: how long a started build takes by ``clock``.
        host: the address both servers listen on (127.0.0.1 unless told otherwise).
        port, data_port: fixed ports; 0 picks free ones.
        domain: the data-plane domain: sandbox hosts are ``{key}.{domain}:{data_port}``.
            ``sandbox.test`` (the default) resolves only through :attr:`resolver`, so code
            under test reaches it only when wired to this emulator; ``localhost`` (what
            ``sandboxkit emulator`` uses) is loopback for curl, browsers and a plain
            ``sandboxkit.Client()`` (RFC 6761).

    Each route is named as the SDK names the operation it serves (``"files.download"``,
    ``"builds.list"``, ``"v1.organizations.get"``...: the name in its logs and errors), the
    emulator's own routes ``emulator.``-something; :attr:`route_names` holds them all.

    Example:
        >>> async with Emulator() as emu:  # doctest: +SKIP
        ...     body = await emu.create_sandbox()
    """

    #: Every route name this emulator serves, the names :attr:`faults` and
    #: :meth:`journal_for` accept. A subclass that registers another route adds its name.
    route_names: ClassVar[frozenset[str]] = ROUTE_NAMES

    def __init__(
        self,
        *,
        idcs: list[Idc] | None = None,
        default_idc: str | _Default | None = _Default.FIRST_IDC,
        api_key: str | None = None,
        ca: CertificateAuthority | None = None,
        clock: Callable[[], float] | None = None,
        build_seconds: float = 1.0,
        host: str = "127.0.0.1",
        port: int = 0,
        data_port: int = 0,
        domain: str = DATA_PLANE_SUFFIX,
    ) -> None:
        idcs = list(idcs) if idcs is not None else [Idc("us-denver-1")]
        domain = domain.lower().strip(".") if isinstance(domain, str) else ""
        if not _DOMAIN.match(domain):
            raise ValueError(f"domain must be a host name without a port, got {domain!r}")
        if isinstance(default_idc, _Default):
            default_idc = idcs[0].name if idcs else None
        if build_seconds < 0:
            raise ValueError("build_seconds must be >= 0")
        self._core = Core(
            idcs=idcs,
            default_idc=default_idc,
            api_key=api_key or new_api_key(),
            clock=clock or time.time,
            build_seconds=build_seconds,
            base=Path(),
            route_names=self.route_names,
            suffix=domain,
        )
        self._ca = ca
        self._host = host
        self._ports = (port, data_port)
        self._runners: list[web.AppRunner] = []
        self._down: Outage | None = None  # while an outage lasts
        self._base_url = ""
        self._resolver = EmulatorResolver(domain)
        self._client_ssl: ssl.SSLContext | None = None
        self._tmp: Path | None = None

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Start both servers; :meth:`close` stops them and deletes every sandbox's files."""
        if self._runners:
            raise RuntimeError("the emulator is already running")
        self._tmp = Path(tempfile.mkdtemp(prefix="sandboxkit-emulator-"))
        self._core.sandboxes.base = self._tmp
        server_ssl = None
        if self._ca is not None:
            server_ssl = server_context(self._ca, self._host, self._core.suffix)
            self._client_ssl = client_context(self._ca)
        scheme = "https" if server_ssl is not None else "http"
        try:
            console_port = await self._serve(self._console_app(), self._ports[0], server_ssl)
            data_port = await self._serve(self._data_app(), self._ports[1], server_ssl)
        except BaseException:
            await self.close()
            raise
        display_host = f"[{self._host}]" if ":" in self._host else self._host
        self._base_url = f"{scheme}://{display_host}:{console_port}"
        self._core.domain = f"{self._core.suffix}:{data_port}"
        self._core.scheme = scheme

    async def close(self) -> None:
        """Stop both servers and remove the temporary files; safe to call twice."""
        runners, self._runners = self._runners, []
        for runner in runners:
            await runner.cleanup()
        if self._tmp is not None:
            tmp, self._tmp = self._tmp, None
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: shutil.rmtree(tmp, ignore_errors=True)
            )
        self._core.sandboxes.live.clear()

    def _console_app(self) -> web.Application:
        app = web.Application(
            middlewares=[outage_gate("console", lambda: self._down), console_middleware],
            client_max_size=_JSON_BODY_LIMIT,
        )
        app[CORE] = self._core
        app[ROUTES] = RouteTable()
        app.on_response_prepare.append(record_prepared)
        add_v2_routes(app)
        add_v1_routes(app)
        add_emulator_routes(app)
        return app

    def _data_app(self) -> web.Application:
        app = web.Application(
            middlewares=[outage_gate("data", lambda: self._down), data_middleware]
        )
        app[CORE] = self._core
        app[ROUTES] = RouteTable()
        app.on_response_prepare.append(record_prepared)
        add_data_routes(app)
        return app

    async def _serve(self, app: web.Application, port: int, ctx: ssl.SSLContext | None) -> int:
        runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=2.0,
            max_line_size=_PARSER_LIMIT,
            max_field_size=_PARSER_LIMIT,
        )
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, self._host, port, ssl_context=ctx)
        await site.start()
        port = int(runner.addresses[-1][1])
        return port

    @contextlib.asynccontextmanager
    async def outage(
        self, *, status: int | None = None, shape: str = "reset"
    ) -> AsyncIterator[Outage]:
        """Both servers are down inside the block, and serve again after it.

        Connections open when it begins are cut. While it lasts, each request is recorded in
        the yielded :class:`Outage` (not in the journal: nothing served it), then answered
        with ``status`` (say 502 or 503: a gateway whose backend is down), or without one
        its connection ends as ``shape`` says: ``"reset"`` (a process that died),
        ``"close"`` (closed unanswered, as a server in a rolling restart does) or
        ``"head"`` (an answer's head, then closed before any body). Every sandbox and file
        is kept.

        Example:
            >>> async with emu.outage() as down:  # doctest: +SKIP
            ...     await anyio.sleep(5)
            >>> len(down.requests)  # doctest: +SKIP
        """
        if not self._runners:
            raise RuntimeError("the emulator is not running")
        if self._down is not None:
            raise RuntimeError("the emulator is already down")
        down = self._down = Outage(status=status, shape=shape)
        # After the gate is shut: a connection that reaches aiohttp's list only now (accepted
        # in this very loop turn) meets the gate at its first request.
        for runner in self._runners:
            cut_connections(runner)
        try:
            yield down
        finally:
            self._down = None

    # -- addresses and wiring ------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The console address, e.g. ``http://127.0.0.1:PORT`` (https with a CA)."""
        return self._base_url

    @property
    def api_key(self) -> str:
        """A bearer token valid on v1 and v2."""
        return self._core.api_key

    @property
    def org_id(self) -> str:
        """The UUID of the emulator's one organization (v1)."""
        return self._core.v1.org_id

    @property
    def oauth_code(self) -> str:
        """A valid one-time OAuth authorization code; see :meth:`issue_oauth_code`."""
        return self._core.v1.oauth_code

    def issue_oauth_code(self) -> str:
        """Another valid one-time OAuth authorization code."""
        return self._core.v1.issue_oauth_code()

    @property
    def domain(self) -> str:
        """``sandbox.test:PORT`` (or the ``domain=`` given, with the port): a sandbox's data
        plane is ``{scheme}://{key}.{domain}``."""
        return self._core.domain

    @property
    def data_plane_scheme(self) -> str:
        """``http``, or ``https`` when a CA was given."""
        return self._core.scheme

    @property
    def resolver(self) -> EmulatorResolver:
        """An aiohttp resolver mapping the emulator's names (its domain, ``localhost`` and
        the names under them) to 127.0.0.1, and nothing else."""
        return self._resolver

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting the CA; None without TLS."""
        return self._client_ssl

    @property
    def journal(self) -> list[RecordedRequest]:
        """Every request either server received, in arrival order (``clear()`` works)."""
        return self._core.journal

    def journal_for(self, route: str) -> list[RecordedRequest]:
        """The journal entries of one route name.

        Raises:
            ValueError: ``route`` is not one of :attr:`route_names`.
        """
        check_routes([route], self.route_names)
        return [r for r in self._core.journal if r.route == route]

    @property
    def faults(self) -> FaultPlan:
        """The fault plan."""
        return self._core.faults

    @property
    def clock(self) -> Callable[[], float]:
        """The clock the emulator reads."""
        return self._core.clock

    @property
    def idcs(self) -> dict[str, Idc]:
        """The data centers by name."""
        return dict(self._core.idcs)

    def client(self, **options: Any) -> Client:
        """A ``sandboxkit.Client`` wired to this emulator; ``options`` override or add.

        Returns:
            ``sandboxkit.client.Client(api_key=..., base_url=..., data_plane_scheme=...,
            resolver=..., trust_env=False, ssl=...)`` (``ssl`` only when TLS is on).
            ``trust_env=False``: the environment's proxies are not used, since a proxy
            could not resolve the names only :attr:`resolver` knows, and the emulator is on
            this machine; pass ``trust_env=True`` or ``proxy=`` to go through one.
        """
        kwargs: dict[str, Any] = {
            "api_key": self.api_key,
            "base_url": self.base_url,
            "data_plane_scheme": self.data_plane_scheme,
            "resolver": self.resolver,
            "trust_env": False,
        }
        if self._client_ssl is not None:
            kwargs["ssl"] = self._client_ssl
        kwargs.update(options)
        return Client(**kwargs)

    # -- sandboxes -----------------------------------------------------------------

    async def create_sandbox(self, idc_name: str | None = None) -> dict[str, Any]:
        """Create a sandbox (with ``/home/user`` and ``/tmp``) and return a create body.

        Another process does the same with ``POST /_emulator/sandboxes`` on the console
        (see :func:`request_sandbox`).

        Returns:
            ``{"request_id": ..., "data": {"sandbox_key", "domain", "sandbox_access_token"}}``

        Raises:
            ValueError: unknown IDC, or blank ``idc_name`` without a default IDC.
        """
        if self._tmp is None:
            raise RuntimeError("start the emulator first")
        return self._core.create_sandbox(self._core.new_sandbox_idc(idc_name))

    async def delete_sandbox(self, sandbox_key: str) -> None:
        """Delete a sandbox and its files: its own token then gets 404, others 401."""
        sandbox = self._core.sandboxes.forget(sandbox_key)
        await asyncio.get_running_loop().run_in_executor(None, self._core.sandboxes.erase, sandbox)

    def expire_token(self, sandbox_key: str) -> None:
        """Expire a sandbox's access token: it gets 401 from now on."""
        self._core.sandboxes.get(sandbox_key).token_expired = True

    def sandbox_root(self, sandbox_key: str) -> Path:
        """The directory backing the sandbox's ``/`` (put or inspect files directly)."""
        return self._core.sandboxes.get(sandbox_key).fs

    # -- control plane ---------------------------------------------------------------

    def fail_next_build(
        self, code: str = "TemplateBuild.OutOfMemory", message: str = "the build ran out of memory"
    ) -> None:
        """Make the next started build fail with ``failure: {code, message}``."""
        self._core.control.fail_next_build(code, message)

    def delete_template(self, template_id: str) -> None:
        """Delete a v2 template (the interface shows no path for it); its key is consumed.

        Raises:
            KeyError: no such template.
        """
        self._core.control.delete_template(template_id)

    def add_builds(self, template_id: str, n: int) -> list[str]:
        """Add ``n`` waiting builds (trigger ``rebuild``) to a template; returns their ids."""
        control = self._core.control
        template = control.templates[template_id]
        return [control.add_build(template, "rebuild", {}).id for _ in range(n)]

    def build_status(self, build_id: str) -> str:
        """A build's status now."""
        return self._core.control.builds[build_id].status(self._core.control.now())

    @property
    def template_quota(self) -> int | None:
        """Templates the organization may hold; one more gets 403 ``Resource.QuotaExceeded``."""
        return self._core.control.template_quota

    @template_quota.setter
    def template_quota(self, value: int | None) -> None:
        self._core.control.template_quota = value

    # -- v1 ------------------------------------------------------------------------

    def break_org_reads(self, broken: bool = True) -> None:
        """Make ``GET /organizations/{id}`` answer 500, group organization, code 1201."""
        self._core.v1.break_org_reads = broken

    @property
    def elastic_ip_ids(self) -> list[str]:
        """Ids of the elastic IPs the organization holds."""
        return list(self._core.v1.elastic_ips)

    @property
    def vpc_ids(self) -> list[str]:
        """Ids of the VPCs (one default VPC until it is released)."""
        return list(self._core.v1.vpcs)

    @property
    def v1_template_ids(self) -> list[str]:
        """Ids of the seeded v1 catalog templates."""
        return [t["id"] for t in self._core.v1.templates]
