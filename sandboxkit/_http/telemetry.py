"""What a client tells about its calls: OpenTelemetry spans, DEBUG lines, and event hooks.

`Telemetry` (one per client) opens a `Watch` for each operation (`Calls.run`): the operation's
span, the count of its requests. The watch rides to the transport in a context variable
(`watching`), where each request is an `Exchange`: a child span, the `traceparent` header, a
DEBUG line as it goes and one as it ends, and the hooks. When nothing listens (no tracer, no
hook, DEBUG off) there is no watch and each request costs one context-variable read.

OpenTelemetry is optional: its API is imported on the first Client's construction, once, and
never when it is not installed. Nothing here records a message, a URL's query or userinfo, a
token or a key: spans and lines carry names, methods, hosts, statuses, counts and class names.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from .._core.events import (
    Origin,
    RequestEvent,
    ResponseEvent,
    RetryEvent,
    allowed_headers,
    origin_of,
    retry_reason,
)
from .._core.pacing import PaceEvent
from .._core.protocol import REQUEST_ID
from .._core.retry import TryAgain
from .._version import __version__
from ..errors import SandboxKitError, ValidationError

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer, TracerProvider

__all__ = [
    "HOOK_NAMES",
    "PACE_EVENT",
    "Exchange",
    "Telemetry",
    "Transfer",
    "Watch",
    "check_hook",
    "pace_attributes",
    "watching",
]

logger = logging.getLogger("sandboxkit")

HOOK_NAMES = ("on_request", "on_response", "on_retry")
# A transfer's (bytes moved, resumes or None): read once, when its operation ends.
Transfer = Callable[[], tuple[int, int | None]]

# The watch of the operation running in this task; None when nothing listens.
watching: ContextVar[Watch | None] = ContextVar("sandboxkit_watch", default=None)


# The span event of a throttle: a host paused, the found concurrency shrank or grew.
PACE_EVENT = "sandboxkit.throttle"


def pace_attributes(event: PaceEvent) -> dict[str, str | int | float]:
    """A `PaceEvent` as span event attributes (the host as its `host[:port]` only)."""
    attributes: dict[str, str | int | float] = {
        "sandboxkit.throttle.kind": event.kind,
        "sandboxkit.throttle.reason": event.reason,
        "sandboxkit.concurrency": event.concurrency,
    }
    if event.host:
        attributes["server.address"] = origin_of(event.host).address
        attributes["sandboxkit.throttle.seconds"] = event.seconds
    if event.rate:
        attributes["sandboxkit.throttle.rate"] = event.rate  # bytes/s before the change
    return attributes


def check_hook(name: str, hook: object) -> None:
    """None or a plain (not async) callable, else ValidationError naming the option."""
    if hook is None:
        return
    if not callable(hook) or inspect.iscoroutinefunction(hook):
        raise ValidationError(f"{name} must be a plain function taking one event, or None")


class _Api:
    """The few OpenTelemetry API functions used, bound once."""

    def __init__(self) -> None:
        from opentelemetry import context, propagate, trace

        self.client = trace.SpanKind.CLIENT
        self.error = trace.StatusCode.ERROR
        self.in_context = trace.set_span_in_context
        self.attach = context.attach
        self.detach = context.detach
        self.inject = propagate.inject
        self.global_tracer = trace.get_tracer
        self.current_span = trace.get_current_span
        self.non_recording = trace.NonRecordingSpan


@functools.cache
def _api() -> _Api | None:
    try:
        return _Api()
    except ImportError:  # opentelemetry-api is not installed: no tracing, nothing imported
        return None


# Imported now, where installed, rather than by the first Client: that is often made inside a
# running loop, which the import (about 20 ms, more on a first run) would block.
_api()


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    module = kind.__module__
    return kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"


class Telemetry:
    """One client's tracer and hooks.

    Args:
        tracer_provider: spans go to this provider; None: the global one, if
            opentelemetry-api is installed.
        on_request, on_response, on_retry: plain functions given each event; an exception
            one raises is logged (WARNING the first time, DEBUG after) and never breaks the call.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None,
        on_request: Callable[[RequestEvent], object] | None,
        on_response: Callable[[ResponseEvent], object] | None,
        on_retry: Callable[[RetryEvent], object] | None,
        clock: Callable[[], float],
    ) -> None:
        for name, hook in zip(HOOK_NAMES, (on_request, on_response, on_retry), strict=True):
            check_hook(name, hook)
        self.on_request = on_request
        self.on_response = on_response
        self.on_retry = on_retry
        self.clock = clock
        self.api = _api()
        self.tracer: Tracer | None = None
        if tracer_provider is not None:
            if self.api is None or not callable(getattr(tracer_provider, "get_tracer", None)):
                raise ValidationError("tracer_provider must be an OpenTelemetry TracerProvider")
            self.tracer = tracer_provider.get_tracer("sandboxkit", __version__)
        elif self.api is not None:
            # A proxy: spans go wherever a provider set later (set_tracer_provider) sends them.
            self.tracer = self.api.global_tracer("sandboxkit", __version__)
        # A transfer operation's bandwidth limit, for its span (the client's throttle's).
        self.bandwidth_limit: Callable[[str], float | None] | None = None
        self._hooked = bool(on_request or on_response or on_retry)
        self._silent = self.tracer is None and not self._hooked
        self._failed: set[str] = set()

    def start(self, operation: str, url: str | None) -> Watch | None:
        """The watch of one operation sending to `url`'s origin; None when nothing listens."""
        debug = logger.isEnabledFor(logging.DEBUG)
        if self._silent and not debug:
            return None
        span = None
        if self.tracer is not None:
            assert self.api is not None
            span = self.start_span(operation, None)
            if span.is_recording():
                span.set_attribute("sandboxkit.operation", operation)
                if url is not None:
                    origin = origin_of(url)
                    span.set_attribute("server.address", origin.address)
                    span.set_attribute("server.port", origin.port)
            elif not span.get_span_context().is_valid:
                span = None  # no provider, no trace to carry on: tracing costs nothing more
        if span is None and not debug and not self._hooked:
            return None
        return Watch(self, operation, origin_of(url) if url is not None else None, span, debug)

    def start_span(self, name: str, context: Context | None) -> Span:
        """A client span of the tracer, below the span current in `context` (None: now).

        A no-op tracer (no provider) makes no span of its own, but carries its parent's
        trace on in a non-recording span, so a trace the application received still reaches
        the requests' `traceparent`. opentelemetry-api before 1.40 gave the invalid span
        there instead, losing the trace: its parent's is carried on here the same way.
        """
        assert self.tracer is not None and self.api is not None
        span = self.tracer.start_span(name, context=context, kind=self.api.client)
        if span.get_span_context().is_valid:
            return span
        parent = self.api.current_span(context).get_span_context()
        return self.api.non_recording(parent) if parent.is_valid else span

    def fire(self, name: str, hook: Callable[[Any], object], event: object) -> None:
        """Give `event` to `hook`; what it raises is logged, never propagated."""
        try:
            hook(event)
        except Exception:
            first = name not in self._failed
            self._failed.add(name)
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "the %s hook raised; sandboxkit went on with the call (a hook's errors are "
                "logged at WARNING the first time, then at DEBUG)",
                name,
                exc_info=True,
            )


class Watch:
    """One operation being watched: its span (current while it runs) and its requests."""

    __slots__ = ("_token", "context", "debug", "operation", "origin", "requests", "span", "tm")

    def __init__(
        self,
        telemetry: Telemetry,
        operation: str,
        origin: Origin | None,
        span: Span | None,
        debug: bool,
    ) -> None:
        self.tm = telemetry
        self.operation = operation
        self.origin = origin
        self.span = span
        self.debug = debug
        self.requests = 0
        self.context: Context | None = None
        self._token: Token[Context] | None = None
        api = telemetry.api
        if span is not None and api is not None:
            # Current while the operation runs: its requests' spans (and any an instrumented
            # library makes under them, and log records that carry trace ids) hang below it.
            self.context = api.in_context(span)
            self._token = api.attach(self.context)

    def retry(self, delay: float, failure: SandboxKitError | TryAgain) -> None:
        """The operation will send again after `delay` seconds (called before the wait)."""
        reason = retry_reason(failure)
        span = self.span
        if span is not None and span.is_recording():
            span.add_event(
                "sandboxkit.retry",
                {
                    "sandboxkit.attempt": self.requests,
                    "sandboxkit.retry.delay": delay,
                    "sandboxkit.retry.reason": reason,
                },
            )
        hook = self.tm.on_retry
        if hook is not None:
            host = self.origin.host if self.origin is not None else ""
            event = RetryEvent(self.operation, host, self.requests, delay, reason)
            self.tm.fire("on_retry", hook, event)

    def paced(self, event: PaceEvent) -> None:
        """This operation's request paused its host (a 429): an event on its span."""
        span = self.span
        if span is not None and span.is_recording():
            span.add_event(PACE_EVENT, pace_attributes(event))

    def end(self, exc: BaseException | None, transfer: Transfer | None) -> None:
        """The operation is over: it returned (`exc` None) or raised `exc`."""
        span, api = self.span, self.tm.api
        if span is None or api is None:
            return
        if self._token is not None:
            api.detach(self._token)
        if span.is_recording():
            span.set_attribute("sandboxkit.attempts", self.requests)
            if transfer is not None:
                moved, resumes = transfer()
                span.set_attribute("sandboxkit.transfer.bytes", moved)
                if resumes is not None:
                    span.set_attribute("sandboxkit.transfer.resumes", resumes)
                limit_of = self.tm.bandwidth_limit
                limit = None if limit_of is None else limit_of(self.operation)
                if limit is not None:  # bytes/s, in effect when the transfer ended
                    span.set_attribute("sandboxkit.transfer.bandwidth_limit", limit)
            if exc is not None:
                span.set_attribute("error.type", _type_name(exc))
                span.set_status(api.error, type(exc).__name__)
        span.end()


class Exchange:
    """One request of a watched operation, from sending to its end."""

    __slots__ = (
        "_shown",
        "_token",
        "attempt",
        "method",
        "origin",
        "request_id",
        "span",
        "started",
        "status",
        "watch",
    )

    def __init__(self, watch: Watch, method: str, origin: Origin) -> None:
        watch.requests += 1
        self.watch = watch
        self.method = method
        self.origin = origin
        self.attempt = watch.requests
        self.status: int | None = None
        self.request_id: str | None = None
        self._shown: dict[str, str] = {}
        self.span: Span | None = None
        self._token: Token[Context] | None = None
        tm = watch.tm
        if watch.span is not None and tm.tracer is not None and tm.api is not None:
            span = tm.start_span(method, watch.context)
            if span.is_recording():
                span.set_attributes(
                    {
                        "http.request.method": method,
                        "server.address": origin.address,
                        "server.port": origin.port,
                        "url.scheme": origin.scheme,
                        "sandboxkit.operation": watch.operation,
                        "sandboxkit.attempt": self.attempt,
                    }
                )
                if self.attempt > 1:
                    span.set_attribute("http.request.resend_count", self.attempt - 1)
            self.span = span
            self._token = tm.api.attach(tm.api.in_context(span, watch.context))
        self.started = tm.clock()

    def sending(self, headers: dict[str, str] | None) -> dict[str, str] | None:
        """The request's own headers, with the trace context added; logs and tells hooks.

        The caller's dict may hold a credential: it is read through the allowlist only and
        never kept.
        """
        watch, tm = self.watch, self.watch.tm
        if self.span is not None and tm.api is not None:
            headers = {} if headers is None else headers
            tm.api.inject(headers, context=tm.api.in_context(self.span, watch.context))
        if watch.debug:
            logger.debug(
                "%s: request %d: %s %s headers=%s",
                watch.operation,
                self.attempt,
                self.method,
                self.origin.host,
                allowed_headers(headers, response=False),
            )
        if tm.on_request is not None:
            event = RequestEvent(watch.operation, self.method, self.origin.host, self.attempt)
            tm.fire("on_request", tm.on_request, event)
        return headers

    def answered(self, status: int, headers: Mapping[str, str]) -> None:
        """The answer's head arrived."""
        self.status = status
        self.request_id = headers.get(REQUEST_ID)
        if self.watch.debug:
            self._shown = allowed_headers(headers, response=True)

    def end(self, exc: BaseException | None, received: int | None = None) -> None:
        """The request is over: it succeeded (`exc` None) or ended in `exc`."""
        watch, tm = self.watch, self.watch.tm
        elapsed = tm.clock() - self.started
        error = None if exc is None else type(exc).__name__
        span = self.span
        if span is not None and tm.api is not None:
            if self._token is not None:
                tm.api.detach(self._token)
            if span.is_recording():
                if self.status is not None:
                    span.set_attribute("http.response.status_code", self.status)
                if received is not None:
                    span.set_attribute("http.response.body.size", received)
                if exc is not None:
                    status = self.status
                    kind = str(status) if status is not None and status >= 400 else _type_name(exc)
                    span.set_attribute("error.type", kind)
                    span.set_status(tm.api.error, error)
            span.end()
        if watch.debug:
            logger.debug(
                "%s: answer %d: %s from %s in %.3fs%s%s headers=%s",
                watch.operation,
                self.attempt,
                self.status if self.status is not None else "no answer",
                self.origin.host,
                elapsed,
                f" request_id={self.request_id}" if self.request_id else "",
                f" error={error}" if error else "",
                self._shown,
            )
        if tm.on_response is not None:
            event = ResponseEvent(
                watch.operation,
                self.method,
                self.origin.host,
                self.attempt,
                self.status,
                elapsed,
                error,
                self.request_id,
            )
            tm.fire("on_response", tm.on_response, event)
