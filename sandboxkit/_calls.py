"""Runs one logical operation: the retry loop, the call's deadline, retry logging.

Every resource goes through `Calls.run` (control plane through `Calls.send`), so the retry
rules of DESIGN section 5 exist exactly once. The decisions come from the pure `_retry`
module; this module only waits and loops.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import attrs

from ._answers import Reply
from ._config import Timeout
from ._convert import structure
from ._protocol import ApiRequest
from ._retry import RetryBudget, RetryPolicy, is_retryable, retry_delay
from ._transport import Transport
from .errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    RemoteProtocolError,
    ResponseDecodeError,
    SandboxKitError,
)

__all__ = ["Calls", "decode_reply"]

T = TypeVar("T")
logger = logging.getLogger("sandboxkit")


def decode_reply(reply: Reply, value: Any, cls: type[T]) -> T:
    """Structure `value` from `reply` into `cls`, or raise ResponseDecodeError."""
    try:
        return structure(value, cls)
    except Exception as exc:  # cattrs raises a zoo of types for a wrong shape
        raise ResponseDecodeError(
            f"unexpected response shape for {cls.__name__}: {exc}",
            status=reply.status,
            request_id=reply.request_id,
        ) from exc


@attrs.define
class Calls:
    """The retry loop shared by every operation of one client."""

    transport: Transport
    policy: RetryPolicy
    timeout: Timeout
    budget: RetryBudget = attrs.field(factory=RetryBudget)
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random

    async def run(
        self,
        operation: str,
        attempt: Callable[[], Awaitable[T]],
        *,
        idempotent: bool,
        retry: RetryPolicy | None = None,
        timeout: Timeout | None = None,
        progressed: Callable[[], bool] | None = None,
    ) -> T:
        """Call `attempt` until it succeeds or the rules say stop.

        Args:
            operation: the name used in logs and errors.
            attempt: one try; raises sandboxkit exceptions on failure.
            idempotent: whether a retry is allowed at all.
            retry: per-call policy override.
            timeout: per-call timeout override; its `total` bounds the whole loop.
            progressed: asked after a failed try; True (the try moved a transfer forward)
                means the try does not count against `max_attempts`.
        """
        self.transport.check_loop()
        total = (timeout or self.timeout).total
        if total is None:
            return await self._loop(
                operation, attempt, idempotent, retry or self.policy, None, progressed
            )
        deadline = self.clock() + total
        try:
            with anyio.fail_after(total):
                return await self._loop(
                    operation, attempt, idempotent, retry or self.policy, deadline, progressed
                )
        except TimeoutError as exc:
            raise APITimeoutError(
                f"{operation}: no success within the call's total timeout of {total}s",
                operation=operation,
            ) from exc

    async def _loop(
        self,
        operation: str,
        attempt: Callable[[], Awaitable[T]],
        idempotent: bool,
        policy: RetryPolicy,
        deadline: float | None,
        progressed: Callable[[], bool] | None = None,
    ) -> T:
        spent = 0
        counted = 0
        retries = 0
        malformed_before = False
        while True:
            counted += 1
            try:
                result = await attempt()
            except SandboxKitError as error:
                if progressed is not None and progressed():
                    # A try that moved a transfer forward is not a failed attempt.
                    counted -= 1
                # Backoff grows with the failures that count, so progress also resets it.
                delay = self._next_delay(error, idempotent, policy, counted, malformed_before)
                malformed_before = malformed_before or isinstance(error, RemoteProtocolError)
                if delay is None:
                    raise
                if deadline is not None and self.clock() + delay >= deadline:
                    raise  # waiting would outlive the call: the error is the honest answer
                cost = self.budget.try_spend(
                    connection_failure=isinstance(error, APIConnectionError | APITimeoutError)
                )
                if cost is None:
                    logger.warning("%s: retry budget exhausted, not retrying: %s", operation, error)
                    raise
                spent += cost
                retries += 1
                request_id = getattr(error, "request_id", None)
                logger.warning(
                    "retrying %s after %s (attempt %d of %d) in %.2fs%s",
                    operation,
                    _describe(error),
                    retries,
                    policy.max_attempts,
                    delay,
                    f" request_id={request_id}" if request_id else "",  # the data plane has none
                )
                await self.sleep(delay)
            else:
                self.budget.refund(spent)
                return result

    def _next_delay(
        self,
        error: SandboxKitError,
        idempotent: bool,
        policy: RetryPolicy,
        counted: int,
        malformed_before: bool,
    ) -> float | None:
        if (
            not idempotent
            or not is_retryable(error, policy, malformed_before=malformed_before)
            or counted >= policy.max_attempts
        ):
            return None
        retry_after = error.retry_after if isinstance(error, APIError) else None
        return retry_delay(policy, max(counted, 1), retry_after, self.rand)

    async def send(
        self,
        request: ApiRequest,
        *,
        retry: RetryPolicy | None = None,
        timeout: Timeout | None = None,
    ) -> Reply:
        """Send a control-plane request with retries; returns the decoded success."""
        effective = timeout or self.timeout
        return await self.run(
            request.operation,
            lambda: self.transport.send(request, effective),
            idempotent=request.idempotent,
            retry=retry,
            timeout=timeout,
        )


def _describe(error: SandboxKitError) -> str:
    if isinstance(error, APIError):
        return f"{error.status} {type(error).__name__}"
    return type(error).__name__
