"""The circuit of every host a client has seen fail, and the events calls wait on.

The transport reports what each request met (`answered`, `failed`); `Calls` asks before
each try whether the host may be sent to (`_retry.Circuit.admit`) and waits if not. Only
hosts with failures on record have a circuit: a healthy host costs one dict lookup a
request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from ._protocol import OUTAGE_STATUSES
from ._retry import Circuit

__all__ = ["Circuits"]

logger = logging.getLogger("sandboxkit")

# Hosts that failed now and then but never went down are forgotten past this many, so a
# batch over thousands of short-lived sandboxes keeps no record of each.
_KEPT = 4096


class Circuits:
    """Circuits by origin (the console's base URL, or a sandbox host's origin)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._circuits: dict[str, Circuit] = {}
        self._changed: dict[str, anyio.Event] = {}

    def get(self, origin: str) -> Circuit | None:
        """The host's circuit; None when it is closed with no failure on record."""
        return self._circuits.get(origin)

    def answered(self, origin: str, status: int) -> None:
        """The host answered a request's head with `status`."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer")
            return
        circuit = self._circuits.pop(origin, None)  # closed and clean: the default again
        if circuit is not None and circuit.on_answer():
            logger.warning("%s answers again; calls waiting for it go on", origin)
            self._notify(origin)

    def failed(self, origin: str, description: str) -> None:
        """A request to the host met an outage failure (`_retry.is_outage`)."""
        circuit = self._circuits.get(origin)
        if circuit is None:
            if len(self._circuits) >= _KEPT:
                self._forget_closed()
            circuit = self._circuits[origin] = Circuit()
        if circuit.on_outage(self.clock(), description):
            logger.warning(
                "%s looks down (%d failures in a row, last: %s); calls wait, probing it "
                "again in %.2fs",
                origin,
                circuit.failures,
                description,
                circuit.cooldown,
            )
            self._notify(origin)

    def abandon(self, origin: str, ticket: int) -> None:
        """The probe `ticket` ended without reporting (cancelled): another call may probe."""
        circuit = self._circuits.get(origin)
        if circuit is not None and circuit.abandon(ticket):
            self._notify(origin)

    def changed(self, origin: str) -> anyio.Event:
        """An event set at the host's next change of state (the probe's outcome)."""
        event = self._changed.get(origin)
        if event is None:
            event = self._changed[origin] = anyio.Event()
        return event

    def _notify(self, origin: str) -> None:
        event = self._changed.pop(origin, None)
        if event is not None:
            event.set()

    def _forget_closed(self) -> None:
        for origin in [o for o, c in self._circuits.items() if c.closed]:
            del self._circuits[origin]
