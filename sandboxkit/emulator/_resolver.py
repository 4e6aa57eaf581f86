"""A resolver that sends the emulator's names to loopback and nothing anywhere else."""

from __future__ import annotations

from .._http.resolver import LOCALHOST, LoopbackResolver

__all__ = ["DATA_PLANE_SUFFIX", "STANDALONE_DOMAIN", "EmulatorResolver"]

# The embedded emulator's data-plane domain: `.test` never resolves on real DNS (RFC 6761),
# so its sandbox hosts are reachable only through this resolver.
DATA_PLANE_SUFFIX = "sandbox.test"
# The standalone emulator's: `localhost` and every name under it are loopback (RFC 6761),
# answered so by curl, browsers and sandboxkit's default resolver.
STANDALONE_DOMAIN = LOCALHOST


class EmulatorResolver(LoopbackResolver):
    """Resolve ``sandbox.test``, any ``*.sandbox.test``, ``localhost`` and any
    ``*.localhost`` to loopback (127.0.0.1; ``::1`` for a connector that asks IPv6 only).

    Args:
        suffix: the data-plane domain answered besides ``localhost`` (an emulator's
            ``domain=``).
        others_refused: every other name raises :class:`OSError` (the default: code under
            test never reaches a real host through this resolver, even by mistake); False
            resolves them as aiohttp's default resolver does (what the CLI uses, to reach an
            emulator and real hosts alike).
    """

    def __init__(self, suffix: str = DATA_PLANE_SUFFIX, *, others_refused: bool = True) -> None:
        super().__init__((suffix, STANDALONE_DOMAIN), others_refused=others_refused)
