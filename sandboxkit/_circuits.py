"""The circuit of every host a client has seen fail, and the events calls wait on.

The transport reports what each request met (`heard_from`, `answered`, `failed`); `Calls`
asks before each try whether the host may be sent to (`_retry.Circuit.admit`) and waits if
not. Only hosts with failures on record have a circuit: a healthy host costs two dict
operations a request.

Only a host that has answered this client before can be down: one that never answered
(a wrong port, a server not started) is a mistake to report, not an outage to wait out, so
its failures open no circuit and are counted as attempts.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import anyio

from ._protocol import OUTAGE_STATUSES
from ._retry import Circuit, is_outage
from .errors import SandboxKitError

__all__ = ["Circuits"]

# A child of "sandboxkit": a host going down, being waited for and answering again are what
# explain a long silence, so a program (the CLI) may show these alone on screen.
logger = logging.getLogger("sandboxkit.hosts")

# Hosts that failed now and then but never went down are forgotten past this many, so a
# batch over thousands of short-lived sandboxes keeps no record of each.
_KEPT = 4096
# Hosts remembered as having answered; past this many the oldest half is forgotten (a
# forgotten host that goes down fails after its attempts instead of being waited for).
_HEARD = 65536


class Circuits:
    """Circuits by origin (the console's base URL, or a sandbox host's origin)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._circuits: dict[str, Circuit] = {}
        self._changed: dict[str, anyio.Event] = {}
        self._heard: dict[str, None] = {}  # hosts that answered this client, oldest first
        self._waited: set[str] = set()  # hosts down now that a call has said it waits for

    def get(self, origin: str) -> Circuit | None:
        """The host's circuit; None when it is closed with no failure on record."""
        return self._circuits.get(origin)

    def headed(self, origin: str, status: int) -> int:
        """An answer's head came: 502/503 is an outage failure (0 is returned); any other
        status is returned, for `answered` or `ended` once its body flows or ends."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer")
            return 0
        self.heard_from(origin)
        return status

    def on_body(self, origin: str, status: int) -> Callable[[], None] | None:
        """What to call at the first body byte of a `status` answer (`headed`'s), so that
        a long body keeps no call waiting for the host until it ends; None: nothing waits."""
        if not status or origin not in self._circuits:
            return None
        return functools.partial(self.answered, origin, status)

    def heard_from(self, origin: str) -> None:
        """A head other than 502/503 came from the host: it was up, so from now on its
        failures (and those of its siblings, `_site`) may say it is down."""
        heard = self._heard
        if origin not in heard:
            if len(heard) >= _HEARD:
                for old in list(heard)[: _HEARD // 2]:
                    del heard[old]
            heard[origin] = None
            heard[_site(origin)] = None

    def ever_answered(self, origin: str) -> bool:
        """Whether the host, or a sibling of it, has sent this client a head other than
        502/503."""
        heard = self._heard
        return origin in heard or _site(origin) in heard

    def answered(self, origin: str, status: int) -> None:
        """The host answered with `status`, and (unless 502/503) its body flows: a head
        alone closes no circuit, since a host going away sends some and then closes."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer")
            return
        circuit = self._circuits.pop(origin, None)  # closed and clean: the default again
        if circuit is not None and circuit.on_answer():
            logger.warning("%s answers again; calls waiting for it go on", origin)
            self._waited.discard(origin)
            self._notify(origin)

    def first_wait(self, origin: str) -> bool:
        """True for the first call to wait for the host in this outage (it says so)."""
        if origin in self._waited:
            return False
        self._waited.add(origin)
        return True

    def ended(self, origin: str, status: int, exc: BaseException | None, received: int) -> None:
        """How an answer with a `status` head (not 502/503) ended, `received` body bytes
        in: a body that flowed, ended whole or was not wanted says the host is up; a cut
        before any body byte says it is going away. A cancellation says nothing."""
        if exc is None or (isinstance(exc, Exception) and received):
            self.answered(origin, status)
        elif isinstance(exc, SandboxKitError) and is_outage(exc):
            self.failed(origin, f"closed after the head of a {status} answer ({exc})")
        elif isinstance(exc, Exception):  # ours (a disk write, a decode): the host answered
            self.answered(origin, status)

    def failed(self, origin: str, description: str) -> None:
        """A request to the host met an outage failure (`_retry.is_outage`)."""
        if not self.ever_answered(origin):
            return  # never up: not an outage (see the module's docstring)
        circuit = self._circuits.get(origin)
        if circuit is None:
            if len(self._circuits) >= _KEPT:
                self._forget_closed()
            circuit = self._circuits[origin] = Circuit()
        was_closed = circuit.closed
        if circuit.on_outage(self.clock(), description):
            # Said at WARNING when the host goes down; each failed probe after that only at
            # DEBUG: a long outage would otherwise print a line a probe.
            logger.log(
                logging.WARNING if was_closed else logging.DEBUG,
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


def _site(origin: str) -> str:
    """The service a host belongs to: its origin without the host name's first label
    (`https://{sandbox}.{domain}` is `https://{domain}`), so that a sandbox first sent to
    during an outage counts as up when others of its domain answered. An address, or a
    name of one label, is its own."""
    scheme, _, rest = origin.partition("://")
    _label, dot, parent = rest.partition(".")
    if not dot or rest.startswith("[") or rest.split(":")[0].replace(".", "").isdigit():
        return origin
    return f"{scheme}://{parent}"
