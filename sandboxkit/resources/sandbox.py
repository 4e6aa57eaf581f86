"""A handle on one sandbox's data plane, and how one is read from a create/connect answer.

The interface does not show the sandbox create, connect, list and delete operations yet; when
it does, a `sandboxes` resource beside this module returns handles made here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._core.options import ParallelDownloads
from .._core.protocol import data_plane_origin
from .._http.calls import DataPlane
from .._http.hosts import HostKey
from ..errors import ValidationError
from .files import Files

if TYPE_CHECKING:
    from .._http.calls import Calls

__all__ = ["Sandbox", "SandboxRef", "address_from_response", "check_address"]


@attrs.frozen
class SandboxRef:
    """Names one sandbox: its key, its domain and its access token (never shown in `repr`).

    The one address type: what `client.sandbox(...)` takes (by the same three names), what
    `sandbox_from_response` reads, and what a batch job names its sandbox by
    (`sandboxkit.batch.SandboxRef` is this class). Building one checks nothing; it is
    checked, with every other input, before a request is sent.
    """

    sandbox_key: str
    domain: str
    access_token: str = attrs.field(repr=False)

    @classmethod
    def from_response(cls, body: Mapping[str, Any]) -> SandboxRef:
        """The sandbox a create/connect answer names, read as `client.sandbox_from_response`
        reads it: `data.sandbox_key`, `data.domain`, and `sandbox_access_token` under `data`
        or at the top level.

        Raises:
            ValidationError: the answer is not a mapping, lacks one of the three (named), or
                holds one that is not usable (an empty or multi-line value, a key or domain
                that is not a plain host name part).
        """
        return address_from_response(body)


def check_address(sandbox_key: Any, domain: Any, access_token: Any) -> SandboxRef:
    """The three values as an address, or ValidationError: single-line non-empty strings, and
    key and domain usable as host name parts (the domain may carry a port)."""
    for name, value in (
        ("sandbox_key", sandbox_key),
        ("domain", domain),
        ("access_token", access_token),
    ):
        if not isinstance(value, str) or not value or any(c in value for c in "\r\n\x00"):
            raise ValidationError(f"{name} must be a non-empty single-line string")
    if any(c in sandbox_key for c in "/.:@?#") or any(c in domain for c in "/@?#"):
        raise ValidationError("sandbox_key and domain must be plain host name parts")
    return SandboxRef(sandbox_key, domain, access_token)


def address_from_response(body: Any) -> SandboxRef:
    """The address in a create/connect answer: `data.sandbox_key`, `data.domain`, and
    `sandbox_access_token` under `data` or at the top level (where it sits is not shown).

    Raises:
        ValidationError: the answer is not a mapping or lacks one of the three.
    """
    if not isinstance(body, Mapping):
        raise ValidationError("expected the create/connect answer as a mapping")
    data = body.get("data")
    data = data if isinstance(data, Mapping) else body
    token = data.get("sandbox_access_token") or body.get("sandbox_access_token") or ""
    found = {
        "sandbox_key": data.get("sandbox_key"),
        "domain": data.get("domain"),
        "sandbox_access_token": token,
    }
    missing = [name for name, value in found.items() if not value]
    if missing:
        raise ValidationError(f"the answer lacks {', '.join(missing)}")
    return check_address(str(found["sandbox_key"]), str(found["domain"]), str(token))


class Sandbox:
    """One sandbox's data plane, reached at `{scheme}://{sandbox_key}.{domain}`.

    Get one from a client: `client.sandbox_from_response(answer)` (the create/connect
    answer) or `client.sandbox(sandbox_key=..., domain=..., access_token=...)`; the
    constructor below is internal. Its files are `sandbox.files`.

    Its requests go through that host's own pooled session, the only one that carries its
    access token. Creating a handle sends nothing.
    """

    def __init__(
        self,
        calls: Calls,
        address: SandboxRef,
        *,
        scheme: str,
        parallel: ParallelDownloads | None = None,
    ) -> None:
        self.sandbox_key = address.sandbox_key
        self.domain = address.domain
        self.origin = data_plane_origin(scheme, address.sandbox_key, address.domain)
        self._calls = calls
        self._host = HostKey(self.origin, address.access_token)
        # The one call path every data-plane operation of this sandbox takes (files today,
        # command execution when the interface shows it).
        self._plane = DataPlane(calls, self._host)
        self._files = Files(self._plane, parallel or ParallelDownloads())

    @property
    def files(self) -> Files:
        """This sandbox's files: `download`, `upload`, `iter_bytes`, `read_bytes`."""
        return self._files

    def __repr__(self) -> str:
        return f"Sandbox(sandbox_key={self.sandbox_key!r}, domain={self.domain!r})"

    async def aclose(self) -> None:
        """Drop this sandbox's connection pool now (optional: idle pools close by themselves)."""
        await self._calls.transport.hosts.discard(self._host)
