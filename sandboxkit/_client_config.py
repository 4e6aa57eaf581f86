"""`ClientConfig`: every Client option as one picklable value, for worker processes.

A live `ssl.SSLContext` or aiohttp resolver cannot cross a process boundary, so the config
holds how to make them instead: `ssl` is a bool, a CA bundle path, or a zero-arg factory;
`resolver` is a zero-arg factory. `Client.from_config` builds a Client from it on the
worker. Pickling is checked at construction, so a lambda factory fails on the driver with a
message naming the option, not later inside a worker with a pickling traceback.
"""

from __future__ import annotations

import os
import pickle
import ssl as ssl_module
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from ._core import environment as env
from ._core.events import RequestEvent, ResponseEvent, RetryEvent
from ._core.options import (
    Budgets,
    Limits,
    ParallelDownloads,
    RetryPolicy,
    Timeout,
    check_key_function,
    resolve_data_plane_scheme,
)
from ._core.proxy_rules import parse_proxy, redacted
from ._http.telemetry import check_hook
from .errors import ValidationError

__all__ = ["ClientConfig", "SSLFactory", "SSLOption"]

SSLFactory = Callable[[], ssl_module.SSLContext]
# True/False as for Client; a path is a CA bundle to trust; a factory makes the context.
SSLOption = bool | str | os.PathLike[str] | SSLFactory


def _check_ssl(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, ssl_module.SSLContext):
        raise ValidationError(
            "ClientConfig.ssl cannot hold a live SSLContext (it does not pickle): pass a bool, "
            "a CA bundle path, or a module-level zero-argument function returning the context"
        )
    if not isinstance(value, bool | str | os.PathLike) and not callable(value):
        raise ValidationError("ClientConfig.ssl must be a bool, a CA bundle path or a factory")


def _check_resolver(_: object, __: attrs.Attribute[Any], value: object) -> None:
    # A class is a fine factory; an instance with `resolve` is a live resolver.
    live = not isinstance(value, type) and hasattr(value, "resolve")
    if value is not None and (live or not callable(value)):
        raise ValidationError(
            "ClientConfig.resolver must be a picklable zero-argument factory (e.g. the "
            "resolver class) returning an aiohttp resolver, not a resolver instance"
        )


def _check_scheme(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and value not in ("http", "https"):
        raise ValidationError(f"data_plane_scheme must be 'http' or 'https', got {value!r}")


def _check_type(kind: type) -> Callable[[object, attrs.Attribute[Any], object], None]:
    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, kind):
            raise ValidationError(f"ClientConfig.{attribute.name} must be a {kind.__name__}")

    return check


def _check_proxy(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        parse_proxy(value, source="ClientConfig.proxy")


def _proxy_repr(value: str | None) -> str:
    return repr(None if value is None else redacted(value))


def _check_tracer_provider(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):  # a provider is no callable
        raise ValidationError(
            "ClientConfig.tracer_provider must be a picklable zero-argument factory returning "
            "an OpenTelemetry TracerProvider, not a provider (it does not pickle)"
        )


def _hook(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    check_hook(f"ClientConfig.{attribute.name}", value)


def _check_api_key(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, str):
        check_key_function(value, "ClientConfig.api_key")


def _unpicklable(name: str, value: object, exc: Exception) -> ValidationError:
    if name == "api_key":  # a function: the pickle error could show what it holds
        function = getattr(value, "__qualname__", type(value).__name__)
        return ValidationError(
            f"ClientConfig.api_key: the function {function} does not pickle "
            f"({type(exc).__name__}), and worker processes need it: pass a module-level "
            "function (it pickles by reference) or a functools.partial of one, not a lambda "
            "or a nested function"
        )
    return ValidationError(
        f"ClientConfig.{name} does not pickle ({type(exc).__name__}: {exc}); worker "
        "processes need it: use a module-level function or class, or a functools.partial "
        "of one"
    )


def _optional_text(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"ClientConfig.{attribute.name} must be a string or None")


@attrs.frozen
class ClientConfig:
    """Every `Client` option as a frozen, picklable value; build clients with `Client.from_config`.

    Args:
        api_key: as for Client (a key, or a function returning the current one: a
            module-level one, which pickles by reference); None reads `SANDBOXKIT_API_KEY`
            where the Client is built (use `from_env()` to capture it now, on the driver).
            Never shown in `repr`.
        base_url: as for Client; None reads `SANDBOXKIT_BASE_URL` where the Client is built.
        data_plane_scheme: as for Client; None reads `SANDBOXKIT_DATA_PLANE_SCHEME` where the
            Client is built (else "https").
        timeout, retry, limits, parallel_downloads: as for Client.
        ssl: True (system store), False (no verification), a CA bundle path to trust, or a
            picklable zero-argument factory returning an `ssl.SSLContext`.
        resolver: a picklable zero-argument factory returning an aiohttp resolver (a
            resolver class works), or None for aiohttp's default.
        proxy: as for Client; its credentials are not shown in `repr`.
        trust_env: as for Client; the environment read is the one where the Client is
            built (a worker's own proxy settings).
        tracer_provider: a picklable zero-argument factory returning the OpenTelemetry
            TracerProvider (called once per Client built), or None for the global provider
            of the process the Client is built in.
        on_request, on_response, on_retry: as for Client; module-level functions (they
            pickle by reference), or a functools.partial of one.
        budgets: as for Client. Each Client built from the config has budgets of its own:
            with the Dask helper a limit applies to each shard's Client (by default one
            shard per worker: to each worker process), never to the cluster as a whole.

    Raises:
        ValidationError: an option of the wrong kind, or one that does not pickle (a lambda
            or a nested function as a factory), named in the message.

    Example::

        config = sandboxkit.ClientConfig.from_env(retry=sandboxkit.RetryPolicy(max_attempts=8))
        async with sandboxkit.Client.from_config(config) as client:
            ...
    """

    api_key: str | Callable[[], str] | Callable[[], Awaitable[str]] | None = attrs.field(
        default=None, repr=False, validator=_check_api_key
    )
    base_url: str | None = attrs.field(default=None, validator=_optional_text)
    timeout: Timeout = attrs.field(factory=Timeout, validator=_check_type(Timeout))
    retry: RetryPolicy = attrs.field(factory=RetryPolicy, validator=_check_type(RetryPolicy))
    limits: Limits = attrs.field(factory=Limits, validator=_check_type(Limits))
    parallel_downloads: ParallelDownloads = attrs.field(
        factory=ParallelDownloads, validator=_check_type(ParallelDownloads)
    )
    data_plane_scheme: str | None = attrs.field(default=None, validator=_check_scheme)
    ssl: SSLOption = attrs.field(default=True, validator=_check_ssl)
    resolver: Callable[[], Any] | None = attrs.field(default=None, validator=_check_resolver)
    proxy: str | None = attrs.field(default=None, repr=_proxy_repr, validator=_check_proxy)
    trust_env: bool = attrs.field(default=True, validator=_check_type(bool))
    tracer_provider: Callable[[], Any] | None = attrs.field(
        default=None, validator=_check_tracer_provider
    )
    on_request: Callable[[RequestEvent], object] | None = attrs.field(default=None, validator=_hook)
    on_response: Callable[[ResponseEvent], object] | None = attrs.field(
        default=None, validator=_hook
    )
    on_retry: Callable[[RetryEvent], object] | None = attrs.field(default=None, validator=_hook)
    budgets: Budgets = attrs.field(factory=Budgets, validator=_check_type(Budgets))

    def __attrs_post_init__(self) -> None:
        # Field by field, so the message names the option that would break in a worker.
        for field in attrs.fields(type(self)):
            try:
                pickle.dumps(getattr(self, field.name))
            except Exception as exc:  # pickle raises PicklingError, AttributeError, TypeError
                raise _unpicklable(field.name, getattr(self, field.name), exc) from None

    @classmethod
    def from_env(cls, **options: Any) -> ClientConfig:
        """A config with `api_key`, `base_url` and `data_plane_scheme` read from the
        environment now (`SANDBOXKIT_API_KEY`, `SANDBOXKIT_BASE_URL`,
        `SANDBOXKIT_DATA_PLANE_SCHEME`).

        Args:
            options: any other field; an explicit `api_key`, `base_url` or
                `data_plane_scheme` wins over the environment.

        Raises:
            ValidationError: `SANDBOXKIT_DATA_PLANE_SCHEME` is set to neither http nor https.
        """
        options.setdefault("api_key", os.environ.get(env.API_KEY))
        options.setdefault("base_url", os.environ.get(env.BASE_URL))
        if "data_plane_scheme" not in options and os.environ.get(env.DATA_PLANE_SCHEME):
            options["data_plane_scheme"] = resolve_data_plane_scheme(None)
        return cls(**options)

    def make_ssl(self) -> ssl_module.SSLContext | bool:
        """The `ssl` option for a Client: the bool, a context trusting the CA file, or the
        factory's context.

        Raises:
            ValidationError: the CA file cannot be loaded, or the factory returned something
                other than an SSLContext.
        """
        option = self.ssl
        if isinstance(option, bool):
            return option
        if isinstance(option, str | os.PathLike):
            try:
                return ssl_module.create_default_context(cafile=os.fspath(option))
            except (OSError, ssl_module.SSLError) as exc:
                raise ValidationError(
                    f"ClientConfig.ssl: cannot load CA bundle {Path(option)!s}: {exc}"
                ) from exc
        context = option()
        if not isinstance(context, ssl_module.SSLContext):
            raise ValidationError("ClientConfig.ssl factory must return an ssl.SSLContext")
        return context

    def make_resolver(self) -> Any:
        """A fresh resolver from the factory, or None (the Client checks its type)."""
        return None if self.resolver is None else self.resolver()

    def make_tracer_provider(self) -> Any:
        """The factory's TracerProvider, or None (the Client checks it)."""
        return None if self.tracer_provider is None else self.tracer_provider()
