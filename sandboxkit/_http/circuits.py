"""The circuit of every host a client has seen fail, and the events calls wait on.

The transport reports what each request met (`heard_from`, `answered`, `failed`); `Calls`
asks before each try whether the host may be sent to (`retry.Circuit.admit`) and waits if
not. Only hosts with failures on record have a circuit: a healthy host costs two dict
operations a request.

Only a host that may be down has its failures counted by a circuit (`may_be_down`): one that
answered this client before, or a sandbox host that never did while its domain is down
(others of the domain fail and none answers): a sandbox first contacted during an outage
waits it out as the others do. A host that never answered while its domain answers, or of a
domain that never answered (a wrong sandbox key, domain, port or base URL, a server not
started), is a mistake to report, not an outage to wait out: its failures open no circuit
and are counted as attempts. Which of the two a never-answered host's failure is, is decided
again at each failure.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection

import anyio

from .._core.protocol import OUTAGE_STATUSES
from .._core.retry import Circuit, is_outage
from ..errors import SandboxKitError

__all__ = ["DOMAIN_DOWN_FOR", "NEWCOMERS_DOWN", "Circuits", "may_be_down"]

# A child of "sandboxkit": a host going down, being waited for and answering again are what
# explain a long silence, so a program (the CLI) may show these alone on screen.
logger = logging.getLogger("sandboxkit.hosts")

# Hosts that failed now and then but never went down are forgotten past this many, so a
# batch over thousands of short-lived sandboxes keeps no record of each.
_KEPT = 4096
# Hosts remembered as having answered; past this many the oldest half is forgotten (a
# forgotten host that goes down fails after its attempts instead of being waited for). The
# same bound holds the domains (`_site`) of those hosts, and what each of them met lately.
_HEARD = 65536
# How long a failure of a domain's host, with no answer from the domain since, tells of the
# domain (`may_be_down`).
DOMAIN_DOWN_FOR = 30.0
# Other hosts of a domain that never answered, failing with no answer from it between, that
# tell a host of it that never answered either that the domain is down (`may_be_down`).
NEWCOMERS_DOWN = 2


def may_be_down(
    answered: bool,
    sibling_failed_at: float | None,
    newcomers_failed_at: Collection[float],
    now: float,
) -> bool:
    """Whether a host's outage failure may say it is down (its circuit counts it; calls wait
    while that is open) rather than that it is not there at all (the failure is an attempt).

    Args:
        answered: the host itself has sent this client a head other than 502/503.
        sibling_failed_at: when a host of its domain (`_site`) that answered this client
            last met an outage failure, if none of the domain's hosts has answered since.
        newcomers_failed_at: when each other host of its domain that never answered last met
            one, if none of the domain's hosts has answered since (its latest few).
        now: the clock's time.

    A host that answered may be down: it was there. One that never answered may be down only
    while its domain is, that is while other hosts of it fail and none of it answers: a host
    that answered before fails, or `NEWCOMERS_DOWN` others that never answered either (a
    batch whose sandboxes are each contacted once has only such hosts in flight when an
    outage begins). One wrong key is one host, so it, or two typed at once, is not enough;
    three failing together with nothing of their domain answering between look like an
    outage's first failures and are waited for as one (up to `max_stall`): the price of
    such a batch not losing its jobs as an outage begins.
    The domain answering says it is up, so a host of it that fails all the same is not there
    (a wrong sandbox key, a sandbox gone): a mistake that costs the policy's attempts, not
    `max_stall`. A domain that never answered (nothing is known of it) is never down.

    Only failures at most `DOMAIN_DOWN_FOR` old tell: no news of the domain for longer says
    nothing of it now, and a wrong key waited for because a sibling had just failed is not
    waited for past that. During an outage that anything waits out the news stays fresh:
    the hosts calls wait for are probed every 2 s at most, a probe that meets a silent host
    failing within the 10 s connect timeout. A host's own failures are never news for it.

    A failure, not an open circuit, is the news: a sandbox first contacted as an outage
    begins must find its domain down while its own attempts last, not after its siblings'
    circuits have opened. And it is decided at each failure, not once: the first failure of
    a sandbox first contacted may come before any other's (an attempt), its next after (the
    domain is down: it waits as they do); a wrong key waited for while its domain looked
    down stops being waited for at its next failure once the domain answers.
    """
    if answered:
        return True
    if sibling_failed_at is not None and now - sibling_failed_at <= DOMAIN_DOWN_FOR:
        return True
    return sum(now - at <= DOMAIN_DOWN_FOR for at in newcomers_failed_at) >= NEWCOMERS_DOWN


class _News:
    """What the hosts of one domain met since the last answer from any of them."""

    __slots__ = ("newcomers", "sibling_failed_at")

    def __init__(self) -> None:
        self.sibling_failed_at: float | None = None  # the latest failure of one that answered
        # The latest failure of each of the latest hosts that never answered, oldest first:
        # one more than `NEWCOMERS_DOWN`, so that each of them has as many others.
        self.newcomers: dict[str, float] = {}

    def failed(self, origin: str, answered: bool, now: float) -> None:
        if answered:
            self.sibling_failed_at = now
            return
        newcomers = self.newcomers
        newcomers.pop(origin, None)
        newcomers[origin] = now
        if len(newcomers) > NEWCOMERS_DOWN + 1:
            del newcomers[next(iter(newcomers))]


class Circuits:
    """Circuits by origin (the console's base URL, or a sandbox host's origin).

    `console`: the console's origin, no sibling of the sandbox hosts even under the same
    domain (`api.example.com`, `{key}.example.com`): its failures and answers, another
    service's, say nothing of theirs.
    """

    def __init__(self, clock: Callable[[], float], console: str | None = None) -> None:
        self.clock = clock
        self.console = console
        self._circuits: dict[str, Circuit] = {}
        self._changed: dict[str, anyio.Event] = {}
        self._heard: dict[str, None] = {}  # hosts that answered this client, oldest first
        self._sites: dict[str, None] = {}  # the domains (`_site`) of those, oldest first
        # What the hosts of those domains met since one of them last answered, if they
        # failed since: an answer from any host of a domain takes it out.
        self._news: dict[str, _News] = {}
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
        failures may say it is down, and that its domain is (`may_be_down`)."""
        heard = self._heard
        if origin not in heard:
            _remember(heard, origin)
            if origin != self.console:
                _remember(self._sites, _site(origin))

    def ever_answered(self, origin: str) -> bool:
        """Whether the host itself has sent this client a head other than 502/503."""
        return origin in self._heard

    def siblings_answered(self, origin: str) -> bool:
        """Whether another host of its domain (`_site`; the console aside) has: a sandbox
        host that never answered is then likelier a wrong key than a wrong domain, and its
        failures, a wrong key or an outage beginning, are no retry storm (`Calls`)."""
        site = _site(origin)
        return site != origin and origin != self.console and site in self._sites

    def may_be_down(self, origin: str) -> bool:
        """Whether an outage failure of the host now may say it is down (`may_be_down`):
        it answered before, or its domain is down."""
        if origin in self._heard:
            return True
        if not self._news or origin == self.console:
            return False
        news = self._news.get(_site(origin))
        if news is None:
            return False
        others = [at for host, at in news.newcomers.items() if host != origin]
        return may_be_down(False, news.sibling_failed_at, others, self.clock())

    def answered(self, origin: str, status: int) -> None:
        """The host answered with `status`, and (unless 502/503) its body flows: a head
        alone closes no circuit, since a host going away sends some and then closes."""
        if status in OUTAGE_STATUSES:
            self.failed(origin, f"{status} answer")
            return
        if self._news and origin != self.console:  # its domain is up
            self._news.pop(_site(origin), None)
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
        """A request to the host met an outage failure (`retry.is_outage`)."""
        now = self.clock()
        answered = origin in self._heard
        if origin != self.console:
            self._tell_domain(origin, answered, now)
        if not answered and not self.may_be_down(origin):
            self._not_down(origin)  # a mistake, not an outage (see the module's docstring)
            return
        circuit = self._circuits.get(origin)
        if circuit is None:
            if len(self._circuits) >= _KEPT:
                self._forget_closed()
            circuit = self._circuits[origin] = Circuit()
        was_closed = circuit.closed
        # A host that never answered is down only as its domain is: that is known already,
        # so its circuit opens at its first failure, not after a threshold of its own.
        if circuit.on_outage(now, description, down=not answered):
            # Said at WARNING when the host goes down; each failed probe after that only at
            # DEBUG: a long outage would otherwise print a line a probe.
            logger.log(
                logging.WARNING if was_closed else logging.DEBUG,
                "%s looks down (%d failures in a row%s, last: %s); calls wait, probing it "
                "again in %.2fs",
                origin,
                circuit.failures,
                "" if answered else ", as do other hosts of its domain",
                description,
                circuit.cooldown,
            )
            self._notify(origin)

    def _tell_domain(self, origin: str, answered: bool, now: float) -> None:
        """Keep a host's outage failure as news of its domain, if that domain answered."""
        site = _site(origin)
        if site == origin or site not in self._sites:
            return  # an address or a one-label name (no siblings), or nothing known of it
        news = self._news.get(site)
        if news is None:
            if len(self._news) >= _HEARD:
                for old in list(self._news)[: _HEARD // 2]:
                    del self._news[old]
            news = self._news[site] = _News()
        news.failed(origin, answered, now)

    def _not_down(self, origin: str) -> None:
        """A host that never answered failed while its domain does not look down: calls
        waiting for it (while it did) stop, and count its failures as attempts."""
        circuit = self._circuits.pop(origin, None)
        if circuit is not None and not circuit.closed:
            logger.warning(
                "%s, which has not answered this client, still fails while its domain no "
                "longer looks down: not waited for any more, its failures count as attempts",
                origin,
            )
            self._waited.discard(origin)
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


def _remember(kept: dict[str, None], key: str) -> None:
    """Add `key` to `kept`, the oldest half forgotten first once it holds `_HEARD`."""
    if key not in kept:
        if len(kept) >= _HEARD:
            for old in list(kept)[: _HEARD // 2]:
                del kept[old]
        kept[key] = None


def _site(origin: str) -> str:
    """The service a host belongs to: its origin without the host name's first label
    (`https://{sandbox}.{domain}` is `https://{domain}`), so that the failures of a
    domain's other hosts can say a sandbox first contacted during an outage is down
    (`may_be_down`). An address, or a name of one label, is its own."""
    scheme, _, rest = origin.partition("://")
    _label, dot, parent = rest.partition(".")
    if not dot or rest.startswith("[") or rest.split(":")[0].replace(".", "").isdigit():
        return origin
    return f"{scheme}://{parent}"
