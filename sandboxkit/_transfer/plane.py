"""The one data-plane call path: every operation on a sandbox's host goes through `DataPlane`.

`DataPlane.open` sends one request (a `DataRequest`, built once by its engine with
`protocol.data_request`) on the host's own pool (the only session carrying its token, which
never follows a redirect); `DataPlane.run` (`Calls.run`) around it retries. A JSON-answering
operation is `DataPlane.call_json`; download and upload (`download`, `upload`) are built
over `open` and `run`. Adding an operation (command execution, say) is one function here or
beside them, a model, an emulator route and a test.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

import attrs

from .._core.answers import Reply
from .._core.options import NO_OPTIONS, CallOptions, Progress, Timeout
from .._core.protocol import DataRequest, data_request, is_idempotent, request_target
from .._core.retry import TryAgain
from .._core.validation import check_remote_path
from .._http.bodies import StreamingResponse
from .._http.calls import Calls
from .._http.hosts import HostKey
from ..errors import ValidationError

__all__ = ["REPLY_LIMIT", "DataPlane", "Progress", "check_chunk_size", "check_destination"]

T = TypeVar("T")
# A JSON answer is a few KiB; anything near this size is not one the interface shows.
REPLY_LIMIT = 1 << 20


def check_chunk_size(chunk_size: Any) -> int:
    """A positive number of bytes."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValidationError(f"chunk_size={chunk_size!r}: must be a positive integer")
    return chunk_size


def check_destination(dest: Any) -> Path:
    """`dest` as a Path whose parent directory exists and which is not itself a directory."""
    if not isinstance(dest, str | os.PathLike):
        raise ValidationError(f"dest={dest!r}: must be a str or os.PathLike path")
    path = Path(os.fspath(dest))
    if not path.name:
        raise ValidationError(f"dest={str(path)!r}: must name a file")
    if path.is_dir():
        raise ValidationError(f"dest={str(path)!r}: is a directory; pass a file path")
    if not path.parent.is_dir():
        raise ValidationError(f"dest={str(path)!r}: its directory does not exist")
    return path


@attrs.frozen
class DataPlane:
    """One sandbox host (its origin and token; the token never in a repr) and the client's
    calls."""

    calls: Calls
    host: HostKey

    def params(self, remote: str, username: str | None) -> list[tuple[str, str]]:
        """The query of `/files`: `path` (checked here, before any network) and `username`.

        The values go to aiohttp unquoted; yarl percent-encodes them exactly once.
        """
        pairs = [("path", check_remote_path(remote))]
        if username is not None:
            pairs.append(("username", username))
        return pairs

    def open(self, request: DataRequest) -> AbstractAsyncContextManager[StreamingResponse]:
        """`request` on this host's pool (its 429 window moved by the answer); the body
        stays unread. Use inside an attempt of `run`."""
        return self.calls.transport.open(self.host, request)

    def run(
        self,
        operation: str,
        attempt: Callable[[Timeout], Awaitable[T | TryAgain]],
        **how: Any,
    ) -> Coroutine[Any, Any, T]:
        """The client's one retry loop around `attempt`, to be awaited: `Calls.run` sending
        to this host (waited for while its circuit is open). `how` (`idempotent`, `options`,
        `progress`, `transfer`) passes through to it as it is."""
        return self.calls.run(operation, attempt, host=self.host.origin, **how)

    async def call_json(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Sequence[tuple[str, str]] = (),
        options: CallOptions = NO_OPTIONS,
    ) -> Reply:
        """A request whose answer is JSON: retried as its method allows, deciphered whole."""

        target = request_target(path, params)

        async def attempt(timeout: Timeout) -> Reply:
            async with self.open(data_request(method, target, operation, timeout)) as response:
                return await response.reply(REPLY_LIMIT)

        return await self.run(operation, attempt, idempotent=is_idempotent(method), options=options)
