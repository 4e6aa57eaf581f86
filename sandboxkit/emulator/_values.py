"""Small public values of the emulator: data centers, the journal record, a manual clock."""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs
from multidict import CIMultiDict, CIMultiDictProxy

__all__ = ["STANDALONE_IDCS", "Idc", "ManualClock", "RecordedRequest", "frozen_headers"]

_IDC_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def _check_idc_name(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not _IDC_NAME.match(value):
        raise ValueError(f"invalid IDC name {value!r}: lowercase letters, digits and '-'")


def _check_limit(_: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError("max_upload_bytes must be >= 0 or None")


@attrs.frozen(slots=True)
class Idc:
    """One emulated data center and the capabilities its data plane has.

    Args:
        name: the IDC name used as ``idc_name`` on template create.
        supports_resume: answer ``Range`` with 206 and ``Accept-Ranges: bytes``; when False
            every download is a 200 of the whole file with ``Accept-Ranges: none``.
        supports_split_flow: allow template create without ``build`` (422 otherwise).
        max_upload_bytes: per-file upload limit (a file of exactly this size is accepted,
            one byte more gets 413); None means no limit.
        chunked_downloads: send downloads with ``Transfer-Encoding: chunked`` instead of
            ``Content-Length`` (the "size not known up front" row of the download table).
        honors_username: when False the ``username`` query is ignored and every request
            acts as the default user ("some data centers ignore it").
    """

    name: str = attrs.field(validator=_check_idc_name)
    supports_resume: bool = True
    supports_split_flow: bool = True
    max_upload_bytes: int | None = attrs.field(default=None, validator=_check_limit)
    chunked_downloads: bool = False
    honors_username: bool = True


# The data centers of a standalone emulator (`sandboxkit emulator`, `python -m
# sandboxkit.emulator`): one with resume and the split flow, one with neither.
STANDALONE_IDCS = (
    Idc("us-denver-1"),
    Idc("eu-lite", supports_resume=False, supports_split_flow=False),
)


def frozen_headers(headers: Mapping[str, str] | CIMultiDict[str]) -> CIMultiDictProxy[str]:
    """An immutable, case-insensitive copy of request headers."""
    return CIMultiDictProxy(CIMultiDict(headers))


@attrs.frozen(slots=True)
class RecordedRequest:
    """One request either emulator server received, as the journal keeps it.

    Attributes:
        server: ``"console"`` (v1 and v2) or ``"data"`` (a sandbox's data plane).
        method: the HTTP method.
        host: the ``Host`` header as sent.
        path: the decoded path, without the query.
        query: the decoded query (last value wins for a repeated name).
        headers: an immutable copy of the request headers with case-insensitive lookup.
        sandbox_key: the sandbox addressed by the ``Host`` header (None on the console).
        route: the route name (``"files.download"``, ``"templates.create"``...), None when
            no route matched.
        status: the status answered; None when no response was sent (a cut before headers).
        body_size: request body bytes received (counted while streaming, never buffered).
        fault: the fault kind injected into this answer (``"429"``, ``"cut"``...), or None.
        request_id: the v2 request id answered (None on v1 and the data plane).
    """

    server: str
    method: str
    host: str
    path: str
    query: Mapping[str, str]
    headers: CIMultiDictProxy[str]
    sandbox_key: str | None
    route: str | None
    status: int | None = None
    body_size: int = 0
    fault: str | None = None
    request_id: str | None = None


class ManualClock:
    """A clock that only moves when told to; pass it as ``Emulator(clock=...)``.

    Calling it returns the current time in seconds since the epoch, so timestamps the
    emulator renders stay realistic. Tests move it with :meth:`advance` instead of sleeping.

    Example:
        >>> clock = ManualClock(start=1_700_000_000.0)
        >>> clock.advance(3600)
        >>> clock()
        1700003600.0
    """

    __slots__ = ("_now",)

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)

    def __call__(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward.

        Raises:
            ValueError: ``seconds`` is negative (time never goes back).
        """
        if seconds < 0:
            raise ValueError("a ManualClock never goes back")
        self._now += seconds

    def __repr__(self) -> str:
        return f"ManualClock({self._now!r})"
