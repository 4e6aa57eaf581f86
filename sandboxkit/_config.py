"""Client option values: plain frozen attrs, passed down whole rather than as option blocks."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["Limits", "Timeout"]


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not isinstance(value, int | float) or value <= 0):
        raise ValueError(f"{attribute.name} must be a positive number of seconds or None")


@attrs.frozen(cache_hash=True)  # hashed on every request (the aiohttp timeout cache)
class Timeout:
    """Time limits in seconds.

    Args:
        connect: to open a connection (TCP and TLS).
        read: between two reads of the answer; a slow but moving download never trips it.
        total: the whole call, retries and their waits included (None: no overall limit).
    """

    connect: float | None = attrs.field(default=10.0, validator=_positive_or_none)
    read: float | None = attrs.field(default=60.0, validator=_positive_or_none)
    total: float | None = attrs.field(default=None, validator=_positive_or_none)


@attrs.frozen
class Limits:
    """Connection pool bounds.

    Open sockets never exceed `control_plane_connections + max_sandbox_hosts *
    per_host_connections`.

    Args:
        control_plane_connections: sockets to the console (v1 and v2 share it).
        per_host_connections: sockets to one sandbox host (its 429s lower this for itself).
        max_sandbox_hosts: sandbox host pools kept at once (least recently used closed first).
        host_idle_seconds: a sandbox host pool unused this long is closed.
    """

    control_plane_connections: int = attrs.field(default=100, validator=attrs.validators.ge(1))
    per_host_connections: int = attrs.field(default=8, validator=attrs.validators.ge(1))
    max_sandbox_hosts: int = attrs.field(default=256, validator=attrs.validators.ge(1))
    host_idle_seconds: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
