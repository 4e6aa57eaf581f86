"""Retry policy and its arithmetic (docs/design.md section 5). Pure: no I/O, no await.

The loop that uses these lives in `calls.py`; here are only the decisions: is this failure
retryable, how long to wait, may the client afford another retry, how a throttled host's
concurrency window moves, and whether a host is down (its circuit).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from typing import NamedTuple

import attrs

from ..errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    HostNotFoundError,
    ProxyError,
    RemoteProtocolError,
    SandboxKitError,
    TLSHandshakeError,
)
from .options import RetryPolicy
from .protocol import OUTAGE_STATUSES, RETRYABLE_STATUSES

__all__ = [
    "Admission",
    "Circuit",
    "ConcurrencyWindow",
    "RetryBudget",
    "TryAgain",
    "backoff_delay",
    "is_outage",
    "is_retryable",
    "is_transient",
    "retry_delay",
]


@attrs.frozen
class TryAgain:
    """An attempt's verdict that the operation is not finished and another request should
    carry it on (a body that ended short, an answer whose range cannot be trusted).

    Returned, not raised: it is not an error of the service's, and the retry loop treats it
    as a retryable failure without inferring that from an exception's class.
    """

    reason: str


def is_retryable(
    error: SandboxKitError | TryAgain, policy: RetryPolicy, *, malformed_before: bool = False
) -> bool:
    """Whether `error` may be retried at all (the operation must be idempotent too).

    `malformed_before`: an earlier try of this call already got an answer that was not valid
    HTTP. The first such answer is retried once, on a fresh connection: a reused keep-alive
    connection can hold stray bytes of a previous answer. A second one is the server's own.
    """
    if isinstance(error, TryAgain):
        return True
    if isinstance(error, APIError):
        if error.status in RETRYABLE_STATUSES:
            return True
        return policy.retry_server_errors and error.status == 500
    if isinstance(error, ProxyError):  # 407, 403: the proxy's answer stays the same
        return error.status in RETRYABLE_STATUSES
    if isinstance(error, RemoteProtocolError):
        return not malformed_before
    if isinstance(error, HostNotFoundError | TLSHandshakeError):
        return False  # an unknown name, a plain port, an untrusted certificate: they stay so
    return isinstance(error, APIConnectionError | APITimeoutError)


def backoff_delay(policy: RetryPolicy, retry_number: int, rand: Callable[[], float]) -> float:
    """Full-jitter exponential backoff for the `retry_number`-th retry (1-based)."""
    ceiling = min(policy.max_backoff, policy.initial_backoff * (2 ** (retry_number - 1)))
    return float(ceiling * rand())


def retry_delay(
    policy: RetryPolicy,
    retry_number: int,
    retry_after: float | None,
    rand: Callable[[], float] = random.random,
) -> float | None:
    """The delay before the next attempt, or None when the server asks for more than the cap."""
    if retry_after is not None and policy.honor_retry_after:
        if retry_after > policy.max_retry_after:
            return None
        return retry_after
    return backoff_delay(policy, retry_number, rand)


@attrs.define
class RetryBudget:
    """A per-client token bucket (botocore's standard mode) that stops retry storms.

    A retry spends `retry_cost` (`timeout_cost` for timeouts and broken connections); a
    success refunds what its retries spent, or `success_refund` when it needed none.
    """

    capacity: int = 500
    retry_cost: int = 5
    timeout_cost: int = 10
    success_refund: int = 1
    tokens: int = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.tokens = self.capacity

    def try_spend(self, *, connection_failure: bool) -> int | None:
        """Take the cost of one retry; None (nothing taken) when the bucket is too low."""
        cost = self.timeout_cost if connection_failure else self.retry_cost
        if cost > self.tokens:
            return None
        self.tokens -= cost
        return cost

    def refund(self, spent: int) -> None:
        """Give back after a success: what its retries spent, or the small default."""
        self.tokens = min(self.capacity, self.tokens + (spent or self.success_refund))


@attrs.define
class ConcurrencyWindow:
    """AIMD window of one sandbox host: halve on 429, grow by one per window of successes."""

    maximum: int
    minimum: int = 1
    size: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.size = float(self.maximum)

    @property
    def allowed(self) -> int:
        """Requests allowed in flight now."""
        return max(self.minimum, min(self.maximum, int(self.size)))

    def on_throttled(self) -> int:
        """A 429: multiplicative decrease."""
        self.size = max(float(self.minimum), self.size / 2)
        return self.allowed

    def on_success(self) -> int:
        """A success: additive increase of about one slot per window's worth of successes."""
        self.size = min(float(self.maximum), self.size + 1.0 / max(self.size, 1.0))
        return self.allowed


def is_outage(error: SandboxKitError) -> bool:
    """Whether `error` says the host is down rather than this request went wrong: no
    connection, no answer in time, or the gateway's (or the proxy's) 502/503 for it."""
    if isinstance(error, APIError | ProxyError):
        return error.status in OUTAGE_STATUSES
    if isinstance(error, HostNotFoundError | TLSHandshakeError):
        return False  # wrong address or wrong scheme: not down, and never retried anyway
    return isinstance(error, APIConnectionError | APITimeoutError)


def is_transient(error: BaseException) -> bool:
    """Whether `error` is the kind a later try may not meet: the host down or busy (429,
    502, 503, 504), no connection, no answer in time. A partial file is kept for it."""
    if isinstance(error, APIError | ProxyError):
        return error.status in RETRYABLE_STATUSES
    return isinstance(error, SandboxKitError) and is_outage(error)


class Admission(NamedTuple):
    """A circuit's answer to a call about to send: go, go as the probe, or wait."""

    go: bool
    probe: int | None = None  # the ticket of the one probe a half-open circuit lets through
    retry_at: float | None = None  # open: ask again then; None when waiting for the probe


class _State(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


_GO = Admission(go=True)
_AWAIT_PROBE = Admission(go=False)


@attrs.define
class Circuit:
    """One host's breaker: closed, open after `threshold` outage failures in a row, then
    half-open when its cooldown ends, letting one probe through.

    A probe that gets any answer but 502/503 closes it; one that fails opens it again with
    twice the cooldown (up to `max_cooldown`). Requests already in flight report too: any
    answer closes the circuit (the host is up), a failure while half-open reopens it, unless
    the request was sent before the circuit last opened (`sent_at`): that failure tells
    nothing the opening did not, and counting it as a failed probe would double the cooldown
    for a host that may be back (a retry of a concurrent call, on the wire when the
    threshold was reached, meets the half-open state when its connect times out late). While
    it is not closed, calls wait instead of sending: an outage costs one probe per cooldown,
    not one refused connect per queued call.
    """

    threshold: int = 5
    first_cooldown: float = 0.25
    max_cooldown: float = 2.0
    failures: int = 0  # outage failures in a row
    last_failure: str = ""
    cooldown: float = 0.0
    opened_until: float | None = None  # None: closed
    opened_at: float = 0.0  # when it last opened
    probe: int | None = None  # the probe in flight, while half-open
    _tickets: int = 0

    def state(self, now: float) -> _State:
        """Closed, open, or half-open (the cooldown is over)."""
        if self.opened_until is None:
            return _State.CLOSED
        return _State.OPEN if now < self.opened_until else _State.HALF_OPEN

    @property
    def closed(self) -> bool:
        """Whether calls may send freely."""
        return self.opened_until is None

    def admit(self, now: float) -> Admission:
        """May a call send now? Half-open, the first to ask becomes the probe."""
        if self.opened_until is None:
            return _GO
        if now < self.opened_until:
            return Admission(go=False, retry_at=self.opened_until)
        if self.probe is not None:
            return _AWAIT_PROBE
        self._tickets += 1
        self.probe = self._tickets
        return Admission(go=True, probe=self.probe)

    def on_answer(self) -> bool:
        """The host answered (anything but 502/503). True when that closed the circuit."""
        was_open = self.opened_until is not None
        self.failures = 0
        self.cooldown = 0.0
        self.opened_until = None
        self.probe = None
        return was_open

    def on_outage(
        self, now: float, description: str, *, down: bool = False, sent_at: float | None = None
    ) -> bool:
        """The host failed as a down host does. True when the circuit opened (again).

        `down`: the host is known down already (its domain is): a closed circuit opens at
        this failure instead of at its `threshold`. `sent_at`: when the failed request was
        sent, on the same clock (None: unknown, taken as now)."""
        self.failures += 1
        self.last_failure = description
        state = self.state(now)
        if state is _State.OPEN or (
            state is _State.CLOSED and self.failures < self.threshold and not down
        ):
            return False
        if state is _State.HALF_OPEN and sent_at is not None and sent_at <= self.opened_at:
            return False  # sent before it opened: no probe's outcome (see the class)
        # Reaching the threshold, or a failed probe (or any failure while half-open).
        self.cooldown = (
            self.first_cooldown
            if state is _State.CLOSED
            else min(self.max_cooldown, self.cooldown * 2)
        )
        self.opened_at = now
        self.opened_until = now + self.cooldown
        self.probe = None
        return True

    def abandon(self, ticket: int) -> bool:
        """The probe `ticket` ended without an outcome (cancelled, say): let another go.
        True when it was still the probe."""
        if self.probe != ticket:
            return False
        self.probe = None
        return True
