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
from ._config import NO_OPTIONS, CallOptions, RetryPolicy, Timeout
from ._convert import structure
from ._protocol import ApiRequest
from ._retry import RetryBudget, TryAgain, is_retryable, retry_delay
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
        attempt: Callable[[Timeout], Awaitable[T | TryAgain]],
        *,
        idempotent: bool,
        options: CallOptions = NO_OPTIONS,
        progress: Callable[[], int] | None = None,
    ) -> T:
        """Call `attempt` until it succeeds or the rules say stop.

        Args:
            operation: the name used in logs and errors.
            attempt: one try, given the per-request time limits in force. It returns a
                value, or `TryAgain` (the operation is not finished: another request carries
                it on), or raises a sandboxkit exception.
            idempotent: whether a retry is allowed at all.
            options: this call's overrides; the timeout's `total` bounds the whole loop.
            progress: a count that grows as a transfer moves forward (bytes held); a try
                after which it grew does not count against `max_attempts`.
        """
        self.transport.check_loop()  # the one check: every operation passes here first
        timeout = options.timeout or self.timeout
        policy = self.policy_for(options)
        if timeout.total is None:
            return await self._loop(operation, attempt, idempotent, policy, timeout, None, progress)
        deadline = self.clock() + timeout.total
        try:
            with anyio.fail_after(timeout.total):
                return await self._loop(
                    operation, attempt, idempotent, policy, timeout, deadline, progress
                )
        except TimeoutError as exc:
            raise APITimeoutError(
                f"{operation}: no success within the call's total timeout of {timeout.total}s",
                operation=operation,
            ) from exc

    def policy_for(self, options: CallOptions) -> RetryPolicy:
        """The retry policy a call with these options runs under."""
        return options.retry or self.policy

    async def _loop(
        self,
        operation: str,
        attempt: Callable[[Timeout], Awaitable[T | TryAgain]],
        idempotent: bool,
        policy: RetryPolicy,
        timeout: Timeout,
        deadline: float | None,
        progress: Callable[[], int] | None,
    ) -> T:
        spent = 0
        counted = 0
        retries = 0
        malformed_before = False
        while True:
            counted += 1
            before = progress() if progress is not None else 0
            failure: SandboxKitError | TryAgain
            try:
                outcome = await attempt(timeout)
            except SandboxKitError as error:
                failure = error
            else:
                if not isinstance(outcome, TryAgain):
                    self.budget.refund(spent)
                    return outcome
                failure = outcome
            if progress is not None and progress() > before:
                counted -= 1  # a try that moved a transfer forward is not a failed attempt
            # Backoff grows with the failures that count, so progress also resets it.
            delay = self._next_delay(failure, idempotent, policy, counted, malformed_before)
            malformed_before = malformed_before or isinstance(failure, RemoteProtocolError)
            if delay is None or (deadline is not None and self.clock() + delay >= deadline):
                # No retry left, or waiting would outlive the call: the failure is the answer.
                raise _as_error(failure, operation)
            cost = self.budget.try_spend(connection_failure=_is_connection_failure(failure))
            if cost is None:
                exhausted = _as_error(failure, operation)
                logger.warning("%s: retry budget exhausted, not retrying: %s", operation, exhausted)
                raise exhausted
            spent += cost
            retries += 1
            request_id = getattr(failure, "request_id", None)
            logger.warning(
                "retrying %s after %s (attempt %d of %d) in %.2fs%s",
                operation,
                _describe(failure),
                retries,
                policy.max_attempts,
                delay,
                f" request_id={request_id}" if request_id else "",  # the data plane has none
            )
            await self.sleep(delay)

    def _next_delay(
        self,
        failure: SandboxKitError | TryAgain,
        idempotent: bool,
        policy: RetryPolicy,
        counted: int,
        malformed_before: bool,
    ) -> float | None:
        if (
            not idempotent
            or not is_retryable(failure, policy, malformed_before=malformed_before)
            or counted >= policy.max_attempts
        ):
            return None
        retry_after = failure.retry_after if isinstance(failure, APIError) else None
        return retry_delay(policy, max(counted, 1), retry_after, self.rand)

    async def send(self, request: ApiRequest, options: CallOptions = NO_OPTIONS) -> Reply:
        """Send a control-plane request with retries; returns the deciphered success."""
        return await self.run(
            request.operation,
            lambda timeout: self.transport.send(request, timeout),
            idempotent=request.idempotent,
            options=options,
        )


def _is_connection_failure(failure: SandboxKitError | TryAgain) -> bool:
    # Costed like a broken connection in the budget: an answer that ended short is one.
    return isinstance(failure, TryAgain | APIConnectionError | APITimeoutError)


def _as_error(failure: SandboxKitError | TryAgain, operation: str) -> SandboxKitError:
    """The exception a failure ends the call with; a transfer left unfinished is a
    connection that broke before its answer was complete."""
    if isinstance(failure, TryAgain):
        return APIConnectionError(f"{operation}: {failure.reason}", operation=operation)
    return failure


def _describe(failure: SandboxKitError | TryAgain) -> str:
    if isinstance(failure, TryAgain):
        return failure.reason
    if isinstance(failure, APIError):
        return f"{failure.status} {type(failure).__name__}"
    return type(failure).__name__
