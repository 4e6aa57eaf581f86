"""Route names: each route serving an SDK operation is named as the SDK names it.

The SDK's names come from ``sandboxkit._core.operations`` (the one list both sides share); the
emulator's own routes, which no SDK operation calls, start with ``emulator.``. Anything
keyed by a route name (scripted and random faults, the journal) refuses an unknown one, so
a misspelled name fails at the call instead of scripting a fault that never fires.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from .._core.operations import OPERATIONS

__all__ = [
    "EMULATOR_PRODUCTS",
    "EMULATOR_ROUTES",
    "EMULATOR_SANDBOXES_CREATE",
    "ROUTE_NAMES",
    "check_routes",
]

# GET /api/v2/products: served, but not shown by the interface, so no SDK operation calls it.
EMULATOR_PRODUCTS = "emulator.products"

# POST /_emulator/sandboxes: how a standalone emulator makes more sandboxes.
EMULATOR_SANDBOXES_CREATE = "emulator.sandboxes.create"

EMULATOR_ROUTES: tuple[str, ...] = (EMULATOR_PRODUCTS, EMULATOR_SANDBOXES_CREATE)

# Every route name a stock Emulator serves.
ROUTE_NAMES: frozenset[str] = frozenset(OPERATIONS) | frozenset(EMULATOR_ROUTES)


def check_routes(routes: Iterable[str], known: frozenset[str]) -> list[str]:
    """``routes`` as a list, each checked to be one of ``known``.

    Raises:
        ValueError: a route is unknown (or not a string); the message lists the known ones.
    """
    if isinstance(routes, str):
        raise ValueError(f"give route names as a list, not the one string {routes!r}")
    checked = list(routes)
    for route in checked:
        if route not in known:
            close = difflib.get_close_matches(str(route), known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"unknown route {route!r}{hint}; the routes are: {', '.join(sorted(known))}"
            )
    return checked
