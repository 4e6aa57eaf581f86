"""How fast to send: a host's pause after a 429, and concurrency found rather than configured.
Pure: no I/O, no await; every method takes the clock's time (`now`) as an argument.

`HostPause` is rclone's pacer for one host: a 429 (or a 503 carrying `Retry-After`) pauses
every call to that host, not just the one that got it, for what `Retry-After` says (capped
as the retry policy caps it) or, without one, for a backoff that doubles on repeated 429s
and halves on each success.

`ConcurrencyController` finds how many transfers to run at once. It starts small (4, as
hf_xet does), and keeps a model of how long a transfer of a given size takes when nothing
queues: the fastest seen for sizes of its power of two, over the last few minutes. Transfers
that take (in median) `r` times what the model predicts, at concurrency `c`, say about
`c * (1 - 1/r)` transfers are queued somewhere (TCP Vegas's estimate, in transfers rather
than packets). Few queued (under max(1, c/10)): grow (doubling until it first had to shrink,
then by one); many (over max(3, 0.3 c)): shrink back to that many queued, at most halving;
a 429, 503 or failure: shrink by a quarter. Every change
waits for `min_interval` since the last and for `evidence` completions (or
`evidence_bytes`) since it, so one slow transfer moves nothing.

Background mode (LEDBAT, RFC 6817, at the application's level) adds a signal before any
loss: the round trip of small requests (an answer's head). Its baseline is the minimum over
a few minutes; when the latest few (their minimum, LEDBAT's current-delay filter) exceed it
by `target_delay`, concurrency shrinks by one each interval; it grows by one only when the
inflation is under half the target, so a batch yields the link to its neighbours before
their requests queue behind it.
"""

from __future__ import annotations

import statistics
from collections import deque

import attrs

__all__ = [
    "GROW",
    "PAUSE",
    "SHRINK",
    "ConcurrencyController",
    "HostPause",
    "PaceEvent",
]

PAUSE = "pause"
SHRINK = "shrink"
GROW = "grow"


@attrs.frozen
class PaceEvent:
    """One throttle event: a host paused, or the found concurrency shrank or grew.

    Attributes:
        kind: "pause", "shrink" or "grow".
        at: the clock's time (monotonic seconds) it happened.
        concurrency: the concurrency now (for a pause: the host's window).
        host: the host paused (`scheme://host:port`); "" for the client's concurrency.
        seconds: how long the pause lasts (0 for a change of concurrency).
        reason: why: "429", "503", "failure", "queueing", "latency" (background mode),
            "room" (a growth).
    """

    kind: str
    at: float
    concurrency: int
    host: str = ""
    seconds: float = 0.0
    reason: str = ""


@attrs.define
class HostPause:
    """One host's pause (rclone's pacer): while it lasts no request is sent to the host.

    `pauses` counts the pauses begun and `paused` the seconds they lasted (an extension
    counts only what it adds).
    """

    backoff: float = 0.0  # the next pause without Retry-After grows from this
    until: float = 0.0
    pauses: int = 0
    paused: float = 0.0

    def throttled(
        self,
        now: float,
        retry_after: float | None,
        *,
        first: float,
        cap: float,
    ) -> float | None:
        """A 429 (or a 503 with `Retry-After`): pause the host. Returns the pause's length
        when this began a pause (to be said once), None when it only extended or left one.

        Args:
            now: the clock's time.
            retry_after: the server's `Retry-After` in seconds, if it gave one.
            first: the first backoff without `Retry-After` (the policy's initial_backoff);
                0 never pauses for a bare 429.
            cap: the longest pause (the policy's max_retry_after).
        """
        if retry_after is not None:
            length = min(retry_after, cap)
        else:
            self.backoff = min(cap, max(first, self.backoff * 2))
            length = self.backoff
        end = now + length
        if end <= self.until or length <= 0:
            return None
        began = self.until <= now
        self.paused += end - max(now, self.until)
        self.until = end
        if not began:
            return None
        self.pauses += 1
        return length

    def succeeded(self) -> None:
        """A success from the host: the next bare 429's backoff decays."""
        self.backoff /= 2

    def remaining(self, now: float) -> float:
        """Seconds until the host may be sent to again (0: now)."""
        return max(0.0, self.until - now)


@attrs.define
class ConcurrencyController:
    """Concurrency found from how transfers finish (see the module's docstring).

    Call `completed` for each transfer done, `congested` for each 429/503 or failure,
    `round_trip` for each small request's time (background mode); each returns a
    `PaceEvent` when it changed `limit`, None otherwise.
    """

    minimum: int = 1
    maximum: int = 64
    limit: int = 4
    min_interval: float = 0.5
    evidence: int = 8
    evidence_bytes: int = 20 << 20
    background: bool = False
    target_delay: float = 0.05  # seconds of round-trip inflation background mode allows
    period: float = 60.0  # the baseline's minima are kept per period...
    history: int = 5  # ...for this many periods (LEDBAT keeps 10 minutes)
    last_change: float | None = None
    shrank: bool = False  # once it has, growth is one at a time
    _completions: int = 0
    _bytes: int = 0
    _ratios: list[float] = attrs.field(factory=list)
    _congested: str = ""
    # size class -> (period, fastest seconds) pairs, oldest first: the model
    _fastest: dict[int, deque[tuple[int, float]]] = attrs.field(factory=dict)
    _rtt_base: deque[tuple[int, float]] = attrs.field(factory=deque)
    _rtt_recent: deque[float] = attrs.field(factory=lambda: deque(maxlen=4))

    def __attrs_post_init__(self) -> None:
        self.limit = max(self.minimum, min(self.maximum, self.limit))

    def predicted(self, size: int) -> float | None:
        """The model's time for a transfer of `size` bytes with nothing queued; None while
        it has seen none of that size class."""
        minima = self._fastest.get(size.bit_length())
        return None if not minima else min(seconds for _, seconds in minima)

    def completed(self, now: float, size: int, seconds: float) -> PaceEvent | None:
        """A transfer of `size` bytes finished in `seconds` (from its start to its end)."""
        seconds = max(seconds, 1e-6)
        expected = self.predicted(size)
        _keep_minimum(self._fastest.setdefault(size.bit_length(), deque()), now, seconds, self)
        self._ratios.append(1.0 if expected is None else max(1.0, seconds / expected))
        self._completions += 1
        self._bytes += size
        return self.decide(now)

    def congested(self, now: float, reason: str) -> PaceEvent | None:
        """A 429, a 503 or a failed transfer: the next change (as soon as allowed) shrinks."""
        self._congested = self._congested or reason
        return self.decide(now)

    def round_trip(self, now: float, seconds: float) -> PaceEvent | None:
        """A small request's round trip (an answer's head): background mode's signal."""
        _keep_minimum(self._rtt_base, now, seconds, self)
        self._rtt_recent.append(seconds)
        return self.decide(now) if self.background else None

    @property
    def inflation(self) -> float | None:
        """How much the recent round trips exceed the baseline, in seconds (None: unknown)."""
        if not self._rtt_base or not self._rtt_recent:
            return None
        return min(self._rtt_recent) - min(seconds for _, seconds in self._rtt_base)

    def decide(self, now: float) -> PaceEvent | None:
        """Change `limit` if the evidence since the last change says so (damped)."""
        if self.last_change is not None and now - self.last_change < self.min_interval:
            return None
        if self._congested:
            return self._change(now, -max(1, self.limit // 4), self._congested)
        inflation = self.inflation if self.background else None
        if inflation is not None and inflation > self.target_delay:
            return self._change(now, -1, "latency")
        if self._completions < self.evidence and self._bytes < self.evidence_bytes:
            return None
        ratio = statistics.median(self._ratios)
        queued = self.limit * (1 - 1 / ratio)
        beta = max(3.0, 0.3 * self.limit)
        if queued > beta:
            # Back to about `beta` queued at once (at most halving): one at a time would
            # take many intervals to undo a growth that doubled.
            return self._change(now, -min(self.limit // 2, max(1, int(queued - beta))), "queueing")
        if queued < max(1.0, 0.1 * self.limit):
            if self.background:
                if inflation is not None and inflation < self.target_delay / 2:
                    return self._change(now, 1, "room")
                self._restart(now)
                return None
            step = 1 if self.shrank else self.limit  # doubling until the first shrink
            return self._change(now, step, "room")
        self._restart(now)
        return None

    def _restart(self, now: float) -> None:
        """No change: gather fresh evidence for the next decision."""
        self.last_change = now
        self._completions = self._bytes = 0
        self._ratios.clear()

    def _change(self, now: float, step: int, reason: str) -> PaceEvent | None:
        before = self.limit
        self.limit = max(self.minimum, min(self.maximum, self.limit + step))
        self._congested = ""
        self._restart(now)
        if step < 0:
            self.shrank = True
        if self.limit == before:
            return None
        return PaceEvent(GROW if step > 0 else SHRINK, now, self.limit, reason=reason)


def _keep_minimum(
    minima: deque[tuple[int, float]], now: float, seconds: float, c: ConcurrencyController
) -> None:
    """Fold `seconds` into the per-period minima, dropping periods past the history."""
    period = int(now // c.period)
    if minima and minima[-1][0] == period:
        if seconds < minima[-1][1]:
            minima[-1] = (period, seconds)
    else:
        minima.append((period, seconds))
    while minima and minima[0][0] <= period - c.history:
        minima.popleft()
