"""Option values: plain frozen attrs, passed down whole rather than as option blocks.

`Timeout`, `Limits` and `RetryPolicy` are the client's; `CallOptions` carries one call's
overrides of them. Validators raise `ValidationError` naming the field. The API key is a
`Bearer` (a key given) or a `KeyFunction` asked for the current key per request; neither
shows what it holds, whichever repr or traceback frame it is found in.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import attrs

from ..errors import ValidationError
from . import environment as env
from .budgets import describe_rate, parse_bwlimit

__all__ = [
    "NO_OPTIONS",
    "ApiKeyFunction",
    "Bearer",
    "Budgets",
    "CallOptions",
    "KeyFunction",
    "Limits",
    "ParallelDownloads",
    "Progress",
    "RetryPolicy",
    "Timeout",
    "at_least",
    "bearer_of",
    "check_key_function",
    "resolve_api_key",
    "resolve_base_url",
    "resolve_data_plane_scheme",
    "seconds",
]


ApiKeyFunction = Callable[[], str] | Callable[[], Awaitable[str]]
"""A function of no arguments returning the current API key (an async one is awaited)."""

Progress = Callable[[int, int | None], object]
"""A transfer's progress callback, the one type every surface takes (`files.download` and
`upload`, the agent tools' copies): called as `progress(done_bytes, total_or_None)` as bytes
move, on the event loop; whatever it returns is ignored."""


@attrs.frozen(repr=False)
class Bearer:
    """The console's `Authorization` value, `Bearer {key}`, in an object that shows nothing
    of it: it is an argument of frames that a traceback with locals (Sentry) may show."""

    header: str

    def __repr__(self) -> str:
        return "Bearer(<hidden>)"


def bearer_of(value: object, source: str) -> Bearer:
    """`value` as the console's credential, checked as a key given as a str is.

    Args:
        value: what was given (or what the api_key function returned).
        source: what the message names it by ("api_key", or "the key the api_key
            function returned").

    Raises:
        ValidationError: not a str, blank, or with a line break or NUL. The message never
            shows the value.
    """
    if not isinstance(value, str):
        problem = f"{source} is of type {type(value).__name__}, not str"
    elif not value.strip():
        problem = f"{source} is empty"
    elif any(ch in value for ch in "\r\n\x00"):
        problem = f"{source} must not contain line breaks or NUL"
    else:
        return Bearer(f"Bearer {value.strip()}")
    del value  # not a local of the frame the error's traceback shows
    raise ValidationError(problem)


@attrs.frozen(repr=False)
class KeyFunction:
    """The api_key function, in an object that shows nothing of it: the repr of a partial or
    a bound method may show a key held in its arguments or its object."""

    function: ApiKeyFunction

    def __repr__(self) -> str:
        return "KeyFunction(<hidden>)"


def check_key_function(value: object, source: str) -> None:
    """ValidationError unless `value` is a function that can be called with no arguments."""
    if not callable(value):
        raise ValidationError(
            f"{source} must be a str or a function of no arguments returning one, "
            f"not {type(value).__name__}"
        )
    try:
        inspect.signature(value).bind()
    except TypeError:
        raise ValidationError(f"{source}: the function must take no arguments") from None
    except ValueError:  # no signature to read (some builtins): its first call tells
        pass


def resolve_api_key(api_key: str | ApiKeyFunction | None) -> Bearer | KeyFunction:
    """The credential for the console: the key given, else `$SANDBOXKIT_API_KEY`, as a
    `Bearer`; or the function given, asked for the current key per request.

    Raises:
        ValidationError: no usable key (blank, multi-line), or neither a str nor a function
            of no arguments.
    """
    if api_key is not None and not isinstance(api_key, str):
        check_key_function(api_key, "api_key")
        return KeyFunction(api_key)
    value = api_key if api_key is not None else os.environ.get(env.API_KEY)
    if not value or not value.strip():
        raise ValidationError(f"no API key: pass api_key= or set {env.API_KEY}")
    return bearer_of(value, "api_key")


def resolve_base_url(base_url: str | None) -> str:
    """The console URL given, else `$SANDBOXKIT_BASE_URL`, without a trailing slash."""
    value = base_url if base_url is not None else os.environ.get(env.BASE_URL)
    if not value or not value.strip():
        raise ValidationError(f"no base URL: pass base_url= or set {env.BASE_URL}")
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValidationError(f"base_url must be an http(s) URL, got {value!r}")
    if parts.query or parts.fragment:
        raise ValidationError("base_url must not carry a query or fragment")
    return value.strip().rstrip("/")


def resolve_data_plane_scheme(scheme: str | None) -> str:
    """The scheme given, else `$SANDBOXKIT_DATA_PLANE_SCHEME` (any case), else "https".

    Raises:
        ValidationError: the value is neither "http" nor "https" (the message says where it
            came from).
    """
    if scheme is not None:
        if scheme not in ("http", "https"):
            raise ValidationError(f"data_plane_scheme must be 'http' or 'https', got {scheme!r}")
        return scheme
    value = os.environ.get(env.DATA_PLANE_SCHEME, "").strip().lower()
    if not value:
        return "https"
    if value not in ("http", "https"):
        raise ValidationError(f"{env.DATA_PLANE_SCHEME} must be http or https, got {value!r}")
    return value


Validator = Callable[[object, "attrs.Attribute[Any]", object], None]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def at_least(minimum: int) -> Validator:
    """An attrs validator: an integer no smaller than `minimum`, else ValidationError."""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValidationError(f"{attribute.name}={value!r}: must be an integer >= {minimum}")

    return check


def flag_or_none(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: True, False or None (not 1, not "yes"), else ValidationError."""
    if value is not None and not isinstance(value, bool):
        raise ValidationError(f"{attribute.name}={value!r}: must be True, False or None")


def seconds(*, zero: bool = False, none: bool = False) -> Validator:
    """An attrs validator: a positive number of seconds (0 too with `zero`, None with `none`),
    else ValidationError."""
    rule = "a number of seconds >= 0" if zero else "a positive number of seconds"
    rule += " or None" if none else ""

    def check(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is None and none:
            return
        if not _is_number(value) or not (value >= 0 if zero else value > 0):  # type: ignore[operator]
            raise ValidationError(f"{attribute.name}={value!r}: must be {rule}")

    return check


@attrs.frozen(cache_hash=True)  # hashed on every request (the aiohttp timeout cache)
class Timeout:
    """Time limits in seconds.

    Args:
        connect: to open a connection (TCP and TLS).
        read: between two reads of the answer; a slow but moving download never trips it.
        total: the whole call, retries and their waits included (None: no overall limit).
    """

    connect: float | None = attrs.field(default=10.0, validator=seconds(none=True))
    read: float | None = attrs.field(default=60.0, validator=seconds(none=True))
    total: float | None = attrs.field(default=None, validator=seconds(none=True))


def _covers_one_host(instance: Limits, attribute: attrs.Attribute[Any], value: object) -> None:
    at_least(1)(instance, attribute, value)
    if value < instance.per_host_connections:  # type: ignore[operator]
        raise ValidationError(
            f"{attribute.name}={value!r}: must be >= per_host_connections "
            f"({instance.per_host_connections})"
        )


@attrs.frozen
class Limits:
    """Connection pool bounds.

    Open sockets never exceed `control_plane_connections + max_sandbox_connections`.
    Idle keep-alive sockets count too, and stay open while they fit: a sandbox host used
    again finds its connections, however many other hosts were used meanwhile.

    Args:
        control_plane_connections: sockets to the console (v1 and v2 share it).
        per_host_connections: sockets to one sandbox host, and its requests at once (its
            429s lower the latter for itself).
        max_sandbox_connections: sockets to all sandbox hosts together, busy or idle. When
            a request needs one more and none is left, the least recently used idle host's
            sockets are closed (a host with a request in flight keeps its own); with every
            socket busy, the request waits for one. At least `per_host_connections`.
        host_idle_seconds: a sandbox host unused this long has its sockets closed.
        found_host_concurrency: when each sandbox host's requests at once are found, within
            `per_host_connections`, from how its requests end: from 4, grown while they end
            as fast as their sizes predict, shrunk on 429, 503, failures and queueing, at
            most one change each half second and wave of requests
            (`pacing.ConcurrencyController`). None (the default): while a batch that finds
            its own concurrency runs (its hosts' requests, and any others to them
            meanwhile); True: always, for every call (a download's slices, calls outside a
            batch); False: never. Otherwise a host gets `per_host_connections` at once,
            halved by each 429 and grown back by successes.
    """

    control_plane_connections: int = attrs.field(default=100, validator=at_least(1))
    per_host_connections: int = attrs.field(default=8, validator=at_least(1))
    max_sandbox_connections: int = attrs.field(default=2048, validator=_covers_one_host)
    host_idle_seconds: float = attrs.field(default=60.0, validator=seconds())
    found_host_concurrency: bool | None = attrs.field(default=None, validator=flag_or_none)


@attrs.frozen
class RetryPolicy:
    """How one operation retries.

    Args:
        max_attempts: requests in all, the first included. A try that moved a transfer
            forward is not counted (it is carried on), except under 1: exactly one request.
        initial_backoff: the first delay's upper bound, in seconds (full jitter below it).
        max_backoff: the cap on any computed delay.
        max_retry_after: the longest `Retry-After` we wait for; a longer one raises at once
            with `retry_after` set on the error.
        retry_server_errors: also retry a plain 500 (off: docs/design.md section 5 surfaces it).
        honor_retry_after: wait what `Retry-After` says (off only in `no_delay`, for tests).
        max_stall: the longest a call goes without progress (its start, or bytes moved)
            while its host is down, in seconds; then it raises its last failure (or
            `HostUnavailableError`). A host that answered this client before is down when
            its circuit is open: after 5 failures in a row that say it is going away
            (refused or reset connects, timeouts, a connection closed before or right after
            an answer's head, 502/503) from any calls, calls to it wait, spending no
            attempts and no retry budget (nor did those 5), while one probe at a time (after
            0.25 s, doubling to 2 s) tests it. A sandbox host that never answered is waited
            for only while its domain is down (other hosts of it failing, none answering):
            then from its first such failure. Otherwise (a wrong sandbox key, domain or port)
            its failures count as attempts. None: only `Timeout.total` bounds the wait. 0:
            never wait for a host; its failures count as attempts.
    """

    max_attempts: int = attrs.field(default=5, validator=at_least(1))
    initial_backoff: float = attrs.field(default=0.5, validator=seconds(zero=True))
    max_backoff: float = attrs.field(default=20.0, validator=seconds(zero=True))
    max_retry_after: float = attrs.field(default=60.0, validator=seconds(zero=True))
    retry_server_errors: bool = False
    honor_retry_after: bool = True
    max_stall: float | None = attrs.field(default=60.0, validator=seconds(zero=True, none=True))

    @classmethod
    def none(cls) -> RetryPolicy:
        """Exactly one request per call: no retry, no carrying on of a cut transfer, no
        wait for a host that is down."""
        return cls(max_attempts=1, max_stall=0.0)

    @classmethod
    def no_delay(cls, max_attempts: int = 5) -> RetryPolicy:
        """Retries without waiting, whatever `Retry-After` says or whether the host is
        down: the testing switch."""
        return cls(
            max_attempts=max_attempts,
            initial_backoff=0.0,
            max_backoff=0.0,
            honor_retry_after=False,
            max_stall=0.0,
        )


@attrs.frozen
class ParallelDownloads:
    """When `files.download` fetches one file over several connections at once.

    A file of at least `threshold` bytes, on a data center that has shown
    `Accept-Ranges: bytes` and is far enough away (a round trip of `min_latency` or more),
    is fetched as `Range` slices on up to `parts` connections of its
    sandbox host's own pool (so within `Limits.per_host_connections` and the host's 429
    window), written in place; each slice resumes on its own after a cut. Over a long link
    a single TCP stream is capped by its window over the round trip; several reach the
    link's speed: 1 GiB over an emulated 40 ms link came 2.4x faster on 4 connections and
    2.55x on 8 than on one (benchmarks/README.md, case 8). Over a short path a single stream
    already reaches the link's speed, and slices would only cost CPU (on loopback about
    1.1-1.6x the CPU per GiB, and no faster).
    `iter_bytes` and `read_bytes` always use one stream (their bytes come in order).

    Args:
        threshold: bytes; a file at least this large is split.
        parts: connections per file, 1 or more; 1 never splits. The default, 8, is the
            default `Limits.per_host_connections`: one large file may use the whole host
            window, and other requests to that host wait for a slice to end.
        min_latency: the round-trip time, in seconds, below which a file is not split; 0
            splits whatever the distance. It is the kernel's smoothed RTT of the first
            GET's connection (Linux `TCP_INFO`), so a nearby server slow to start answering
            is not taken for a far one; a loopback host is never split. Through a proxy, or
            where the platform tells no RTT, the time the first answer's head took is used.
    """

    threshold: int = attrs.field(default=64 << 20, validator=at_least(1))
    parts: int = attrs.field(default=8, validator=at_least(1))
    min_latency: float = attrs.field(default=0.01, validator=seconds(zero=True))

    @classmethod
    def off(cls) -> ParallelDownloads:
        """Every download on one connection."""
        return cls(parts=1)


def _rate_per_second(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (not _is_number(value) or not 0 < value < float("inf")):  # type: ignore[operator]
        raise ValidationError(f"{attribute.name}={value!r}: must be a positive number, or None")


def _rate(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not _is_number(value) or not value >= 1 or value == float("inf"):  # type: ignore[operator]
        raise ValidationError(f"{attribute.name}={value!r}: must be a number >= 1, or None")


def _per_host(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Budgets):
        raise ValidationError(f"per_host={value!r}: must be a sandboxkit.Budgets, or None")
    if value.per_host is not None:
        raise ValidationError("per_host: a host's budgets cannot have a per_host of their own")


@attrs.frozen
class Budgets:
    """Bandwidth and request rates one client shares among all it sends (default: none).

    Every transfer of the client draws from these as its bytes move, at most 256 KiB a
    draw (less at low rates: 1/8 s of the budget), so the limit holds for 1 transfer or 64
    and none bursts past it. Change them while transfers run with `Client.set_budgets`:
    effective at once for transfers already running. A limit applies to one Client, so
    with the Dask helper to each worker's (each shard builds its own from the config).

    The names carry their unit: `bytes_per_second` rather than `bps`, which networks read
    as bits.

    Args:
        download_bytes_per_second: the bytes of every answer's body together (downloads,
            bounded reads, `iter_bytes`), as they come off the wire; None: no limit.
        upload_bytes_per_second: the bytes of every upload's body together; None: no limit.
        requests_per_second: requests sent (every attempt, to the console and the data
            plane), each taking a token before it goes; None: no limit.
        request_burst: requests that may go at once after a quiet spell (1, as rclone's
            `--tpslimit-burst`: evenly spaced).
        per_host: the same limits for each host on its own (a sandbox, the console), on
            top of those of the whole client; its own `per_host` must be None.

    Raises:
        ValidationError: a rate below 1, a burst below 1, or a nested `per_host`.

    Example::

        budgets = sandboxkit.Budgets(download_bytes_per_second=50 << 20, requests_per_second=20)
        budgets = sandboxkit.Budgets.from_bwlimit("10M:100M")  # rclone's UP:DOWN
    """

    download_bytes_per_second: float | None = attrs.field(default=None, validator=_rate)
    upload_bytes_per_second: float | None = attrs.field(default=None, validator=_rate)
    requests_per_second: float | None = attrs.field(default=None, validator=_rate_per_second)
    request_burst: int = attrs.field(default=1, validator=at_least(1))
    per_host: Budgets | None = attrs.field(default=None, validator=_per_host)

    @classmethod
    def from_bwlimit(cls, spec: str, **others: Any) -> Budgets:
        """Bandwidths from rclone's `--bwlimit`: `10M` (both directions), `UP:DOWN`
        (`10M:100M`), `off`; units B, K, M, G, T, P are binary (KiB/s for a bare number).

        Args:
            spec: the `--bwlimit` value.
            others: any other field (`requests_per_second`, `per_host`...).

        Raises:
            ValidationError: a value rclone would refuse, or a timetable.
        """
        upload, download = parse_bwlimit(spec)
        return cls(download_bytes_per_second=download, upload_bytes_per_second=upload, **others)

    @property
    def unlimited(self) -> bool:
        """Whether nothing is limited (neither for the client nor per host)."""
        return self == _NO_BUDGETS

    def describe(self) -> str:
        """The limits for people (a log line, a batch summary): `download 10 MiB/s, upload
        off, requests off`, then the per-host ones."""
        text = (
            f"download {describe_rate(self.download_bytes_per_second)}, "
            f"upload {describe_rate(self.upload_bytes_per_second)}, requests "
            + (
                "off"
                if self.requests_per_second is None
                else f"{self.requests_per_second:g}/s burst {self.request_burst}"
            )
        )
        if self.per_host is not None:
            text += f"; per host: {self.per_host.describe()}"
        return text


_NO_BUDGETS = Budgets()


class CallOptions(NamedTuple):
    """One call's overrides of the client's defaults, passed down whole (None: the default).

    A NamedTuple, as the per-call records of `protocol`: one is made for every call.
    """

    timeout: Timeout | None = None
    retry: RetryPolicy | None = None


NO_OPTIONS = CallOptions()
