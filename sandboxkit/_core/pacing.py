"""How fast to send: a host's pause after a 429, and concurrency found rather than configured.
Pure: no I/O, no await; every method takes the clock's time (`now`) as an argument.

`HostPause` is rclone's pacer for one host: a 429 (or a 503 carrying `Retry-After`) pauses
every call to that host, not just the one that got it, for what `Retry-After` says (capped
as the retry policy caps it) or, without one, for a backoff that doubles on repeated 429s
and halves on each success.

`ConcurrencyController` finds how many transfers to run at once. It starts small (4, as
hf_xet does), and keeps a model of how long a transfer of a given size takes when nothing
queues: the fastest seen for sizes of its power of two, over the last few minutes. Transfers
that take `r` times what the model predicts (the lower quartile of those begun since the
last change), at concurrency `c`, move like `c / r` uncontended ones (the throughput, in
those units), and about `c - c / r` are queued somewhere (TCP Vegas's estimate, in
transfers rather than packets). It grows while few are queued (under max(1, c/10)) or the
last growth paid (moved 10% more than the level below): doubling until it first had to
shrink, then by one. It shrinks when the growth to here lost (moved 5% less than the level
below: a server past its capacity), or when many are queued (over max(3, c/2)) and nothing
says more at once pays (no level below measured; always in background mode), back to that
many queued, at most halving (a queue whose throughput held, it keeps); and by half on a
429, 503 or failed transfer (TCP's multiplicative decrease). Every change waits for a
wave of completions begun since the last change (`limit` of them, at most `evidence`; or
`evidence_bytes`), and, but for doubling, `min_interval` since it, so one slow transfer
moves nothing.

Background mode (LEDBAT, RFC 6817, at the application's level) adds a signal before any
loss: the round trip of small requests (an answer's head). Its baseline is the minimum over
a few minutes; when the latest few (their median: LEDBAT's current-delay filter takes their
minimum, which a batch's bursts defeat) exceed it by the target (a quarter of the baseline,
within 5 and 25 ms), concurrency shrinks by one each interval (by half past twice the
target); it grows by one only when the inflation is under half the target, and
a growth that inflated it makes the next wait twice as long (up to 16 intervals), so a
batch yields the link to its neighbours before their requests queue behind it.
"""

from __future__ import annotations

from collections import deque

import attrs

__all__ = [
    "GROW",
    "PAUSE",
    "SHRINK",
    "START",
    "ConcurrencyController",
    "HostPause",
    "PaceEvent",
]

PAUSE = "pause"
# Where a found concurrency starts, for each host (hf_xet's 4 per endpoint): a batch starts at
# this many per host it covers, a host whose concurrency is found at this many.
START = 4
# Background mode: a growth that inflated the round trip makes the next one wait up to
# min_interval * 2**this.
MAX_PATIENCE = 4
# Background mode: the round trips now are the median of this many latest ones (LEDBAT
# takes the minimum of a few, which a batch's bursts hide the queue from: one answer that
# found the queue empty says nothing of the others).
RECENT = 8
# A growth "paid" when it raised the transfers moving (the throughput) by this fraction over
# the level below, and "lost" when it lowered them by this one.
GAIN = 0.1
# More queued than this fraction of the concurrency (and at least 3) is too many, unless the
# growth to it paid: half lets a transfer in flight wait for one before it at most.
QUEUED = 0.5
LOSS = 0.05
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
        rate: for a change of concurrency, the bytes per second that the transfers which
            ended since the previous change moved (0 for a pause, or when none ended).
    """

    kind: str
    at: float
    concurrency: int
    host: str = ""
    seconds: float = 0.0
    reason: str = ""
    rate: float = 0.0


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
    # Background mode's round-trip inflation allowed: a quarter of the baseline, within
    # 5 ms (jitter) and `target_delay` (LEDBAT's is 100 ms at most).
    target_delay: float = 0.025
    target_ratio: float = 0.25
    period: float = 60.0  # the baseline's minima are kept per period...
    history: int = 5  # ...for this many periods (LEDBAT keeps 10 minutes)
    last_change: float | None = None
    shrank: bool = False  # once it has, growth is one at a time
    _completions: int = 0
    # level -> transfers moving as if nothing queued, as last measured there
    _moving: dict[int, float] = attrs.field(factory=dict)
    _probing: bool = False  # background: the last change was a growth, not yet judged
    _patience: int = 0  # background: growth waits min_interval * 2**this after a shrink
    _bytes: int = 0
    _first_began: float | None = None  # when the first transfer counted in `_bytes` began
    _ratios: list[float] = attrs.field(factory=list)
    _congested: str = ""
    # size class -> (period, fastest seconds) pairs, oldest first: the model
    _fastest: dict[int, deque[tuple[int, float]]] = attrs.field(factory=dict)
    _rtt_base: deque[tuple[int, float]] = attrs.field(factory=deque)
    _rtt_recent: deque[float] = attrs.field(factory=lambda: deque(maxlen=RECENT))

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
        if self.last_change is not None and now - seconds < self.last_change:
            return None  # begun before the last change: no evidence of the level now
        self._ratios.append(1.0 if expected is None else max(1.0, seconds / expected))
        self._completions += 1
        self._bytes += size
        if self._first_began is None or now - seconds < self._first_began:
            self._first_began = now - seconds
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
    def target(self) -> float:
        """The round-trip inflation background mode allows, in seconds."""
        if not self._rtt_base:
            return self.target_delay
        base = min(seconds for _, seconds in self._rtt_base)
        return min(self.target_delay, max(0.005, self.target_ratio * base))

    @property
    def inflation(self) -> float | None:
        """How much the recent round trips exceed the baseline, in seconds (None: unknown)."""
        if not self._rtt_base or not self._rtt_recent:
            return None
        recent = sorted(self._rtt_recent)
        return recent[len(recent) // 2] - min(seconds for _, seconds in self._rtt_base)

    def decide(self, now: float) -> PaceEvent | None:
        """Change `limit` if the evidence since the last change says so (damped)."""
        waited = self.last_change is None or now - self.last_change >= self.min_interval
        if self._congested:
            return self._change(now, -max(1, self.limit // 2), self._congested) if waited else None
        inflation = self.inflation if self.background else None
        target = self.target
        if inflation is not None and inflation > target:
            if not waited:
                return None
            if self._probing:  # the growth just tried was too much: wait longer next time
                self._patience = min(self._patience + 1, MAX_PATIENCE)
            # Far past the target, halve: one at a time leaves neighbours queued for long.
            step = self.limit // 2 if inflation > 2 * target else 1
            return self._change(now, -max(1, step), "latency")
        # A wave of transfers at this level at least, but no more than `evidence` of them.
        if self._completions < min(self.evidence, self.limit) and self._bytes < self.evidence_bytes:
            return None
        # The lower quartile: queueing slows every transfer, while a growth's new
        # connections (a handshake, TCP's slow start) slow only their own first ones.
        ratio = sorted(self._ratios)[len(self._ratios) // 4]
        # Transfers in flight that move as if nothing queued: the throughput, in units of
        # one uncontended transfer. The rest of `limit` is queued (Vegas).
        moving = self.limit / ratio
        queued = self.limit - moving
        below = [level for level in self._moving if level < self.limit]
        if below:
            before = self._moving[max(below)]
            paid = moving > before * (1 + GAIN)  # the growth to here bought throughput
            lost = moving < before * (1 - LOSS)  # it cost throughput: more than N at once
        else:
            paid = lost = False
        self._moving[self.limit] = moving
        # Too many queued shrinks where nothing says more at once still pays: in background
        # mode (a queue is what it must not make), or with no level below to compare. In
        # the foreground a queue whose throughput held is kept (a growth that did not pay
        # is not repeated): the batch wants throughput, and more at once lost none.
        too_many = queued > max(3.0, QUEUED * self.limit) and not paid
        if lost or (too_many and (self.background or not below)):
            if not waited:
                return None
            # Back to about the queue allowed (at most halving): one at a time would take
            # many intervals to undo a growth that doubled.
            step = max(1, int(queued - max(3.0, QUEUED * self.limit)))
            return self._change(now, -min(self.limit // 2, step), "queueing")
        if self._probing:
            self._patience = 0  # the last growth held: the next may come sooner
        if queued < max(1.0, 0.1 * self.limit) or (paid and not self.background):
            if self.background:
                quiet = inflation is not None and inflation < target / 2
                if quiet and self._since(now) >= self.min_interval * 2**self._patience:
                    return self._change(now, 1, "room")
            elif not self.shrank:
                # Slow start: doubling as soon as transfers begun at this level say there
                # is room (TCP's, per batch of evidence rather than per round trip).
                return self._change(now, self.limit, "room")
            elif waited:
                return self._change(now, 1, "room")
        if waited and not self.background:
            self._restart(now)
        return None

    def _since(self, now: float) -> float:
        return float("inf") if self.last_change is None else now - self.last_change

    def _restart(self, now: float) -> None:
        """No change: gather fresh evidence for the next decision."""
        self.last_change = now
        self._completions = self._bytes = 0
        self._first_began = None
        self._ratios.clear()

    def _change(self, now: float, step: int, reason: str) -> PaceEvent | None:
        before = self.limit
        span = now - self._first_began if self._first_began is not None else 0.0
        rate = self._bytes / span if span > 0 else 0.0
        self.limit = max(self.minimum, min(self.maximum, self.limit + step))
        self._probing = step > 0 and self.background
        self._congested = ""
        self._restart(now)
        if step < 0:
            self.shrank = True
        if self.limit == before:
            return None
        return PaceEvent(GROW if step > 0 else SHRINK, now, self.limit, reason=reason, rate=rate)


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
