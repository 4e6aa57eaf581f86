"""What the service's answers mean, for v2, v1 and the data plane. Pure: no I/O, no await.

`decipher` is the one function from an answer's status, headers and body to a value or an
exception (gidgethub's `decipher_response`): the transport calls it once per answer it reads
whole. Below it: JSON and error-body decoding, `Retry-After`, `Content-Range`, and the content
codings a proxy may add to a data-plane body despite `Accept-Encoding: identity`.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import zlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, NamedTuple

import attrs

from ..errors import (
    APIError,
    RedirectNotFollowedError,
    ResponseDecodeError,
    Surface,
    ValidationDetail,
    error_class,
)
from .protocol import REQUEST_ID, RETRY_AFTER

__all__ = [
    "DECODABLE_CODINGS",
    "ContentDecoder",
    "ContentRange",
    "Reply",
    "content_coding",
    "decipher",
    "decode_error",
    "decode_json",
    "error_for",
    "parse_content_range",
    "parse_retry_after",
    "unwrap_v2",
]


class Reply(NamedTuple):
    """A decoded success: status, headers and parsed JSON (None for an empty body).

    A NamedTuple rather than frozen attrs: one is built per call, at half the cost.
    """

    status: int
    headers: Mapping[str, str]
    payload: Any

    @property
    def request_id(self) -> str | None:
        """The body's `request_id`, else the `X-Request-ID` header."""
        if isinstance(self.payload, dict) and isinstance(self.payload.get("request_id"), str):
            return str(self.payload["request_id"])
        value = self.headers.get(REQUEST_ID)
        return str(value) if value is not None else None


def decipher(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    surface: Surface,
    *,
    operation: str,
    now: float,
) -> Reply:
    """A 2xx answer's parsed JSON, or the exception any other answer calls for.

    Args:
        now: the time (UNIX seconds), for a `Retry-After` given as an HTTP date.

    Raises:
        APIError: its status or v2-code subclass (`RedirectNotFollowedError` for a 3xx).
        ResponseDecodeError: a 2xx whose body is not JSON.
    """
    if not 200 <= status < 300:
        raise error_for(status, headers, body, surface, operation=operation, now=now)
    try:
        payload = decode_json(body) if body else None
    except ValueError:
        raise ResponseDecodeError(
            f"{operation}: the {status} answer is not JSON",
            status=status,
            request_id=headers.get(REQUEST_ID),
        ) from None
    return Reply(status, headers, payload)


def error_for(
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    surface: Surface,
    *,
    operation: str,
    now: float,
) -> APIError:
    """The exception for an answer that is not a success, with `Retry-After` understood.

    A 3xx is never followed (a token goes only to its own host): its body and `Location` are
    not looked at.
    """
    if 300 <= status < 400:
        return RedirectNotFollowedError(
            f"{operation}: answered {status} (a redirect), which is never followed, so no "
            "token goes to another host",
            status=status,
            surface=surface,
            request_id=headers.get(REQUEST_ID),
        )
    retry_after = parse_retry_after(headers.get(RETRY_AFTER), now)
    return decode_error(status, body, headers, surface, retry_after=retry_after)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a `Retry-After` (delta-seconds or HTTP-date); None if unusable.

    Negative, non-finite and garbage values are ignored rather than trusted.
    """
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.fromtimestamp(now, UTC)).total_seconds()
        return max(0.0, seconds)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def decode_json(body: bytes) -> Any:
    """Parse a JSON body; raises ValueError when it is not JSON (or nests past the parser)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise ValueError("the JSON nests deeper than the parser can follow") from None


def unwrap_v2(payload: Any) -> Any:
    """The `data` of a v2 `{request_id, data}` envelope, or the payload itself."""
    if isinstance(payload, dict) and "data" in payload and "request_id" in payload:
        return payload["data"]
    return payload


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _validation_details(raw: Any) -> tuple[ValidationDetail, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        ValidationDetail(
            field=_str_or_none(item.get("field")),
            expression=_str_or_none(item.get("expression")),
            original_value=item.get("originalValue"),
            reason=_str_or_none(item.get("reason")),
        )
        for item in raw
        if isinstance(item, dict)
    )


def decode_error(
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    surface: Surface,
    *,
    retry_after: float | None = None,
) -> APIError:
    """Turn an error answer into the right `APIError` subclass, whatever its body holds.

    A body that is empty, not JSON, or JSON of another shape still gives the class its status
    calls for; only the message is then generic.
    """
    try:
        payload = decode_json(body) if body else None
    except ValueError:
        payload = None
    fields: dict[str, Any] = payload if isinstance(payload, dict) else {}
    request_id = _str_or_none(fields.get("request_id")) or headers.get(REQUEST_ID)
    message = _str_or_none(fields.get("message"))
    code: str | int | None = None
    group: str | None = None
    details: Mapping[str, Any] | None = None
    validation: tuple[ValidationDetail, ...] = ()
    traces: tuple[str, ...] = ()
    if surface == "v2":
        code = _str_or_none(fields.get("code"))
        raw_details = fields.get("details")
        details = raw_details if isinstance(raw_details, dict) else None
    elif surface == "v1":
        raw_code = fields.get("code")
        code = raw_code if isinstance(raw_code, int) and not isinstance(raw_code, bool) else None
        group = _str_or_none(fields.get("group"))
        validation = _validation_details(fields.get("validationDetail"))
        raw_traces = fields.get("traces")
        if isinstance(raw_traces, list):
            traces = tuple(t for t in raw_traces if isinstance(t, str))
        if message is None and validation:
            message = "; ".join(f"{d.field}: {d.reason}" for d in validation)
    # Data-plane bodies are `{message}` only: shown to humans, never parsed.
    cls = error_class(status, code if surface == "v2" else None)
    return cls(
        message or f"HTTP {status}",
        status=status,
        surface=surface,
        request_id=request_id,
        code=code,
        details=details,
        group=group,
        validation_detail=validation,
        retry_after=retry_after,
        traces=traces,
    )


@attrs.frozen
class ContentRange:
    """A parsed `Content-Range: bytes start-end/total` (total None for `*`)."""

    start: int
    end: int
    total: int | None


_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


def parse_content_range(value: str | None) -> ContentRange | None:
    """Parse a Content-Range header; None when absent or malformed."""
    if not value:
        return None
    match = _CONTENT_RANGE.match(value)
    if match is None:
        return None
    start, end = int(match[1]), int(match[2])
    total = None if match[3] == "*" else int(match[3])
    if end < start or (total is not None and end >= total):
        return None
    return ContentRange(start, end, total)


# --- content codings (data plane) ---------------------------------------------------------
# Every data-plane request asks for `Accept-Encoding: identity`: the body is the file's raw
# bytes, and Range offsets count those bytes. A proxy may code the answer anyway; these are
# the codings sandboxkit undoes (zlib is in the standard library; br and zstd are not).
DECODABLE_CODINGS = frozenset({"gzip", "x-gzip", "deflate"})


def content_coding(value: str | None) -> str | None:
    """The answer's `Content-Encoding`, lower-cased; None when it is absent or `identity`."""
    if value is None:
        return None
    coding = value.strip().lower()
    return None if coding in ("", "identity") else coding


class ContentDecoder:
    """Undoes a gzip or deflate coding piece by piece, at most `limit` bytes out at a time.

    Bounded output keeps memory flat against a coded body that expands a thousandfold. A
    "deflate" body may be zlib-wrapped (RFC 9110) or raw (as some servers send it): the first
    piece tells. Concatenated gzip members decode as one stream (RFC 1952).
    """

    def __init__(self, coding: str) -> None:
        if coding not in DECODABLE_CODINGS:
            raise ValueError(f"cannot decode the content coding {coding!r}")
        self._gzip = coding != "deflate"
        self._inflate = self._new(raw=False)
        self._started = False

    def _new(self, *, raw: bool) -> Any:
        if self._gzip:
            return zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        return zlib.decompressobj(wbits=-zlib.MAX_WBITS if raw else zlib.MAX_WBITS)

    def decode(self, data: bytes, limit: int) -> Iterator[bytes]:
        """The decoded bytes of the next coded piece; raises ValueError on corrupt input."""
        while data:
            try:
                out = self._inflate.decompress(data, limit)
            except zlib.error as exc:
                if self._gzip or self._started:
                    raise ValueError(f"the coded body is corrupt: {exc}") from None
                self._inflate = self._new(raw=True)  # a raw deflate stream, without header
                self._started = True
                continue
            self._started = True
            if out:
                yield out
            data = self._inflate.unconsumed_tail
            if self._inflate.eof and not data:
                data = self._inflate.unused_data
                if data and not self._gzip:
                    raise ValueError("bytes follow the end of the deflate stream")
                if data:
                    self._inflate = self._new(raw=False)  # the next gzip member

    @property
    def complete(self) -> bool:
        """Whether the coded stream reached its end (else the body was cut short)."""
        return bool(self._inflate.eof)
