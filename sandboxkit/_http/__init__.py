"""The HTTP boundary: the only layer that talks to aiohttp.

Calls (the retry loop, and the data plane's binding to a host), the transport (its sessions,
one request on a host's pool, request and answer bodies), connections (their protocol, and
the plain GET path below aiohttp's request machinery), the receive ring, each host's pool,
pause and circuit, the client's budgets as they run (throttle), error translation, the
resolver, telemetry, cancellation and fork handling. It imports `_core` and nothing above
it; what it hands up is `_core`'s values and `errors`' exceptions, never an aiohttp type
(`tests/test_structure.py` checks that only this folder, the client's resolver type, the
emulator and the CLI import aiohttp).
"""

__all__: list[str] = []
