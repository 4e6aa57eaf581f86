"""The error codes a model sees, and sandboxkit's exceptions translated to them.

A tool fails with a `ToolError`: a code from a fixed set an agent can act on, a message
written for a model (what happened, what to do next), and whether trying again later may
succeed. The client has already retried what its `RetryPolicy` retries; a retryable code
means the retries ran out, not that none were made.

No message carries a token, a key, a proxy credential, a service's own error text (it is
never parsed, and could quote anything) or a local path outside the workspace.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import traceback
from collections.abc import Iterator, Mapping
from typing import Any

from .. import errors

__all__ = ["ErrorCode", "ToolError", "about", "translate", "unexpected", "where_raised"]


class ErrorCode(enum.StrEnum):
    """Why a tool call failed; the values are what a model reads."""

    INVALID_ARGUMENT = "invalid_argument"
    """Bad arguments (schema, types, ranges); never retryable as they are."""
    INVALID_PATH = "invalid_path"
    """A path outside the sandbox root or the workspace, `..` escaping, NUL, too long."""
    NOT_FOUND = "not_found"
    """No such file, template or build."""
    PERMISSION_DENIED = "permission_denied"
    """The service refused access (403), or a quota is spent."""
    AUTHENTICATION_FAILED = "authentication_failed"
    """The application's credentials were refused (401)."""
    TOO_LARGE = "too_large"
    """Over a size cap: the toolkit's, or the service's (413)."""
    RATE_LIMITED = "rate_limited"
    """429 after the client's own retries; retryable."""
    UNAVAILABLE = "unavailable"
    """Outage, timeout, 5xx or connection failure after the client's retries."""
    CONFLICT = "conflict"
    """The target is not in a state that allows this (409, a file being written), or a
    file is no longer the version the call expected (`expected_sha256`,
    `expected_version`): nothing was written; read it again."""
    NO_MATCH = "no_match"
    """`edit_file`: the old text is not in the file; nothing was written."""
    AMBIGUOUS_MATCH = "ambiguous_match"
    """`edit_file`: the old text is in the file more than once and `replace_all` is false;
    nothing was written."""
    UNKNOWN_SANDBOX = "unknown_sandbox"
    """The model named a sandbox the application did not give."""
    CANCELLED = "cancelled"
    """The call was cancelled before it finished."""
    INTERNAL = "internal"
    """Anything else; the details are only in the application's log."""


_RETRYABLE = frozenset({ErrorCode.RATE_LIMITED, ErrorCode.UNAVAILABLE})


class ToolError(Exception):
    """A tool call failed: `code`, a `message` for the model, and `retryable`.

    Args:
        code: one of `ErrorCode`.
        message: what happened and what to do, for a model to read.
        retryable: whether the same call may succeed later; None: the code's default
            (True for `rate_limited` and `unavailable`).
    """

    def __init__(self, code: ErrorCode, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)
        self.message = message
        self.retryable = code in _RETRYABLE if retryable is None else bool(retryable)

    def __reduce__(self) -> tuple[Any, ...]:
        return ToolError, (self.code, self.message), {"retryable": self.retryable}

    def __repr__(self) -> str:
        return (
            f"ToolError(code={self.code.value!r}, retryable={self.retryable}, "
            f"message={self.message!r})"
        )

    def to_json(self) -> dict[str, Any]:
        """The error as a model sees it: `{"code", "message", "retryable"}`."""
        return {"code": self.code.value, "message": self.message, "retryable": self.retryable}


def _request_id(exc: BaseException) -> str:
    request_id = getattr(exc, "request_id", None)
    return f" (request_id={request_id})" if isinstance(request_id, str) and request_id else ""


def _api_error(exc: errors.APIError, subject: str) -> ToolError:
    """A service's error status, by class (never by its message, which is not parsed)."""
    rid = _request_id(exc)
    if isinstance(exc, errors.QuotaExceededError):
        return ToolError(
            ErrorCode.PERMISSION_DENIED,
            f"The organization's quota does not allow this{rid}. Retrying will not help; "
            "tell the user.",
        )
    if isinstance(exc, errors.IdempotencyMismatchError | errors.IdempotencyKeyConsumedError):
        return ToolError(
            ErrorCode.CONFLICT,
            "This idempotency_key was used before, with other arguments or for a template "
            f"since deleted{rid}. Call again with a new idempotency_key.",
        )
    if isinstance(exc, errors.NotFoundError):
        return ToolError(ErrorCode.NOT_FOUND, f"{subject}: not found{rid}.")
    if isinstance(exc, errors.AuthenticationError):
        return ToolError(
            ErrorCode.AUTHENTICATION_FAILED,
            f"The service refused the application's credentials (401){rid}. Retrying will "
            "not help; tell the user the credentials need renewing.",
        )
    if isinstance(exc, errors.PermissionDeniedError):
        return ToolError(
            ErrorCode.PERMISSION_DENIED,
            f"{subject}: permission denied (403){rid}. This user may not access it; try "
            "a path the user owns.",
        )
    if isinstance(exc, errors.PayloadTooLargeError):
        return ToolError(
            ErrorCode.TOO_LARGE,
            f"{subject}: the service refused it as too large (413){rid}. Send less data.",
        )
    if isinstance(exc, errors.RateLimitError):
        wait = f"{exc.retry_after:g} seconds" if exc.retry_after is not None else "a while"
        return ToolError(
            ErrorCode.RATE_LIMITED,
            f"The service is rate-limiting requests (429) and the client's retries ran "
            f"out{rid}. Wait {wait}, then call again.",
        )
    if isinstance(exc, errors.ConflictError):
        return ToolError(
            ErrorCode.CONFLICT,
            f"{subject}: not in a state that allows this (409){rid}.",
        )
    if isinstance(exc, errors.InternalServerError):
        return ToolError(
            ErrorCode.UNAVAILABLE,
            f"The service failed ({exc.status}) and the client's retries ran out{rid}. "
            "Try again shortly.",
        )
    if isinstance(exc, errors.RedirectNotFollowedError):
        return ToolError(
            ErrorCode.UNAVAILABLE,
            f"The service answered with a redirect ({exc.status}), which is never followed"
            f"{rid}. Retrying will not help; tell the user.",
            retryable=False,
        )
    # 400, 415, 416, 422 and any other refusal of the request as sent.
    return ToolError(
        ErrorCode.INVALID_ARGUMENT,
        f"{subject}: the service refused the request ({exc.status}){rid}. Check the "
        "arguments (a directory where a file is expected, a value out of range).",
    )


def _transport_error(exc: errors.TransportError) -> ToolError:
    # Failures no retry can fix (a name that does not resolve, TLS to a plain port, a
    # malformed answer, a proxy asking for credentials) are the application's to fix.
    permanent = isinstance(
        exc, errors.HostNotFoundError | errors.TLSHandshakeError | errors.RemoteProtocolError
    ) or (isinstance(exc, errors.ProxyError) and exc.status < 500)
    if permanent:
        return ToolError(
            ErrorCode.UNAVAILABLE,
            "The service cannot be reached as configured (name, TLS or proxy). Retrying "
            "will not help; tell the user.",
            retryable=False,
        )
    kind = "timed out" if isinstance(exc, errors.APITimeoutError) else "could not be reached"
    return ToolError(
        ErrorCode.UNAVAILABLE,
        f"The service {kind} and the client's retries ran out. Try again shortly.",
    )


def translate(exc: Exception, subject: str) -> ToolError | None:
    """The `ToolError` for one of sandboxkit's exceptions (or an OSError of a local file);
    None for anything else (an internal error, which the caller logs).

    Args:
        exc: what the SDK raised.
        subject: what the call was about, for the message ("file /home/user/a.txt in
            sandbox 'dev'").
    """
    if isinstance(exc, errors.FileTooLargeError):
        size = "more bytes" if exc.size is None else f"{exc.size} bytes"
        return ToolError(
            ErrorCode.TOO_LARGE, f"{subject}: {size} than the limit of {exc.limit} bytes."
        )
    if isinstance(exc, errors.APIError):
        return _api_error(exc, subject)
    if isinstance(exc, errors.TransportError):
        return _transport_error(exc)
    if isinstance(exc, errors.ValidationError):
        return ToolError(ErrorCode.INVALID_ARGUMENT, f"{subject}: refused before sending: {exc}")
    if isinstance(exc, errors.ResponseDecodeError):
        return ToolError(
            ErrorCode.UNAVAILABLE,
            f"{subject}: the service's answers did not fit together (the file may have "
            "changed while it was read). Try again.",
        )
    if isinstance(exc, errors.DestinationLockedError):
        return ToolError(
            ErrorCode.CONFLICT,
            f"{subject}: another download is writing that local file now. Try again when "
            "it is done, or choose another dest.",
            retryable=True,
        )
    if isinstance(exc, errors.DestinationUnsafeError):
        return ToolError(
            ErrorCode.INVALID_PATH,
            f"{subject}: something unsafe (a link, another user's file) sits where the "
            "download's partial file goes. Choose another dest.",
        )
    if isinstance(exc, OSError) and not isinstance(exc, errors.SandboxKitError):
        name = errno.errorcode.get(exc.errno or 0, "an OS error")
        return ToolError(
            ErrorCode.UNAVAILABLE if exc.errno == errno.ENOSPC else ErrorCode.INTERNAL,
            f"{subject}: a local file operation failed ({name}).",
            retryable=False,
        )
    return None


@contextlib.contextmanager
def about(subject: str, hints: Mapping[ErrorCode, str] | None = None) -> Iterator[None]:
    """Inside it, sandboxkit's exceptions become `ToolError`s about `subject` (with the
    hint for their code, if any, appended); anything else passes, for the caller to log."""
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:
        error = translate(exc, subject)
        if error is None:
            raise
        hint = (hints or {}).get(error.code)
        if hint:
            error = ToolError(error.code, f"{error.message} {hint}", retryable=error.retryable)
        raise error from exc


def where_raised(exc: BaseException) -> str:
    """An unexpected exception for the log: its type and where it was raised (the frames'
    places and lines, the chain's types), never its text, which could quote anything."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 5:
        frames = "".join(traceback.format_tb(seen.__traceback__))
        parts.append(f"{type(seen).__module__}.{type(seen).__qualname__}\n{frames}")
        seen = seen.__cause__ or seen.__context__
    return "\ncaused while handling ".join(parts)


def unexpected(name: str, exc: BaseException) -> ToolError:
    """The tool error for a failure outside the tools' contract (a bug of ours): logged for
    the application's developers on `sandboxkit.agents` by its type and place (never its
    text, which could quote anything), and told to the model as `internal`."""
    logging.getLogger("sandboxkit.agents").error("tool %s: unexpected %s", name, where_raised(exc))
    return ToolError(
        ErrorCode.INTERNAL,
        f"{name} failed on an internal error; it was logged for the application's "
        "developers. Retrying will not help.",
        retryable=False,
    )
