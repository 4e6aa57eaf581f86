"""The default resolver: `localhost` and `*.localhost` are loopback, every other name as before.

RFC 6761 (section 6.3) reserves `localhost` and every name under it for the loopback
interface, and curl and browsers answer them so without asking anyone. The system resolver
of many machines does not (glibc finds `localhost` in /etc/hosts and nothing under it), so a
standalone emulator's sandbox hosts, `{key}.localhost:PORT`, would not resolve. A Client
built without `resolver=` uses this one; every name not under `localhost` goes to aiohttp's
default resolver unchanged. A resolver passed by the caller is used as given.
"""

from __future__ import annotations

import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = ["LocalhostResolver", "is_localhost"]

_LOCALHOST = "localhost"


def is_localhost(host: str) -> bool:
    """Whether `host` is `localhost` or a name under it (any case, trailing dot or not)."""
    name = host.lower().rstrip(".")
    return name == _LOCALHOST or name.endswith("." + _LOCALHOST)


class LocalhostResolver(AbstractResolver):
    """`localhost` and `*.localhost` to loopback; every other name to aiohttp's default.

    One loopback address per lookup, as the connector's family asks: `::1` for IPv6 only,
    else `127.0.0.1` (a single address keeps a refused connect one plain error). The default
    resolver is made on first use, inside the running loop it needs.
    """

    def __init__(self) -> None:
        self._default: AbstractResolver | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Loopback for the localhost names; the default resolver's answer for the rest."""
        if not is_localhost(host):
            if self._default is None:
                self._default = aiohttp.DefaultResolver()
            return await self._default.resolve(host, port, family)
        v6 = family == socket.AF_INET6
        return [
            ResolveResult(
                hostname=host,
                host="::1" if v6 else "127.0.0.1",
                port=port,
                family=socket.AF_INET6 if v6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        """Release the default resolver, if one was made."""
        default, self._default = self._default, None
        if default is not None:
            await default.close()
