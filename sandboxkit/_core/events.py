"""What the event hooks are given, and the few facts about a request that may be shown.

Pure: the records `on_request`, `on_response` and `on_retry` receive, the headers a DEBUG line
may show (an allowlist: a header not named here is never logged, whatever it carries), and
how an origin and a failure are described. Nothing here holds a token, an API key, a path's
query (which carries a file path and a username) or userinfo of a URL.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

import attrs

from ..errors import APIError, SandboxKitError
from .protocol import (
    ACCEPT_ENCODING,
    ACCEPT_RANGES,
    CONTENT_ENCODING,
    CONTENT_RANGE,
    ETAG,
    IDEMPOTENCY_REPLAYED,
    IF_RANGE,
    LAST_MODIFIED,
    RANGE,
    REQUEST_ID,
    RETRY_AFTER,
)
from .retry import TryAgain

__all__ = [
    "INCOMPLETE",
    "LOGGED_REQUEST_HEADERS",
    "LOGGED_RESPONSE_HEADERS",
    "Origin",
    "RequestEvent",
    "ResponseEvent",
    "RetryEvent",
    "allowed_headers",
    "origin_of",
    "retry_reason",
]

# The only headers a DEBUG line shows. Authorization, X-Access-Token, cookies, proxy headers
# and anything a server invents stay out because they are not listed, not because a list of
# secrets caught them.
LOGGED_REQUEST_HEADERS = (RANGE, IF_RANGE, ACCEPT_ENCODING, "Content-Type", "Content-Length")
LOGGED_RESPONSE_HEADERS = (
    REQUEST_ID,
    "Content-Type",
    "Content-Length",
    CONTENT_RANGE,
    CONTENT_ENCODING,
    ACCEPT_RANGES,
    ETAG,
    LAST_MODIFIED,
    RETRY_AFTER,
    IDEMPOTENCY_REPLAYED,
)
_REQUEST_NAMES = {name.lower(): name for name in LOGGED_REQUEST_HEADERS}

# The reason of a retry whose attempt did not fail but left the transfer unfinished: a body
# that ended short, or a range answer that could not be trusted (another request carries on).
INCOMPLETE = "incomplete"


@attrs.frozen
class RequestEvent:
    """A request is about to be sent (`on_request`).

    Attributes:
        operation: the operation's name, as in logs and errors (`"files.download"`).
        method: the HTTP method.
        host: the server's `host[:port]` (no scheme, path, query or credentials).
        attempt: which request of the operation this is, from 1 (resumes and retries count).
    """

    operation: str
    method: str
    host: str
    attempt: int


@attrs.frozen
class ResponseEvent:
    """A request ended (`on_response`): its answer was read, or it failed.

    Attributes:
        operation, method, host, attempt: as in `RequestEvent`.
        status: the answer's status; None when no answer came (a refused or dropped
            connection, a timeout before the head).
        elapsed: seconds from sending to the end of the request (a data-plane answer's
            body included).
        error: the class name of the exception the request ended in (`"BadGatewayError"`,
            `"APIConnectionError"`); None when it succeeded.
        request_id: the answer's `X-Request-ID` (the data plane sends none).
    """

    operation: str
    method: str
    host: str
    attempt: int
    status: int | None
    elapsed: float
    error: str | None
    request_id: str | None


@attrs.frozen
class RetryEvent:
    """The operation will send again after `delay` seconds (`on_retry`, called before the
    wait begins).

    Attributes:
        operation, host: as in `RequestEvent`.
        attempt: the number of the attempt that failed (the next one is `attempt + 1`).
        delay: the seconds about to be waited.
        reason: the failed answer's status as text (`"502"`), the exception's class name
            (`"APIConnectionError"`), or `"incomplete"` (a transfer's answer ended short or
            could not be trusted; the next request carries it on).
    """

    operation: str
    host: str
    attempt: int
    delay: float
    reason: str


@attrs.frozen
class Origin:
    """Where requests go, as it may be shown: `host` is `host[:port]` as in a Host header;
    `address` and `port` are the OpenTelemetry `server.address` and `server.port`."""

    scheme: str
    host: str
    address: str
    port: int


@functools.lru_cache(maxsize=256)  # one per console and sandbox host: parsed once
def origin_of(url: str) -> Origin:
    """The shown parts of `url`'s origin; never its userinfo, path or query."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Origin(parts.scheme, host, parts.hostname or host, port)


def allowed_headers(headers: Mapping[str, str] | None, response: bool) -> dict[str, str]:
    """The allowlisted headers of a request (a plain dict) or an answer (case-insensitive)."""
    if not headers:
        return {}
    if response:
        return {name: headers[name] for name in LOGGED_RESPONSE_HEADERS if name in headers}
    pairs: Iterable[tuple[str, str]] = headers.items()
    return {_REQUEST_NAMES[k.lower()]: v for k, v in pairs if k.lower() in _REQUEST_NAMES}


def retry_reason(failure: SandboxKitError | TryAgain) -> str:
    """`RetryEvent.reason`: a status as text, an exception class name, or `"incomplete"`."""
    if isinstance(failure, TryAgain):
        return INCOMPLETE
    if isinstance(failure, APIError):
        return str(failure.status)
    return type(failure).__name__
