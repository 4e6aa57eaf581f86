"""`sandboxkit.sync.Client`: the async client driven from blocking code.

One background event loop per sync Client, in a daemon thread of its own (`_loop`),
runs the real async `sandboxkit.Client`; every call crosses into it as a task there, from
any thread, so many threads may share one sync Client. An interrupted call (Ctrl-C) is
cancelled, its cleanup done, before the interrupt reaches the caller; `close()` cancels
every call in flight; a client never closed costs a `ResourceWarning`, never a hung exit.

Nothing here re-implements an operation. Each facade class below only *names* which async
method it exposes and how (a blocking call, a blocking iterator, or another facade), one line
per method; parameters and return types are taken from the async method by `ParamSpec`, so
type checkers see the real signatures and they cannot drift. Any public attribute a facade
does not name is still reached at run time through a generic fallback (untyped).

Callbacks such as a download's `progress` run on the background loop's thread.

Example::

    from sandboxkit import sync

    with sync.Client() as client:
        for build in client.templates.builds(template_id):
            print(build.id, build.status)
        sbx = client.sandbox(sandbox_key=key, domain=domain, access_token=token)
        result = sbx.files.download("/home/user/out.bin", "out.bin")
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Self,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from .. import client as _client
from .._client_config import ClientConfig
from .._core.events import RequestEvent, ResponseEvent, RetryEvent
from .._core.options import Budgets, Limits, ParallelDownloads, RetryPolicy, Timeout
from ..models import Build
from ..resources import files as _files
from ..resources import sandbox as _sandbox
from ..resources import templates as _templates
from ..resources import v1 as _v1
from ..resources import v1_infra as _v1_infra
from ._loop import Loop

if TYPE_CHECKING:
    import ssl

    from aiohttp.abc import AbstractResolver
    from opentelemetry.trace import TracerProvider

__all__ = [
    "V1",
    "BuildPager",
    "Client",
    "ClientOptions",
    "Containers",
    "ElasticIps",
    "Files",
    "Sandbox",
    "Stream",
    "Templates",
    "Vpcs",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")
_A = TypeVar("_A")
_F = TypeVar("_F", bound="_Facade[Any]")


# Async classes and the facade that wraps each, filled in by `_Facade.__init_subclass__`.
_FACADES: dict[type[Any], type[_Facade[Any]]] = {}


def _adapt(loop: Loop, value: Any) -> Any:
    """A result as sync code should see it: facades for handles, iterators for streams."""
    facade = _FACADES.get(type(value))
    if facade is not None:
        return facade(loop, value)
    if hasattr(value, "__aiter__"):
        return Stream(loop, value)
    if any(
        inspect.iscoroutinefunction(getattr(type(value), name, None))
        for name in dir(type(value))
        if not name.startswith("_")
    ):
        return _Facade(loop, value)
    return value


def _blocking_call(loop: Loop, method: Callable[..., Any]) -> Callable[..., Any]:
    # Sync methods (builds(), sandbox()) run on the loop too: objects stay on one thread.
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        return _adapt(loop, loop.call(functools.partial(method, *args, **kwargs)))

    return call


class _Facade(Generic[_A]):
    """Wraps one async object; subclasses name the members they expose, typed."""

    def __init__(self, loop: Loop, target: _A) -> None:
        self._loop = loop
        self._target = target

    def __init_subclass__(cls, wraps: type[Any] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if wraps is not None:
            _FACADES[wraps] = cls

    def __repr__(self) -> str:
        return f"<sync {self._target!r}>"

    if not TYPE_CHECKING:  # the untyped fallback: hidden from type checkers to keep typos errors

        def __getattr__(self, name: str) -> Any:
            if name.startswith("_"):
                raise AttributeError(name)
            value = getattr(self._target, name)
            if callable(value):
                return _blocking_call(self._loop, value)
            return _adapt(self._loop, value)


class _Member(Generic[_P, _R]):
    """A facade member: calls the async member of the same name through the loop."""

    def __init__(self, method: Callable[..., Any]) -> None:
        self._name = name = method.__name__

        # What the class shows (help(), inspect): a method with the async one's name,
        # parameters and docs, not a `<_Member object>`.
        @functools.wraps(method)
        def unbound(facade: _Facade[Any], *args: Any, **kwargs: Any) -> Any:
            return _blocking_call(facade._loop, getattr(facade._target, name))(*args, **kwargs)

        self._unbound = unbound

    def __set_name__(self, owner: type[Any], name: str) -> None:
        # functools.wraps gave it the async method's module and names; it is the facade's own
        # (else help() on 3.13 says "from sandboxkit.client.Client", and pickle refuses it).
        self._unbound.__module__ = owner.__module__
        self._unbound.__qualname__ = f"{owner.__qualname__}.{name}"
        self._unbound.__name__ = name

    @overload
    def __get__(self, facade: None, owner: type[Any]) -> Callable[..., _R]: ...
    @overload
    def __get__(self, facade: _Facade[Any], owner: type[Any] | None = None) -> Callable[_P, _R]: ...
    def __get__(self, facade: _Facade[Any] | None, owner: type[Any] | None = None) -> Any:
        if facade is None:
            return self._unbound
        return _blocking_call(facade._loop, getattr(facade._target, self._name))


def _blocking(method: Callable[Concatenate[Any, _P], Awaitable[_R]]) -> _Member[_P, _R]:
    """Expose a coroutine method as a blocking call returning the same value."""
    return _Member(method)


def _on_loop(method: Callable[Concatenate[Any, _P], _R]) -> _Member[_P, _R]:
    """Expose a plain method as a call run on the loop's thread, returning the same value."""
    return _Member(method)


def _iterating(
    method: Callable[Concatenate[Any, _P], AsyncIterator[_T]],
) -> _Member[_P, Stream[_T]]:
    """Expose a method returning an async iterator as one returning a blocking `Stream`."""
    return _Member(method)


def _handle(method: Callable[Concatenate[Any, _P], Any], facade: type[_F]) -> _Member[_P, _F]:
    """Expose a method returning an async object as one returning its sync `facade`."""
    return _Member(method)


class _Child(Generic[_F]):
    """A facade attribute wrapping the async object's attribute of the same name."""

    def __init__(self, facade: type[_F]) -> None:
        self._facade = facade
        self._name = ""
        self.__doc__ = facade.__doc__

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self._name = name

    @overload
    def __get__(self, facade: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(self, facade: _Facade[Any], owner: type[Any] | None = None) -> _F: ...
    def __get__(self, facade: _Facade[Any] | None, owner: type[Any] | None = None) -> Any:
        if facade is None:
            return self
        return self._facade(facade._loop, getattr(facade._target, self._name))


class Stream(Generic[_T]):
    """A blocking iterator over an async one; `with` (or `close()`) releases it early.

    One thread at a time should iterate a given Stream; different Streams may be used from
    different threads at once.
    """

    def __init__(self, loop: Loop, source: Any) -> None:
        self._loop = loop
        self._iterator: AsyncIterator[_T] = source.__aiter__()

    def __repr__(self) -> str:
        return f"<sync Stream over {self._iterator!r}>"

    def __iter__(self) -> Iterator[_T]:
        return self

    def __next__(self) -> _T:
        try:
            return self._loop.call(self._iterator.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stop the stream and release the connection it holds."""
        aclose = getattr(self._iterator, "aclose", None)
        if aclose is not None and not self._loop.closed:
            self._loop.call(aclose)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Files(_Facade[_files.Files], wraps=_files.Files):
    """Blocking `sandbox.files`: download, upload, iter_bytes, read_bytes, read_range,
    read_text."""

    download = _blocking(_files.Files.download)
    upload = _blocking(_files.Files.upload)
    read_bytes = _blocking(_files.Files.read_bytes)
    read_range = _blocking(_files.Files.read_range)
    read_text = _blocking(_files.Files.read_text)
    iter_bytes = _iterating(_files.Files.iter_bytes)


class Sandbox(_Facade[_sandbox.Sandbox], wraps=_sandbox.Sandbox):
    """A blocking handle on one sandbox's data plane."""

    files = _Child(Files)
    close = _blocking(_sandbox.Sandbox.aclose)

    @property
    def sandbox_key(self) -> str:
        """The sandbox's key."""
        return self._target.sandbox_key

    @property
    def domain(self) -> str:
        """The sandbox's domain."""
        return self._target.domain


class BuildPager(_Facade[_templates.BuildPager], wraps=_templates.BuildPager):
    """Builds of a Template: iterate for Builds, `.pages()` for whole Pages."""

    pages = _iterating(_templates.BuildPager.pages)

    def __iter__(self) -> Stream[Build]:
        return Stream(self._loop, self._target)


class Templates(_Facade[_templates.Templates], wraps=_templates.Templates):
    """Blocking `client.templates`."""

    create = _blocking(_templates.Templates.create)
    start_build = _blocking(_templates.Templates.start_build)
    get_build = _blocking(_templates.Templates.get_build)
    wait_for_build = _blocking(_templates.Templates.wait_for_build)
    builds_page = _blocking(_templates.Templates.builds_page)
    builds = _handle(_templates.Templates.builds, BuildPager)
    build_logs = _iterating(_templates.Templates.build_logs)


class Containers(_Facade[_v1_infra.Containers], wraps=_v1_infra.Containers):
    """Blocking `client.v1.containers`."""

    create = _blocking(_v1_infra.Containers.create)
    get = _blocking(_v1_infra.Containers.get)
    delete = _blocking(_v1_infra.Containers.delete)
    shell = _blocking(_v1_infra.Containers.shell)


class ElasticIps(_Facade[_v1_infra.ElasticIps], wraps=_v1_infra.ElasticIps):
    """Blocking `client.v1.elastic_ips`."""

    associate = _blocking(_v1_infra.ElasticIps.associate)
    release = _blocking(_v1_infra.ElasticIps.release)


class Vpcs(_Facade[_v1_infra.Vpcs], wraps=_v1_infra.Vpcs):
    """Blocking `client.v1.vpcs`."""

    release = _blocking(_v1_infra.Vpcs.release)


class V1(_Facade[_v1.V1], wraps=_v1.V1):
    """Blocking `client.v1`."""

    exchange_oauth_code = _blocking(_v1.V1.exchange_oauth_code)
    create_api_key = _blocking(_v1.V1.create_api_key)
    get_organization = _blocking(_v1.V1.get_organization)
    list_images = _blocking(_v1.V1.list_images)
    get_template = _blocking(_v1.V1.get_template)
    list_templates = _blocking(_v1.V1.list_templates)
    containers = _Child(Containers)
    elastic_ips = _Child(ElasticIps)
    vpcs = _Child(Vpcs)


class ClientOptions(TypedDict, total=False):
    """The keyword options of `sandboxkit.Client`, for type checking `sync.Client(...)`."""

    api_key: str | Callable[[], str] | Callable[[], Awaitable[str]] | None
    base_url: str | None
    timeout: Timeout | None
    retry: RetryPolicy | None
    limits: Limits | None
    parallel_downloads: ParallelDownloads | None
    data_plane_scheme: str | None
    ssl: ssl.SSLContext | bool
    resolver: AbstractResolver | None
    proxy: str | None
    trust_env: bool
    tracer_provider: TracerProvider | None
    on_request: Callable[[RequestEvent], object] | None
    on_response: Callable[[ResponseEvent], object] | None
    on_retry: Callable[[RetryEvent], object] | None
    budgets: Budgets | None


class Client(_Facade[_client.Client]):
    """The blocking client: same options and operations as `sandboxkit.Client`.

    It starts a background event loop at once; `close()` or leaving `with` cancels calls in
    flight (they raise `ClientStateError`), closes the async client and stops the loop. One
    never closed is stopped, with a `ResourceWarning`, when collected or at exit. Share one
    instance between threads. Event hooks (`on_request`, `on_response`, `on_retry`) and an
    `api_key` function are called on that loop's thread (an async one awaited on that
    loop). In a process forked from one using it (multiprocessing,
    gunicorn `--preload`, Celery prefork), its first call starts a loop and connections of
    the child's own; the parent's are never used, closed or collected there.

    Raises:
        ValidationError: as `sandboxkit.Client` does (no loop is left running).
    """

    templates = _Child(Templates)
    v1 = _Child(V1)
    request = _blocking(_client.Client.request)
    sandbox = _handle(_client.Client.sandbox, Sandbox)
    sandbox_from_response = _handle(_client.Client.sandbox_from_response, Sandbox)
    # On the loop: transfers waiting there are woken by it.
    set_budgets = _on_loop(_client.Client.set_budgets)

    def __init__(self, **options: Unpack[ClientOptions]) -> None:
        self._start(functools.partial(_client.Client, **options))

    # help() and inspect show the options by name, as `sandboxkit.Client` takes them (the
    # annotation above says the same to type checkers).
    __signature__ = inspect.signature(_client.Client)
    __init__.__signature__ = inspect.signature(_client.Client.__init__)  # type: ignore[attr-defined]

    @classmethod
    def from_config(cls, config: ClientConfig) -> Self:
        """A sync Client built from a picklable `ClientConfig`."""
        facade = cls.__new__(cls)
        facade._start(functools.partial(_client.Client.from_config, config))
        return facade

    def _start(self, build: Callable[[], _client.Client]) -> None:
        loop = Loop()
        try:
            # Built on the loop's thread: resolvers and sessions belong to that loop.
            target = loop.call(build)
        except BaseException:
            loop.stop()
            raise
        loop.closes(target.aclose)
        super().__init__(loop, target)

    @property
    def closed(self) -> bool:
        """Whether the client has been closed."""
        return self._loop.closed

    @property
    def budgets(self) -> Budgets:
        """The budgets in effect (see `sandboxkit.Client.budgets`)."""
        return self._target.budgets

    def close(self) -> None:
        """Cancel calls in flight, close the async client's pools, stop the loop; idempotent.

        Calls in flight in other threads then raise `ClientStateError`.
        """
        self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()


def __dir__() -> list[str]:
    # What a user calls: not the typing helpers and imports the module works with.
    return sorted(__all__)
