"""aiohttp's and the socket's exceptions, translated into sandboxkit's: the one place.

Each is raised outside the `except` block that caught the original (see `mapped`): aiohttp's
exception must not stay reachable as `__cause__` or `__context__`, because it holds the
request's headers, token included. Failures no retry can fix get their own classes (an unknown
host name, a TLS handshake that cannot succeed, an answer that is not HTTP).
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable
from typing import TypeVar

import aiohttp

from ..errors import (
    APIConnectionError,
    APITimeoutError,
    CertificateVerificationError,
    HostNotFoundError,
    ProxyError,
    RemoteProtocolError,
    TLSHandshakeError,
    TransportError,
)

__all__ = ["mapped", "translate"]

T = TypeVar("T")


async def mapped(awaitable: Awaitable[T], operation: str) -> T:
    """Await one aiohttp call; a failure becomes sandboxkit's exception.

    Raised outside the `except` block on purpose: aiohttp's exception must not stay reachable
    as `__cause__` or `__context__`, because it holds the request's headers (the API key or
    the sandbox token) and its repr prints them, into error trackers and logged tracebacks.
    """
    try:
        return await awaitable
    except Exception as exc:
        error = translate(exc, operation)
        if error is None:
            raise
    raise error


# getaddrinfo's "try again": the one resolver failure that a retry may fix.
_TEMPORARY_DNS_ERRORS = frozenset({socket.EAI_AGAIN})
# OpenSSL's reasons for a handshake that cannot succeed with this peer whatever the retry:
# mostly TLS spoken to a plain-HTTP port, or no protocol version in common.
_TLS_MISMATCH_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "PACKET_LENGTH_TOO_LONG",
        "UNSUPPORTED_PROTOCOL",
        "NO_PROTOCOLS_AVAILABLE",
        "TLSV1_ALERT_PROTOCOL_VERSION",
        "SSLV3_ALERT_HANDSHAKE_FAILURE",
    }
)


def translate(exc: Exception, operation: str) -> TransportError | None:
    """The sandboxkit error for an aiohttp or socket failure; None for anything else.

    Messages are built from parts known to hold no secret (host, port, OS reason); never from
    the aiohttp exception's own text, which may carry the URL with its query.
    """
    if isinstance(exc, TransportError):
        return None  # already ours
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return APITimeoutError(f"{operation}: timed out", operation=operation)
    if isinstance(exc, aiohttp.ClientHttpProxyError):
        # The proxy's answer to CONNECT. Its request_info holds the Proxy-Authorization
        # header: only the status and the reason's first words are taken.
        reason = (exc.message or "").split(":", 1)[0].strip()[:100]
        hint = ": check the credentials in the proxy URL" if exc.status == 407 else ""
        return ProxyError(
            f"{operation}: the proxy answered {exc.status} {reason} to the tunnel for "
            f"{exc.request_info.url.host}{hint}",
            status=exc.status,
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return CertificateVerificationError(
            f"{operation}: TLS certificate verification failed for {exc.host}: pass ssl= a "
            "context that trusts the server's CA",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorDNSError) and (
        getattr(exc.os_error, "errno", None) not in _TEMPORARY_DNS_ERRORS
    ):
        return HostNotFoundError(
            f"{operation}: the host name {exc.host!r} does not resolve "
            f"({exc.strerror or 'no such name'}): check base_url, the sandbox's domain, or "
            "the resolver= option",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorSSLError) and (
        getattr(exc.os_error, "reason", None) in _TLS_MISMATCH_REASONS
    ):
        return TLSHandshakeError(
            f"{operation}: no TLS handshake with {exc.host}:{exc.port} "
            f"({getattr(exc.os_error, 'reason', '')}): the port may speak plain HTTP; check "
            "the scheme of base_url or data_plane_scheme",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientConnectorError):
        proxy = "the proxy " if isinstance(exc, aiohttp.ClientProxyConnectionError) else ""
        return APIConnectionError(
            f"{operation}: cannot connect to {proxy}{exc.host}:{exc.port} ({exc.strerror or exc})",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return APIConnectionError(f"{operation}: server closed the connection", operation=operation)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return APIConnectionError(
            f"{operation}: the answer's body was cut short or malformed", operation=operation
        )
    if isinstance(exc, aiohttp.ClientResponseError):
        # sandboxkit never calls raise_for_status and never follows redirects: this is the
        # response parser refusing the answer's head. The server will answer the same again.
        reason = exc.message.split(":", 1)[0].strip()[:100]
        return RemoteProtocolError(
            f"{operation}: the answer from {exc.request_info.url.host} is not valid HTTP "
            f"({reason or exc.status}): check that the URL's scheme and port reach the service",
            operation=operation,
        )
    if isinstance(exc, aiohttp.ClientError | OSError):
        return APIConnectionError(f"{operation}: {type(exc).__name__}: {exc}", operation=operation)
    return None
