"""The exceptions sandboxkit raises; the public API raises nothing else.

The tree::

    SandboxKitError
    ├── ValidationError (also ValueError)      the client's own check, before any request
    ├── ClientStateError (also RuntimeError)   closed client, wrong event loop
    ├── TransportError                          no usable HTTP answer
    │   ├── APIConnectionError                  connect failed, connection cut, bad framing
    │   │   ├── HostNotFoundError               the host name does not resolve       (*)
    │   │   ├── ProxyError                      the proxy refused the tunnel     (*: but 5xx)
    │   │   └── TLSHandshakeError               TLS cannot be set up (a plain port)  (*)
    │   │       └── CertificateVerificationError   the certificate is not trusted    (*)
    │   ├── RemoteProtocolError                 the answer's head is not valid HTTP   (*)
    │   └── APITimeoutError                     connect/read timeout or the call's deadline
    │       └── BuildWaitTimeoutError           `wait_for_build` gave up: the Build runs on
    ├── ResponseDecodeError                     a 2xx whose body is not what the interface shows
    ├── PaginationError                         a server cursor that would loop forever
    ├── BuildFailedError                        a followed Build ended with `failure`
    ├── DestinationLockedError                  another download is writing that file
    ├── DestinationUnsafeError                  a link or a stranger's file where a part goes
    ├── FileTooLargeError                       a read's `max_size` is less than the file
    └── APIError                                an error status from the service
        ├── RedirectNotFollowedError        3xx: never followed, so no token goes elsewhere
        ├── BadRequestError                 400
        │   └── IdempotencyMismatchError        v2 Sandbox.IdempotentParameterMismatch
        ├── AuthenticationError             401
        ├── PermissionDeniedError           403
        ├── NotFoundError                   404
        ├── ConflictError                   409
        │   └── IdempotencyKeyConsumedError     v2 Sandbox.IdempotentKeyConsumed
        ├── PayloadTooLargeError            413
        ├── UnsupportedMediaTypeError       415
        ├── RangeNotSatisfiableError        416
        ├── UnprocessableEntityError        422
        ├── RateLimitError                  429
        ├── QuotaExceededError              v2 Resource.QuotaExceeded, whatever the status
        └── InternalServerError             5xx
            ├── BadGatewayError             502
            ├── ServiceUnavailableError     503
            └── GatewayTimeoutError         504

(*) no retry can fix these, so none is made: they surface at once.

None of them holds an aiohttp object (not even as `__cause__` or `__context__`: aiohttp's
exceptions carry the request's headers, token included), and no message carries a token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import attrs

if TYPE_CHECKING:
    from .models import Build

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadGatewayError",
    "BadRequestError",
    "BuildFailedError",
    "BuildWaitTimeoutError",
    "CertificateVerificationError",
    "ClientStateError",
    "ConflictError",
    "DestinationLockedError",
    "DestinationUnsafeError",
    "FileTooLargeError",
    "GatewayTimeoutError",
    "HostNotFoundError",
    "HostUnavailableError",
    "IdempotencyKeyConsumedError",
    "IdempotencyMismatchError",
    "InternalServerError",
    "NotFoundError",
    "PaginationError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "ProxyError",
    "QuotaExceededError",
    "RangeNotSatisfiableError",
    "RateLimitError",
    "RedirectNotFollowedError",
    "RemoteProtocolError",
    "ResponseDecodeError",
    "SandboxKitError",
    "ServiceUnavailableError",
    "Surface",
    "TLSHandshakeError",
    "TransportError",
    "UnprocessableEntityError",
    "UnsupportedMediaTypeError",
    "ValidationDetail",
    "ValidationError",
]

Surface = Literal["v2", "v1", "data"]


class SandboxKitError(Exception):
    """Root of every exception sandboxkit raises. `operation` names the call that raised it
    (`files.download`...); None only for one raised before any call (a bad argument)."""

    operation: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # To cross process boundaries (batch, Dask) whatever the constructor takes: made
        # again from its args without __init__, then given every attribute it had.
        return _restore, (type(self), self.args), self.__dict__


def _restore(cls: type[SandboxKitError], args: tuple[Any, ...]) -> SandboxKitError:
    return cls.__new__(cls, *args)


class ValidationError(SandboxKitError, ValueError):
    """Bad input caught by the client before any request was sent."""


class ClientStateError(SandboxKitError, RuntimeError):
    """The client cannot be used as asked: it is closed, or bound to another event loop."""


class TransportError(SandboxKitError):
    """No usable HTTP answer arrived (network, TLS, framing, or time)."""

    def __init__(self, message: str, *, operation: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.operation = operation


class APIConnectionError(TransportError):
    """The connection could not be made, or broke before the answer was complete."""


class HostNotFoundError(APIConnectionError):
    """The host name does not resolve (the resolver says no such name); never retried.

    A temporary resolver failure (`EAI_AGAIN`) is a plain, retried `APIConnectionError`.
    """


class ProxyError(APIConnectionError):
    """The proxy refused the tunnel to an https host: its CONNECT answer's `status` (407:
    credentials wanted or refused; 502/503: host unreachable). Retried as an `APIError` of
    that status would be. A plain-http request gets the proxy's answer as an `APIError`."""

    def __init__(self, message: str, *, status: int, operation: str | None = None) -> None:
        super().__init__(message, operation=operation)
        self.status = status


class HostUnavailableError(APIConnectionError):
    """The host was down (its circuit open) for the whole of the retry policy's `max_stall`
    before this call could send anything of its own; the message gives the host's last
    failure."""


class TLSHandshakeError(APIConnectionError):
    """TLS could not be set up with the server, as when TLS is spoken to a plain-HTTP port;
    retrying cannot help, so it never is."""


class CertificateVerificationError(TLSHandshakeError):
    """The server's TLS certificate is not trusted; retrying cannot help, so it never is."""


class RemoteProtocolError(TransportError):
    """The server's answer is not valid HTTP (a bad status line, a header over 8 KiB): the
    same server gives the same answer, so it is never retried."""


class APITimeoutError(TransportError):
    """A connect or read timeout, or the call's overall deadline, ran out."""


class BuildWaitTimeoutError(APITimeoutError):
    """`templates.wait_for_build` waited its whole `timeout` and the Build was still not
    final. The Build itself goes on; wait again, or look at `build` (the last one seen, None
    if no poll answered in time).

    Attributes:
        template_id, build_id: the Build waited for.
        timeout: the seconds waited.
        build: the Build as last seen.
    """

    def __init__(
        self,
        message: str,
        *,
        template_id: str,
        build_id: str,
        timeout: float,
        build: Build | None = None,
        operation: str | None = "templates.wait_for_build",
    ) -> None:
        super().__init__(message, operation=operation)
        self.template_id = template_id
        self.build_id = build_id
        self.timeout = timeout
        self.build = build


class ResponseDecodeError(SandboxKitError):
    """A success status whose body does not have the shape the interface shows."""

    def __init__(self, message: str, *, status: int, request_id: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.request_id = request_id


class PaginationError(SandboxKitError):
    """The server's paging would never end (an offset that does not advance)."""


@attrs.frozen
class ValidationDetail:
    """One entry of a v1 validation error body."""

    field: str | None
    expression: str | None
    original_value: Any
    reason: str | None


class APIError(SandboxKitError):
    """An error status from the service, decoded from whichever body format it used.

    Attributes:
        status: the HTTP status code.
        message: the service's human-readable message (data-plane messages are never parsed).
        surface: "v2", "v1" or "data".
        request_id: the correlation id, when the service gave one.
        code: the v2 dotted code (str) or the v1 integer code.
        details: the v2 `details` object (quota errors).
        group: the v1 error group.
        validation_detail: the v1 validation records.
        retry_after: seconds the service asked us to wait, when it said so.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int,
        surface: Surface,
        request_id: str | None = None,
        code: str | int | None = None,
        details: Mapping[str, Any] | None = None,
        group: str | None = None,
        validation_detail: tuple[ValidationDetail, ...] = (),
        retry_after: float | None = None,
        traces: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.surface: Surface = surface
        self.request_id = request_id
        self.code = code
        self.details = details
        self.group = group
        self.validation_detail = validation_detail
        self.retry_after = retry_after
        self.traces = traces

    def __str__(self) -> str:
        parts = [f"{self.status}"]
        if self.code is not None:
            parts.append(f"{self.group}/{self.code}" if self.group else str(self.code))
        text = f"{' '.join(parts)}: {self.message}"
        if self.request_id:
            text += f" (request_id={self.request_id})"
        return text

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"surface={self.surface!r}, request_id={self.request_id!r}, message={self.message!r})"
        )


class RedirectNotFollowedError(APIError):
    """A 3xx answer, on either plane. Redirects are never followed: a token only ever goes
    to the host it belongs to. `status` is the 3xx; `Location` is not looked at."""


class BadRequestError(APIError):
    """400: the service rejected the request's parameters."""


class IdempotencyMismatchError(BadRequestError):
    """The Idempotency-Key was used before with a different body."""


class AuthenticationError(APIError):
    """401: the token is missing, malformed, expired, or belongs elsewhere."""


class PermissionDeniedError(APIError):
    """403: the token is valid but not allowed to do this."""


class NotFoundError(APIError):
    """404: the resource (or, on the data plane, the file, its parent or the sandbox) is gone."""


class ConflictError(APIError):
    """409: the resource is not in a state that allows this."""


class IdempotencyKeyConsumedError(ConflictError):
    """The Idempotency-Key belonged to a Template that has since been deleted."""


class PayloadTooLargeError(APIError):
    """413: the upload exceeds the data center's per-file limit."""


class UnsupportedMediaTypeError(APIError):
    """415: the body's content type is not accepted."""


class RangeNotSatisfiableError(APIError):
    """416: a Range started beyond the end of the file."""


class UnprocessableEntityError(APIError):
    """422: understood but not possible here (e.g. split flow in a data center without it)."""


class RateLimitError(APIError):
    """429: a rate limit was hit; `retry_after` says when to come back, if known."""


class QuotaExceededError(APIError):
    """v2 `Resource.QuotaExceeded`: the organization's quota is not enough (see `details`)."""


class InternalServerError(APIError):
    """5xx: the service failed."""


class BadGatewayError(InternalServerError):
    """502: the service's own backend call failed; back off and retry."""


class ServiceUnavailableError(InternalServerError):
    """503: the service is temporarily unavailable."""


class GatewayTimeoutError(InternalServerError):
    """504: the service's gateway timed out."""


class DestinationLockedError(SandboxKitError):
    """Another download (in this process or another) is writing the same destination; its
    partial file is locked. Nothing was sent."""


class DestinationUnsafeError(SandboxKitError):
    """A link, a FIFO or another user's file sits where the partial file goes (`.{name}.part`
    beside `dest`), and cannot be removed (a sticky directory). Nothing was written or sent."""


class FileTooLargeError(SandboxKitError):
    """A read with `max_size` (`files.read_bytes`, `files.read_text`) met a file with more
    bytes than that: raised as soon as an answer's head showed the size, or the bytes counted
    passed the cap; nothing more is read (the connection is closed).

    Attributes:
        size: the file's size in bytes, where an answer showed it; else None.
        limit: the `max_size` asked for.
    """

    def __init__(
        self, message: str, *, size: int | None, limit: int, operation: str | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.size = size
        self.limit = limit
        self.operation = operation


class BuildFailedError(SandboxKitError):
    """A Build ended with a `failure` (raised when following logs with `raise_on_failure`)."""

    def __init__(self, *, build_id: str, code: str | None, message: str | None) -> None:
        super().__init__(f"build {build_id} failed: {code}: {message}")
        self.build_id, self.code, self.message = build_id, code, message


STATUS_ERRORS: Mapping[int, type[APIError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    416: RangeNotSatisfiableError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    500: InternalServerError,
    502: BadGatewayError,
    503: ServiceUnavailableError,
    504: GatewayTimeoutError,
}

V2_CODE_ERRORS: Mapping[str, type[APIError]] = {
    "Sandbox.IdempotentParameterMismatch": IdempotencyMismatchError,
    "Sandbox.IdempotentKeyConsumed": IdempotencyKeyConsumedError,
    "Resource.QuotaExceeded": QuotaExceededError,
}


def error_class(status: int, code: str | int | None = None) -> type[APIError]:
    """The exception class for a status and (v2) code: code-specific first, then status."""
    if isinstance(code, str) and code in V2_CODE_ERRORS:
        return V2_CODE_ERRORS[code]
    if status in STATUS_ERRORS:
        return STATUS_ERRORS[status]
    if status >= 500:
        return InternalServerError
    if 300 <= status < 400:
        return RedirectNotFollowedError
    return APIError
