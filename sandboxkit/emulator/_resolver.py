"""A resolver that sends the emulator's names to 127.0.0.1 and nothing anywhere else."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult

__all__ = ["DATA_PLANE_SUFFIX", "STANDALONE_DOMAIN", "EmulatorResolver"]

# The embedded emulator's data-plane domain: `.test` never resolves on real DNS (RFC 6761),
# so its sandbox hosts are reachable only through this resolver.
DATA_PLANE_SUFFIX = "sandbox.test"
# The standalone emulator's: `localhost` and every name under it are loopback (RFC 6761),
# answered so by curl, browsers and sandboxkit's default resolver.
STANDALONE_DOMAIN = "localhost"
_LOOPBACK = "127.0.0.1"


class EmulatorResolver(AbstractResolver):
    """Resolve ``sandbox.test``, any ``*.sandbox.test``, ``localhost`` and any
    ``*.localhost`` to 127.0.0.1.

    Args:
        suffix: the data-plane domain answered besides ``localhost`` (an emulator's
            ``domain=``).

    Every other name raises :class:`OSError`: code under test never reaches a real host
    through this resolver, even by mistake.
    """

    def __init__(self, suffix: str = DATA_PLANE_SUFFIX) -> None:
        self._suffixes = {suffix.lower().strip("."), STANDALONE_DOMAIN}

    def handles(self, host: str) -> bool:
        """Whether ``host`` is one of the names this resolver answers."""
        name = host.lower().rstrip(".")
        return any(name == s or name.endswith("." + s) for s in self._suffixes)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Map an emulator name to 127.0.0.1.

        Raises:
            OSError: ``host`` is not an emulator name.
        """
        if not self.handles(host):
            raise OSError(f"the emulator resolver does not resolve {host!r}")
        return [
            ResolveResult(
                hostname=host,
                host=_LOOPBACK,
                port=port,
                family=socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
        ]

    async def close(self) -> None:
        """Nothing to release."""
