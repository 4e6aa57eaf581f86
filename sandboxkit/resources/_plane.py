"""What the download and upload halves share: the sandbox host, its query, its errors."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs

from .._answers import error_for
from .._calls import Calls
from .._config import Timeout
from .._transport import HostPool, StreamingResponse
from .._validation import check_remote_path
from ..errors import APIError, ValidationError

__all__ = [
    "ERROR_BODY_LIMIT",
    "DataPlane",
    "Progress",
    "check_chunk_size",
    "status_error",
]

# `progress(done_bytes, total_or_None)`; whatever it returns is ignored.
Progress = Callable[[int, int | None], object]

# Error bodies are `{message}`: a few KiB at most. Reading more would let a hostile or broken
# server make us buffer a file's worth of bytes.
ERROR_BODY_LIMIT = 64 * 1024


def check_chunk_size(chunk_size: Any) -> int:
    """A positive number of bytes."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValidationError(f"chunk_size={chunk_size!r}: must be a positive integer")
    return chunk_size


@attrs.frozen
class DataPlane:
    """One sandbox host as a transfer sees it: the retry loop, its origin and its token.

    The token is only the key of the host's pool (whose session carries it); it never shows
    in a repr.
    """

    calls: Calls
    origin: str
    token: str = attrs.field(repr=False)

    def params(self, remote: str, username: str | None) -> list[tuple[str, str]]:
        """The query of `/files`: `path` (checked here, before any network) and `username`.

        The values go to aiohttp unquoted; yarl percent-encodes them exactly once.
        """
        pairs = [("path", check_remote_path(remote))]
        if username is not None:
            pairs.append(("username", username))
        return pairs

    def timeout(self, override: Timeout | None) -> Timeout:
        """The per-request limits in force for this call."""
        return override if override is not None else self.calls.timeout


async def status_error(response: StreamingResponse, operation: str, pool: HostPool) -> APIError:
    """The APIError for a data-plane answer that is neither success nor handled.

    A 429 halves this host's concurrency window (other hosts are untouched). A 3xx is never
    followed (the host's session alone carries the token): it becomes a
    `RedirectNotFollowedError` with its status, without reading the body or `Location`.
    """
    status = response.status
    if status == 429:
        pool.on_throttled()
    body = b"" if 300 <= status < 400 else await response.read(ERROR_BODY_LIMIT)
    return error_for(status, response.headers, body, "data", operation=operation, now=time.time())
