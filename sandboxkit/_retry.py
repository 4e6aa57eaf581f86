"""Retry policy and its arithmetic (DESIGN section 5). Pure: no I/O, no await.

The loop that uses these lives in `_calls.py`; here are only the decisions: is this failure
retryable, how long to wait, may the client afford another retry, and how a throttled host's
concurrency window moves.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import attrs

from ._config import RetryPolicy
from ._protocol import RETRYABLE_STATUSES
from .errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    HostNotFoundError,
    RemoteProtocolError,
    SandboxKitError,
    TLSHandshakeError,
)

__all__ = [
    "ConcurrencyWindow",
    "RetryBudget",
    "TryAgain",
    "backoff_delay",
    "is_retryable",
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
