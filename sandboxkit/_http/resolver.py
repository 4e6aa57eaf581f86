"""The one loopback resolver: names under chosen domains are loopback, every other name goes
to aiohttp's default resolver, or, for code under test, nowhere.

RFC 6761 reserves `localhost` and every name under it for the loopback interface (section
6.3), and `.test` for testing (section 6.2: it never resolves on real DNS). curl and browsers
answer `*.localhost` without asking anyone; the system resolver of many machines does not
(glibc finds `localhost` in /etc/hosts and nothing under it), so a standalone emulator's
sandbox hosts, `{key}.localhost:PORT`, would not resolve, and the embedded emulator's,
`{key}.sandbox.test:PORT`, never do. One class covers the three uses:

- a Client built without `resolver=`: `localhost` names to loopback, the rest as before;
- the emulator's `EmulatorResolver`: its domain and `localhost`, and every other name
  refused (`OSError`), so code under test never reaches a real host by mistake;
- the CLI's data-plane commands: the embedded emulator's domain and `localhost` too, the rest
  as before.

A resolver passed by the caller is used as given.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = ["LOCALHOST", "LoopbackResolver", "under"]

LOCALHOST = "localhost"


def under(host: str, domains: Iterable[str]) -> bool:
    """Whether `host` is one of `domains` or a name under one (any case, trailing dot or not)."""
    name = host.lower().rstrip(".")
    return any(name == domain or name.endswith("." + domain) for domain in domains)


class LoopbackResolver(AbstractResolver):
    """The names under `domains` to loopback; every other name to aiohttp's default
    resolver, or, with `others_refused`, to an `OSError`.

    One loopback address per lookup, as the connector's family asks: `::1` for IPv6 only,
    else `127.0.0.1` (a single address keeps a refused connect one plain error). The default
    resolver is made on first use, inside the running loop it needs.

    Args:
        domains: the domains answered with loopback (`localhost` alone by default).
        others_refused: refuse every other name instead of resolving it.
    """

    def __init__(self, domains: Iterable[str] = (LOCALHOST,), *, others_refused: bool = False):
        self._domains = frozenset(d.lower().strip(".") for d in domains)
        self._others_refused = others_refused
        self._default: AbstractResolver | None = None

    def handles(self, host: str) -> bool:
        """Whether `host` is one of the names this resolver answers with loopback."""
        return under(host, self._domains)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Loopback for the names handled; the default resolver's answer for the rest.

        Raises:
            OSError: `host` is not handled and others are refused.
        """
        if not self.handles(host):
            if self._others_refused:
                raise OSError(f"the emulator resolver does not resolve {host!r}")
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
