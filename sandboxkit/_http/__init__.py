"""The HTTP boundary: the only layer that talks to aiohttp.

Calls (the retry loop), the transport and its sessions, the plain GET path below aiohttp's
request machinery, connections, request and answer bodies, socket helpers, pools, circuits,
error translation, the resolver, telemetry, cancellation and fork handling. It imports
`_core` and nothing above it; what it hands up is `_core`'s values and `errors`' exceptions,
never an aiohttp type (`tests/test_structure.py` checks that only this folder, the client's
resolver type, the emulator and the CLI import aiohttp).
"""

__all__: list[str] = []
