"""sandboxkit: an asyncio-native SDK for the cloud sandbox service.

Example::

    import sandboxkit

    async with sandboxkit.Client() as client:
        created = await client.templates.create(
            name="py-agent",
            resources=sandboxkit.CustomResources(cpu_count=2, memory_mb=2048, disk_size_mb=10240),
            build={"commands": ["pip install numpy"]},  # without it the build waits (split flow)
        )
"""

import logging
import sys
from typing import TYPE_CHECKING, Any

from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "ActionResult",
    "ApiKey",
    "AsyncStream",
    "AuthenticationError",
    "BadGatewayError",
    "BadRequestError",
    "Budgets",
    "Build",
    "BuildFailedError",
    "BuildFailure",
    "BuildResources",
    "BuildStatus",
    "BuildWaitTimeoutError",
    "CertificateVerificationError",
    "Client",
    "ClientConfig",
    "ClientStateError",
    "ConflictError",
    "Container",
    "ContainersCreated",
    "CustomResources",
    "DestinationLockedError",
    "DestinationUnsafeError",
    "DownloadResult",
    "EnvVar",
    "FileEntry",
    "FileRange",
    "FileTooLargeError",
    "GatewayTimeoutError",
    "HostNotFoundError",
    "HostUnavailableError",
    "IdempotencyKeyConsumedError",
    "IdempotencyMismatchError",
    "Image",
    "InternalServerError",
    "Limits",
    "LogEntry",
    "LogLevel",
    "LogPage",
    "NotFoundError",
    "OAuthToken",
    "Organization",
    "Page",
    "PaginationError",
    "ParallelDownloads",
    "PartialDownload",
    "PartitionEntry",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "PresetResources",
    "Progress",
    "ProxyError",
    "QuotaExceededError",
    "RangeNotSatisfiableError",
    "RateLimitError",
    "RedirectNotFollowedError",
    "RemoteProtocolError",
    "RequestEvent",
    "ResponseDecodeError",
    "ResponseEvent",
    "RetryEvent",
    "RetryPolicy",
    "Sandbox",
    "SandboxKitError",
    "SandboxRef",
    "ServiceUnavailableError",
    "ShellResult",
    "TLSHandshakeError",
    "TemplateCreated",
    "TemplateCredential",
    "TemplateStatus",
    "TextPage",
    "Timeout",
    "TransportError",
    "UnprocessableEntityError",
    "UnsupportedMediaTypeError",
    "UploadResult",
    "V1Template",
    "ValidationDetail",
    "ValidationError",
    "__version__",
    "find_partial",
    "resources_from",
    "ssh_env",
]

# A library's logger: records go to the application's handlers, if it set any up, and never to
# Python's last-resort handler on stderr (an application that configured nothing sees nothing).
logging.getLogger(__name__).addHandler(logging.NullHandler())

# Every public name loads on first use: importing sandboxkit (as pytest does for its plugin,
# in every session of an environment that has sandboxkit) costs next to nothing until a name
# is used, and never imports aiohttp (tests/test_pytest_plugin.py checks both).
_LAZY = {
    "ActionResult": ".models",
    "APIConnectionError": ".errors",
    "APIError": ".errors",
    "ApiKey": ".models",
    "APITimeoutError": ".errors",
    "AsyncStream": ".resources._common",
    "AuthenticationError": ".errors",
    "BadGatewayError": ".errors",
    "BadRequestError": ".errors",
    "Build": ".models",
    "BuildFailedError": ".errors",
    "BuildFailure": ".models",
    "BuildResources": ".models",
    "BuildStatus": ".models",
    "BuildWaitTimeoutError": ".errors",
    "CertificateVerificationError": ".errors",
    "Client": ".client",
    "ClientConfig": "._client_config",
    "ClientStateError": ".errors",
    "ConflictError": ".errors",
    "Container": ".models",
    "ContainersCreated": ".models",
    "CustomResources": ".models",
    "DestinationLockedError": ".errors",
    "DestinationUnsafeError": ".errors",
    "DownloadResult": ".models",
    "EnvVar": ".models",
    "FileEntry": ".models",
    "FileRange": ".models",
    "FileTooLargeError": ".errors",
    "find_partial": "._transfer.sinks",
    "GatewayTimeoutError": ".errors",
    "HostNotFoundError": ".errors",
    "HostUnavailableError": ".errors",
    "IdempotencyKeyConsumedError": ".errors",
    "IdempotencyMismatchError": ".errors",
    "Image": ".models",
    "InternalServerError": ".errors",
    "Limits": "._core.options",
    "Budgets": "._core.options",
    "LogEntry": ".models",
    "LogLevel": ".models",
    "LogPage": ".models",
    "NotFoundError": ".errors",
    "OAuthToken": ".models",
    "Organization": ".models",
    "Page": ".models",
    "PaginationError": ".errors",
    "ParallelDownloads": "._core.options",
    "PartialDownload": "._transfer.sinks",
    "PartitionEntry": ".models",
    "PayloadTooLargeError": ".errors",
    "PermissionDeniedError": ".errors",
    "PresetResources": ".models",
    "Progress": "._core.options",
    "ProxyError": ".errors",
    "QuotaExceededError": ".errors",
    "RangeNotSatisfiableError": ".errors",
    "RateLimitError": ".errors",
    "RedirectNotFollowedError": ".errors",
    "RemoteProtocolError": ".errors",
    "RequestEvent": "._core.events",
    "ResponseDecodeError": ".errors",
    "ResponseEvent": "._core.events",
    "RetryEvent": "._core.events",
    "RetryPolicy": "._core.options",
    "Sandbox": ".resources.sandbox",
    "SandboxRef": ".resources.sandbox",
    "SandboxKitError": ".errors",
    "ServiceUnavailableError": ".errors",
    "ShellResult": ".models",
    "resources_from": "._core.validation",
    "ssh_env": ".resources.v1_infra",
    "TemplateCreated": ".models",
    "TemplateCredential": ".models",
    "TemplateStatus": ".models",
    "TextPage": ".models",
    "Timeout": "._core.options",
    "TLSHandshakeError": ".errors",
    "TransportError": ".errors",
    "UnprocessableEntityError": ".errors",
    "UnsupportedMediaTypeError": ".errors",
    "UploadResult": ".models",
    "V1Template": ".models",
    "ValidationDetail": ".errors",
    "ValidationError": ".errors",
}

if TYPE_CHECKING:
    from ._client_config import ClientConfig
    from ._core.events import RequestEvent, ResponseEvent, RetryEvent
    from ._core.options import Budgets, Limits, ParallelDownloads, Progress, RetryPolicy, Timeout
    from ._core.validation import resources_from
    from ._transfer.sinks import PartialDownload, find_partial
    from .client import Client
    from .errors import (
        APIConnectionError,
        APIError,
        APITimeoutError,
        AuthenticationError,
        BadGatewayError,
        BadRequestError,
        BuildFailedError,
        BuildWaitTimeoutError,
        CertificateVerificationError,
        ClientStateError,
        ConflictError,
        DestinationLockedError,
        DestinationUnsafeError,
        FileTooLargeError,
        GatewayTimeoutError,
        HostNotFoundError,
        HostUnavailableError,
        IdempotencyKeyConsumedError,
        IdempotencyMismatchError,
        InternalServerError,
        NotFoundError,
        PaginationError,
        PayloadTooLargeError,
        PermissionDeniedError,
        ProxyError,
        QuotaExceededError,
        RangeNotSatisfiableError,
        RateLimitError,
        RedirectNotFollowedError,
        RemoteProtocolError,
        ResponseDecodeError,
        SandboxKitError,
        ServiceUnavailableError,
        TLSHandshakeError,
        TransportError,
        UnprocessableEntityError,
        UnsupportedMediaTypeError,
        ValidationDetail,
        ValidationError,
    )
    from .models import (
        ActionResult,
        ApiKey,
        Build,
        BuildFailure,
        BuildResources,
        BuildStatus,
        Container,
        ContainersCreated,
        CustomResources,
        DownloadResult,
        EnvVar,
        FileEntry,
        FileRange,
        Image,
        LogEntry,
        LogLevel,
        LogPage,
        OAuthToken,
        Organization,
        Page,
        PartitionEntry,
        PresetResources,
        ShellResult,
        TemplateCreated,
        TemplateCredential,
        TemplateStatus,
        TextPage,
        UploadResult,
        V1Template,
    )
    from .resources._common import AsyncStream
    from .resources.sandbox import Sandbox, SandboxRef
    from .resources.v1_infra import ssh_env
else:  # hidden from type checkers, which would otherwise accept any name as sandboxkit.X

    def __getattr__(name: str) -> Any:
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})

    # Outside pytest the client loads now, with the application's imports: loaded on first
    # use, it would be loaded inside the application's running loop, which its import (aiohttp
    # and the rest, about 0.2 s) would block. pytest imports sandboxkit in every session, for
    # the plugin, and there the names wait for a test to use them.
    if "_pytest" not in sys.modules:
        from . import client as _client  # noqa: F401
