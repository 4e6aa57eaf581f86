"""A handle on one sandbox's data plane."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._protocol import data_plane_origin
from .files import Files

if TYPE_CHECKING:
    from .._calls import Calls

__all__ = ["Sandbox"]


class Sandbox:
    """One sandbox's data plane, reached at `{scheme}://{sandbox_key}.{domain}`.

    Its requests go through that host's own pooled session, the only one that carries its
    access token. Creating a handle sends nothing.
    """

    def __init__(
        self, calls: Calls, *, sandbox_key: str, domain: str, access_token: str, scheme: str
    ) -> None:
        self.sandbox_key = sandbox_key
        self.domain = domain
        self.origin = data_plane_origin(scheme, sandbox_key, domain)
        self._calls = calls
        self._token = access_token
        self.files = Files(calls, self.origin, access_token)

    def __repr__(self) -> str:
        return f"Sandbox(sandbox_key={self.sandbox_key!r}, domain={self.domain!r})"

    async def aclose(self) -> None:
        """Drop this sandbox's connection pool now (optional: idle pools close by themselves)."""
        await self._calls.transport.hosts.discard(self.origin, self._token)
