"""`sandboxkit.Client`: configuration, the pools, and the resources hung off it."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import ssl as ssl_module
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import aiohttp

from ._client_config import ClientConfig
from ._core import protocol as proto
from ._core.answers import unwrap_v2
from ._core.events import RequestEvent, ResponseEvent, RetryEvent
from ._core.options import (
    Budgets,
    CallOptions,
    Limits,
    ParallelDownloads,
    RetryPolicy,
    Timeout,
    resolve_api_key,
    resolve_base_url,
    resolve_data_plane_scheme,
)
from ._core.proxy_rules import routes
from ._http.calls import Calls
from ._http.cancel import raise_held, wait_through_cancels
from ._http.telemetry import Telemetry
from ._http.transport import Transport
from .errors import ValidationError
from .resources.sandbox import Sandbox, SandboxRef, address_from_response, check_address
from .resources.templates import Templates
from .resources.v1 import V1

# anyio loads its asyncio backend on first use, which is inside the application's running
# loop: 30 ms or more (compiling it, on a first run) that would block the loop once, and be
# reported as a slow callback under `python -X dev`. Loaded with the client instead. The
# module path is anyio's own: a version that moves it loses only this.
with contextlib.suppress(ImportError):
    importlib.import_module("anyio._backends._asyncio")

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["Client"]


class Client:
    """The async client for the sandbox service.

    Safe to share between many tasks of one event loop. Build it anywhere; its sessions are
    created inside the running loop on first use and closed by `aclose()` or `async with`.
    In a child process after `os.fork()` it starts afresh, bound to no loop: the child's
    first call makes sessions of its own, and the parent's are never used or closed there.

    Args:
        api_key: API key or OAuth access token (env `SANDBOXKIT_API_KEY`), or a function
            of no arguments (sync, or async: awaited) returning the current one, for keys
            that expire in a long-lived process. The function is asked once per request to
            the console (never for the data plane), without a lock: if it refreshes a
            token, it caches it. A sync one runs on the event loop, so it must be quick.
            After a 401 it is asked again and the request sent once more with a different
            key (no retry attempt is spent). What it returns is checked as a str key is;
            if it raises or returns no usable key, the call raises `ValidationError` (its
            exception chained as the cause). The key is never shown.
        base_url: the console address hosting `/api/v1` and `/api/v2` (env `SANDBOXKIT_BASE_URL`).
        timeout: default time limits; every operation takes a `timeout=` override.
        retry: default retry policy; every operation takes a `retry=` override.
        limits: connection pool bounds.
        parallel_downloads: when `files.download` fetches a large file over several
            connections of its sandbox host at once (`ParallelDownloads`; default: files of
            64 MiB or more on 8 connections where the data center supports `Range` and is
            10 ms or more away).
        data_plane_scheme: "https" (the service) or "http" (the emulator without TLS); env
            `SANDBOXKIT_DATA_PLANE_SCHEME`, else "https".
        ssl: an SSLContext, True (verify with the system store) or False (no verification).
        resolver: an aiohttp resolver used by every pool. Default: aiohttp's, except that
            `localhost` and every `*.localhost` name are loopback (RFC 6761), as in curl
            and browsers: a standalone emulator's sandbox hosts are `{key}.localhost:PORT`.
            Through a proxy, the proxy resolves the hosts it is asked for: this resolver
            then finds only the proxy.
        proxy: `http://[user:password@]host:port` (or `https://`): every request of every
            pool goes through this proxy, and the environment's proxy variables are not
            read. An https origin is reached through a CONNECT tunnel, so the proxy never
            sees the API key or a sandbox token; a plain-http origin (an `http` data plane)
            is sent through the proxy in clear, token included.
        trust_env: without `proxy=`, use the environment's proxies as curl, requests and
            httpx do: `HTTPS_PROXY` for https origins, `HTTP_PROXY` for http ones (lower-case
            names too, and first), except the hosts `NO_PROXY` lists (`*`, names with the
            names under them, IPs, networks). Read once, when the Client is built. False:
            no proxy. `.netrc` is never read.
        budgets: bandwidth and request rates shared by everything the client sends
            (`Budgets`; default: no limit). Change them while it runs with `set_budgets`.

    Example::

        async with sandboxkit.Client() as client:
            async for build in client.templates.builds(template_id):
                print(build.id, build.status)
    """

    def __init__(
        self,
        *,
        api_key: str | Callable[[], str] | Callable[[], Awaitable[str]] | None = None,
        base_url: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
        limits: Limits | None = None,
        parallel_downloads: ParallelDownloads | None = None,
        data_plane_scheme: str | None = None,
        ssl: ssl_module.SSLContext | bool = True,
        resolver: aiohttp.abc.AbstractResolver | None = None,
        proxy: str | None = None,
        trust_env: bool = True,
        tracer_provider: TracerProvider | None = None,
        on_request: Callable[[RequestEvent], object] | None = None,
        on_response: Callable[[ResponseEvent], object] | None = None,
        on_retry: Callable[[RetryEvent], object] | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        budgets = _checked_budgets(budgets)
        data_plane_scheme = resolve_data_plane_scheme(data_plane_scheme)
        proxies = routes(proxy, trust_env=trust_env)
        telemetry = Telemetry(
            tracer_provider=tracer_provider,
            on_request=on_request,
            on_response=on_response,
            on_retry=on_retry,
            clock=time.monotonic,
        )
        if not isinstance(ssl, ssl_module.SSLContext | bool):
            raise ValidationError("ssl must be an ssl.SSLContext or a bool")
        self.base_url = resolve_base_url(base_url)
        self.timeout = timeout if timeout is not None else Timeout()
        self.retry = retry if retry is not None else RetryPolicy()
        self.limits = limits if limits is not None else Limits()
        if parallel_downloads is None:
            parallel_downloads = ParallelDownloads()
        elif not isinstance(parallel_downloads, ParallelDownloads):
            raise ValidationError("parallel_downloads must be a sandboxkit.ParallelDownloads")
        self.parallel_downloads = parallel_downloads
        self.data_plane_scheme = data_plane_scheme
        key = resolve_api_key(api_key)
        self._transport = Transport(
            base_url=self.base_url,
            limits=self.limits,
            ssl=ssl,
            resolver=resolver,
            proxies=proxies,
            created_at=_users_line(),
            budgets=budgets,
            retry=self.retry,
        )
        self._calls = Calls(
            self._transport, self.retry, self.timeout, api_key=key, telemetry=telemetry
        )
        telemetry.bandwidth_limit = self._transport.throttle.limit_of
        self._templates = Templates(self._calls)
        self._v1 = V1(self._calls)

    @property
    def templates(self) -> Templates:
        """The v2 control plane: Templates and their Builds (`create`, `builds`,
        `builds_page`, `get_build`, `wait_for_build`, `build_logs`, `start_build`)."""
        return self._templates

    @property
    def v1(self) -> V1:
        """The v1 operations: OAuth, API keys, organizations, images, catalog templates,
        and the infrastructure families `containers`, `elastic_ips` and `vpcs`."""
        return self._v1

    @classmethod
    def from_config(cls, config: ClientConfig) -> Client:
        """A Client built from a picklable `ClientConfig` (e.g. inside a worker process).

        Makes a fresh SSL context, resolver and tracer provider from the config's factories.

        Raises:
            ValidationError: the config's resolver factory did not return an aiohttp resolver,
                its SSL option could not be turned into a context, or its tracer provider
                factory did not return a TracerProvider.
        """
        if not isinstance(config, ClientConfig):
            raise ValidationError("from_config expects a sandboxkit.ClientConfig")
        resolver = config.make_resolver()
        if resolver is not None and not isinstance(resolver, aiohttp.abc.AbstractResolver):
            raise ValidationError("ClientConfig.resolver must return an aiohttp AbstractResolver")
        return cls(
            api_key=config.api_key,
            base_url=config.base_url,
            timeout=config.timeout,
            retry=config.retry,
            limits=config.limits,
            parallel_downloads=config.parallel_downloads,
            data_plane_scheme=config.data_plane_scheme,
            ssl=config.make_ssl(),
            resolver=resolver,
            proxy=config.proxy,
            trust_env=config.trust_env,
            tracer_provider=config.make_tracer_provider(),
            on_request=config.on_request,
            on_response=config.on_response,
            on_retry=config.on_retry,
            budgets=config.budgets,
        )

    @property
    def budgets(self) -> Budgets:
        """The budgets in effect (`Budgets()`: nothing limited)."""
        return self._transport.throttle.budgets

    def set_budgets(self, budgets: Budgets) -> None:
        """Use `budgets` from now on, for transfers and requests already running too.

        A transfer waiting under the old limits draws again under the new ones at once: a
        lower limit does not first pay off what the old one allowed, a higher one (or
        `Budgets()`, no limit) wakes the waiters. Call it from the client's event loop
        (`sandboxkit.sync.Client.set_budgets` from any thread).

        Raises:
            ValidationError: `budgets` is not a `sandboxkit.Budgets`.

        Example::

            client.set_budgets(sandboxkit.Budgets.from_bwlimit("1M:5M"))
        """
        self._transport.throttle.update(_checked_budgets(budgets))

    def __repr__(self) -> str:
        return f"Client(base_url={self.base_url!r})"

    async def __aenter__(self) -> Client:
        return self

    # A plain `with` gave Python's bare "does not support the context manager protocol".
    def __enter__(self) -> NoReturn:
        raise TypeError(
            "sandboxkit.Client is asynchronous: use `async with sandboxkit.Client() as "
            "client:` inside a coroutine, or sandboxkit.sync.Client() for blocking code"
        )

    def __exit__(self, *exc_info: object) -> None:  # pragma: no cover - __enter__ raises
        pass

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every pool. Idempotent; the client cannot be used afterwards.

        It runs to the end even when its task is cancelled meanwhile (as `async with` does
        after a cancellation), then ends in that cancellation.
        """
        # In a task of its own: a cancellation interrupting it half-way left the sessions
        # after the one being closed open for good.
        closing = asyncio.ensure_future(self._transport.aclose())
        held = await wait_through_cancels(closing)
        if held is not None and not closing.cancelled():
            closing.exception()  # retrieved: the cancellation is what this call ends in
        raise_held(held, None)
        closing.result()

    @property
    def closed(self) -> bool:
        """Whether the client has been closed."""
        return self._transport.closed

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> Any:
        """Call an operation the interface does not show yet, with the same auth and retries.

        Returns the parsed JSON with a v2 `{request_id, data}` envelope unwrapped.

        Args:
            method: the HTTP method.
            path: a path on the console beginning with `/api/`.
            idempotent: whether retries are allowed; default True for GET, HEAD, PUT, DELETE.
        """
        verb = method.upper()
        if verb not in ("GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"):
            raise ValidationError(f"unsupported method {method!r}")
        if not path.startswith("/api/") or "://" in path:
            raise ValidationError(f"path must be a console path starting with /api/, got {path!r}")
        pairs = list(params.items()) if isinstance(params, Mapping) else list(params or ())
        request = proto.ApiRequest(
            verb,  # type: ignore[arg-type]
            path,
            operation=f"{verb} {path.partition('?')[0]}",  # a name: never a query
            surface="v1" if path.startswith(proto.V1_PREFIX) else "v2",
            idempotent=proto.is_idempotent(verb) if idempotent is None else idempotent,
            params=[(str(k), str(v)) for k, v in pairs],
            json=json,
            headers=dict(headers or {}),
        )
        reply = await self._calls.send(request, CallOptions(timeout, retry))
        return unwrap_v2(reply.payload)

    def sandbox(
        self,
        ref: SandboxRef | None = None,
        *,
        sandbox_key: str | None = None,
        domain: str | None = None,
        access_token: str | None = None,
    ) -> Sandbox:
        """A handle on one sandbox's data plane; sends nothing.

        Name the sandbox by a `SandboxRef` (what a batch job, an MCP config or
        `SandboxRef.from_response` holds) or by its three values:

        Args:
            ref: the sandbox's address, as one value.
            sandbox_key: the sandbox's key from its create/connect answer.
            domain: the answer's `domain`, used verbatim (it may carry a port).
            access_token: the answer's `sandbox_access_token`.

        Raises:
            ValidationError: both a `ref` and values, or neither; an empty or multi-line
                value, or a key or domain that is not a plain host name part.
        """
        values = (sandbox_key, domain, access_token)
        if ref is not None:
            if not isinstance(ref, SandboxRef):
                raise ValidationError(f"ref={type(ref).__name__}: must be a SandboxRef")
            if values != (None, None, None):
                raise ValidationError("give a SandboxRef or sandbox_key, domain, access_token")
            values = (ref.sandbox_key, ref.domain, ref.access_token)
        address = check_address(*values)
        return Sandbox(
            self._calls, address, scheme=self.data_plane_scheme, parallel=self.parallel_downloads
        )

    def sandbox_from_response(self, body: Mapping[str, Any]) -> Sandbox:
        """A handle from a sandbox create/connect answer (`data.sandbox_key`, `data.domain`,
        and `sandbox_access_token` under `data` or at the top level).

        Raises:
            ValidationError: the answer lacks one of them.
        """
        address = address_from_response(body)
        return Sandbox(
            self._calls, address, scheme=self.data_plane_scheme, parallel=self.parallel_downloads
        )


def _checked_budgets(budgets: object) -> Budgets:
    if budgets is None:
        return Budgets()
    if not isinstance(budgets, Budgets):
        raise ValidationError(f"budgets={budgets!r}: must be a sandboxkit.Budgets")
    return budgets


def _users_line() -> tuple[str, int]:
    """The file and line of the innermost caller outside sandboxkit: where a Client was made."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] in (
        "sandboxkit",
        "functools",
    ):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno
