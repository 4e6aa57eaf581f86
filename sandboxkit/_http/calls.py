"""Runs one logical operation: the retry loop, the call's deadline, retry logging, and the
operation's watch (`telemetry`: its span, and the retry hook before each wait).

Every resource goes through `Calls.run` (control plane through `Calls.send`), so the retry
rules of docs/design.md section 5 exist exactly once. The decisions come from the pure `retry`
module; this module only waits and loops. `Calls.send` also picks each request's API key:
the one given, or the api_key function's answer, asked per request (and after a 401).

`DataPlane` is the one data-plane call path: the calls bound to one sandbox host. `open`
sends one request (a `DataRequest`, built once by its engine with `protocol.data_request`)
on the host's own pool (the only session carrying its token, which never follows a
redirect); `run` (`Calls.run`) around it retries. A JSON-answering operation is
`DataPlane.call_json`; download and upload (`_transfer`) are built over `open` and `run`.
Adding an operation (command execution, say) is one function over these, a model, an
emulator route and a test.
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

import anyio
import attrs

from .._core.answers import Reply
from .._core.convert import structure
from .._core.options import (
    NO_OPTIONS,
    Bearer,
    CallOptions,
    KeyFunction,
    RetryPolicy,
    Timeout,
    bearer_of,
)
from .._core.protocol import ApiRequest, DataRequest, data_request, is_idempotent, request_target
from .._core.proxy_rules import redacted
from .._core.retry import RetryBudget, TryAgain, is_outage, is_retryable, retry_delay
from .._core.validation import check_remote_path
from ..errors import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    HostUnavailableError,
    RemoteProtocolError,
    ResponseDecodeError,
    SandboxKitError,
    TransportError,
    ValidationError,
)
from .hosts import HostKey
from .telemetry import Telemetry, Transfer, Watch, watching
from .transport import StreamingResponse, Transport

__all__ = ["REPLY_LIMIT", "Calls", "DataPlane", "decode_reply"]

T = TypeVar("T")
logger = logging.getLogger("sandboxkit")
hosts_logger = logging.getLogger("sandboxkit.hosts")  # see _circuits: host state, not retries
_NEVER_ANSWERED = "has not answered this client yet"
# A data-plane JSON answer is a few KiB; anything near this size is not one the interface shows.
REPLY_LIMIT = 1 << 20


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
    api_key: Bearer | KeyFunction = attrs.field(repr=False, kw_only=True)  # neither shows it
    budget: RetryBudget = attrs.field(factory=RetryBudget)
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    telemetry: Telemetry | None = None  # spans, DEBUG lines and hooks; None: silent

    async def run(
        self,
        operation: str,
        attempt: Callable[[Timeout], Awaitable[T | TryAgain]],
        *,
        idempotent: bool,
        options: CallOptions = NO_OPTIONS,
        progress: Callable[[], int] | None = None,
        host: str | None = None,
        transfer: Transfer | None = None,
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
            host: the origin `attempt` sends to. While its circuit is open the call waits
                (up to the policy's `max_stall` without progress) instead of sending, and
                its outage failures cost neither attempts nor retry budget.
            transfer: a transfer's (bytes moved, resumes), for its span when it ends.
        """
        self.transport.check_loop()  # the one check: every operation passes here first
        watch = None if self.telemetry is None else self.telemetry.start(operation, host)
        # The transport finds the watch there for each request. Setting the variable makes
        # three objects: without a watch here or around, there is nothing to change.
        token = watching.set(watch) if watch is not None or watching.get() is not None else None
        try:
            timeout = options.timeout or self.timeout
            policy = self.policy_for(options)
            # Waiting for a host that is down is for calls that may retry once it is back.
            waits_for = host
            if not idempotent or policy.max_attempts == 1 or policy.max_stall == 0:
                waits_for = None
            deadline = None if timeout.total is None else self.clock() + timeout.total
            loop = self._loop(
                operation,
                attempt,
                idempotent,
                policy,
                timeout,
                deadline,
                progress,
                waits_for,
                watch,
            )
            if timeout.total is None:
                result = await loop
            else:
                try:
                    with anyio.fail_after(timeout.total):
                        result = await loop
                except TimeoutError as exc:
                    raise APITimeoutError(
                        f"{operation}: no success within the call's total timeout of "
                        f"{timeout.total}s",
                        operation=operation,
                    ) from exc
        except BaseException as exc:
            if isinstance(exc, SandboxKitError) and exc.operation is None:
                exc.operation = operation  # every error of a call names it (the innermost)
            if host is not None and isinstance(exc, TransportError | APIError) and is_outage(exc):
                self._explain_never_answered(exc, host)
            if watch is not None:
                watch.end(exc, transfer)
            raise
        finally:
            if token is not None:
                watching.reset(token)
        if watch is not None:
            watch.end(None, transfer)
        return result

    def _explain_never_answered(self, error: TransportError | APIError, host: str) -> None:
        """A host that never answered this client, while its domain does not look down, is
        likely a wrong address, not one that is down: the message says what to check (the
        sandbox key, when other hosts of its domain answered). Through a proxy, a 502 or 503
        for such a host is most likely the proxy's own (it cannot reach the host); without
        one, that of its domain's gateway when the domain answers for other sandboxes: it
        says so."""
        circuits = self.transport.circuits
        if circuits.may_be_down(host) or _NEVER_ANSWERED in error.message:
            return  # it answered before, or its domain is down: an outage, not a mistake
        siblings = circuits.siblings_answered(host)
        proxy = self.transport.proxies.for_origin(host)
        if isinstance(error, APIError):
            if proxy is not None:
                blame = (
                    f"the {error.status} likely comes from the proxy {redacted(proxy.url)}, "
                    "which cannot reach it; "
                )
            elif siblings:
                blame = (
                    f"the {error.status} likely comes from its domain's gateway, which knows "
                    "no such sandbox; "
                )
            else:
                return  # the service's own gateway: its message stands
        else:
            blame = ""
        if siblings:
            check = ", while other hosts of its domain have: check the sandbox key"
        else:
            check = ": check the base URL or the sandbox's domain, its port, and any proxy"
            check += " in between"
        error.message = f"{error.message} ({blame}{host} {_NEVER_ANSWERED}{check})"
        error.args = (error.message,)

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
        host: str | None,
        watch: Watch | None,
    ) -> T:
        spent = 0
        counted = 0
        outages = 0  # this call's counted outage failures in a row: forgiven if it is down
        retries = 0
        malformed_before = False
        stall = policy.max_stall
        stalled_at = None if stall is None else self.clock() + stall
        failure: SandboxKitError | TryAgain | None = None
        circuits = self.transport.circuits
        while True:
            probe = None
            # Asked here first: a host with no failure on record (the usual) has no circuit.
            if host is not None and self.transport.circuits.get(host) is not None:
                probe = await self._wait_for_host(host, stalled_at, failure, operation, policy)
            counted += 1
            before = progress() if progress is not None else 0
            try:
                outcome = await attempt(timeout)
            except SandboxKitError as error:
                failure = error
            else:
                if not isinstance(outcome, TryAgain):
                    self.budget.refund(spent)
                    return outcome
                failure = outcome
            finally:
                if probe is not None and host is not None:  # a probe that did not report
                    self.transport.circuits.abandon(host, probe)
            moved = progress is not None and progress() > before
            # A try that moved a transfer forward is not a failed attempt, unless the caller
            # asked for one request (to fail fast, or to own the retrying).
            if moved and policy.max_attempts > 1:
                counted -= 1
                outages = 0
                if stall is not None:
                    stalled_at = self.clock() + stall
            if host is not None and self._is_down(host, failure):
                # The host is down: wait for it (above), spending nothing; the failures that
                # told of it going away before its circuit opened are no attempts either.
                counted -= 1 + outages
                outages = 0
                continue
            # A failure that says a host is going away costs no budget either: its circuit,
            # not the budget, bounds what an outage costs (one probe a cooldown). So does
            # one of a host that never answered while others of its domain did: a wrong key
            # (its calls' attempts bound it), or an outage just begun, whose first failures
            # may come before the domain is known down and must not drain the budget.
            going_away = (
                host is not None
                and _is_outage(failure)
                and (circuits.ever_answered(host) or circuits.siblings_answered(host))
            )
            outages = outages + 1 if going_away and not moved else 0
            # Backoff grows with the failures that count, so progress also resets it.
            delay = self._next_delay(failure, idempotent, policy, counted, malformed_before)
            malformed_before = malformed_before or isinstance(failure, RemoteProtocolError)
            if delay is None or (deadline is not None and self.clock() + delay >= deadline):
                # No retry left, or waiting would outlive the call: the failure is the answer.
                raise _as_error(failure, operation)
            # Carrying on a transfer that moved is no retry storm: it costs no budget, or an
            # outage that cuts every transfer at once would drain it for their continuations.
            cost = (
                0
                if moved or going_away
                else self.budget.try_spend(connection_failure=_is_connection_failure(failure))
            )
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
            if watch is not None:  # before the wait: a progress line can say how long it is
                watch.retry(delay, failure)
            await self.sleep(delay)

    def _is_down(self, host: str, failure: SandboxKitError | TryAgain) -> bool:
        if not _is_outage(failure):
            return False
        circuit = self.transport.circuits.get(host)
        return circuit is not None and not circuit.closed

    async def _wait_for_host(
        self,
        host: str,
        stalled_at: float | None,
        failure: SandboxKitError | TryAgain | None,
        operation: str,
        policy: RetryPolicy,
    ) -> int | None:
        """Wait while `host`'s circuit is open; the probe's ticket if this call is the one
        a half-open circuit lets through. Raises once waiting would pass `stalled_at`."""
        circuits = self.transport.circuits
        while (circuit := circuits.get(host)) is not None:
            now = self.clock()
            admission = circuit.admit(now)
            if admission.go:
                return admission.probe
            if circuits.first_wait(host):
                hosts_logger.warning(
                    "%s: %s is down; waiting up to %s for it to answer again "
                    "(RetryPolicy.max_stall), probing it every %.2fs or less",
                    operation,
                    host,
                    "the call's total timeout"
                    if stalled_at is None
                    else f"{stalled_at - now:.0f}s",
                    circuit.max_cooldown,
                )
            if admission.retry_at is not None:
                if stalled_at is not None and admission.retry_at > stalled_at:
                    break
                await self.sleep(admission.retry_at - now)
                continue
            changed = circuits.changed(host)  # the probe's outcome
            with anyio.move_on_after(None if stalled_at is None else stalled_at - now) as scope:
                await changed.wait()
            if scope.cancelled_caught:
                break
        else:
            return None
        if failure is not None:
            raise _as_error(failure, operation)
        raise HostUnavailableError(
            f"{operation}: {host} was down for {policy.max_stall}s "
            f"(last failure: {circuit.last_failure})",
            operation=operation,
        )

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
        key = self.api_key if request.authenticated else None
        if key is None or isinstance(key, Bearer):
            attempt = functools.partial(self.transport.send, request, bearer=key)
        else:
            attempt = functools.partial(self._send_asking, request, key)
        return await self.run(
            request.operation,
            attempt,
            idempotent=request.idempotent,
            options=options,
            host=self.transport.base_url,
        )

    async def _send_asking(
        self, request: ApiRequest, function: KeyFunction, timeout: Timeout
    ) -> Reply:
        """One attempt with a key function: it is asked for the key, and after a 401 asked
        again, the request sent once more with a new key (a second 401 is the answer)."""
        first = await _ask(function)
        try:
            return await self.transport.send(request, timeout, first)
        except AuthenticationError:
            again = await _ask(function)
            if again == first:  # the same key would be refused the same way
                raise
        # A 401 says the service refused the request before doing anything: sending it once
        # more is safe even for a POST with no idempotency key. Nor is it a retry: the key
        # had changed, not the service's state, so it costs no attempt and no budget.
        return await self.transport.send(request, timeout, again)


async def _ask(source: KeyFunction) -> Bearer:
    """The function's current key (awaited if it is async), checked as a str key is.

    Called on every request without a lock: a function that refreshes a token caches it.
    """
    try:
        returned = source.function()
        if inspect.isawaitable(returned):
            returned = await returned
    except Exception as exc:  # the caller's code: whatever it raises, chained for them
        raise ValidationError(
            f"the api_key function raised {type(exc).__name__} (chained as the cause), so "
            "there was no key to send the request with"
        ) from exc
    try:
        return bearer_of(returned, "the key the api_key function returned")
    finally:
        del returned  # a key refused as malformed stays out of this frame's locals too


def _is_outage(failure: SandboxKitError | TryAgain) -> bool:
    return not isinstance(failure, TryAgain) and is_outage(failure)


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


@attrs.frozen
class DataPlane:
    """One sandbox host (its origin and token; the token never in a repr) and the client's
    calls."""

    calls: Calls
    host: HostKey

    def params(self, remote: str, username: str | None) -> list[tuple[str, str]]:
        """The query of `/files`: `path` (checked here, before any network) and `username`.

        The values go to aiohttp unquoted; yarl percent-encodes them exactly once.
        """
        pairs = [("path", check_remote_path(remote))]
        if username is not None:
            pairs.append(("username", username))
        return pairs

    def open(self, request: DataRequest) -> AbstractAsyncContextManager[StreamingResponse]:
        """`request` on this host's pool (its 429 window moved by the answer); the body
        stays unread. Use inside an attempt of `run`."""
        return self.calls.transport.open(self.host, request)

    def run(
        self,
        operation: str,
        attempt: Callable[[Timeout], Awaitable[T | TryAgain]],
        *,
        idempotent: bool,
        options: CallOptions = NO_OPTIONS,
        progress: Callable[[], int] | None = None,
        transfer: Transfer | None = None,
    ) -> Coroutine[Any, Any, T]:
        """The client's one retry loop around `attempt`, to be awaited: `Calls.run` sending
        to this host (waited for while its circuit is open), each argument as it says."""
        return self.calls.run(
            operation,
            attempt,
            idempotent=idempotent,
            options=options,
            progress=progress,
            host=self.host.origin,
            transfer=transfer,
        )

    async def call_json(
        self,
        method: str,
        path: str,
        *,
        operation: str,
        params: Sequence[tuple[str, str]] = (),
        options: CallOptions = NO_OPTIONS,
    ) -> Reply:
        """A request whose answer is JSON: retried as its method allows, deciphered whole."""

        target = request_target(path, params)

        async def attempt(timeout: Timeout) -> Reply:
            async with self.open(data_request(method, target, operation, timeout)) as response:
                return await response.reply(REPLY_LIMIT)

        return await self.run(operation, attempt, idempotent=is_idempotent(method), options=options)
