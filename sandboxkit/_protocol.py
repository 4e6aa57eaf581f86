"""Pure protocol facts: paths, header names, request descriptions, error decoding.

Nothing here does I/O or awaits (gidgethub's sans-I/O core); `_transport.py` carries these
descriptions over aiohttp and the resources build them.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, NamedTuple
from urllib.parse import quote

import attrs

from .errors import APIError, Surface, ValidationDetail, error_class

__all__ = [
    "ACCEPT_ENCODING",
    "ACCEPT_RANGES",
    "ACCESS_TOKEN",
    "AUTHORIZATION",
    "CONTENT_ENCODING",
    "CONTENT_RANGE",
    "DECODABLE_CODINGS",
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_REPLAYED",
    "IMAGE_NAME_FILTER",
    "IMAGE_OS_SERIES_FILTER",
    "NO_HEADERS",
    "RANGE",
    "REQUEST_ID",
    "RETRYABLE_STATUSES",
    "RETRY_AFTER",
    "V1_CONTAINERS_PATH",
    "V1_ELASTIC_IPS_PATH",
    "V1_IMAGES_PATH",
    "V1_OAUTH_TOKEN_PATH",
    "V1_ORGANIZATIONS_PATH",
    "V1_TEMPLATES_PATH",
    "V1_VPCS_PATH",
    "ApiRequest",
    "ContentDecoder",
    "ContentRange",
    "api_keys_path",
    "build_logs_path",
    "build_path",
    "builds_path",
    "container_path",
    "container_shell_path",
    "content_coding",
    "data_plane_origin",
    "decode_error",
    "decode_json",
    "elastic_ip_associate_path",
    "elastic_ip_path",
    "organization_path",
    "parse_content_range",
    "query_string",
    "segment",
    "unwrap_v2",
    "v1_request",
    "v1_template_path",
    "vpc_path",
]

AUTHORIZATION = "Authorization"
ACCESS_TOKEN = "X-Access-Token"
IDEMPOTENCY_KEY = "Idempotency-Key"
IDEMPOTENCY_REPLAYED = "Idempotency-Replayed"
REQUEST_ID = "X-Request-ID"
RETRY_AFTER = "Retry-After"
RANGE = "Range"
CONTENT_RANGE = "Content-Range"
ACCEPT_RANGES = "Accept-Ranges"
ACCEPT_ENCODING = "Accept-Encoding"
CONTENT_ENCODING = "Content-Encoding"

# 500 is deliberately absent: DESIGN section 5 surfaces it at once.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})

V2_PREFIX = "/api/v2"
V1_PREFIX = "/api/v1"
FILES_PATH = "/files"
TEMPLATES_PATH = f"{V2_PREFIX}/templates"

Method = Literal["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"]


# RFC 3986 "unreserved": characters no part of a URL ever needs quoted.
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")


def segment(value: str) -> str:
    """Quote one path segment (or query name or value) whole, `/`, `&`, `=`, `#` included, so
    an id can never add segments, parameters or a fragment."""
    if _UNRESERVED.fullmatch(value):
        return value  # the usual id: nothing to quote, and the check is ~10x cheaper than quote()
    return quote(value, safe="")


def query_string(params: Sequence[tuple[str, str]]) -> str:
    """`name=value&...` for a URL, each name and value quoted whole by `segment()`."""
    return "&".join([f"{segment(name)}={segment(value)}" for name, value in params])


def builds_path(template_id: str) -> str:
    """Path of a Template's Build list."""
    return f"{TEMPLATES_PATH}/{segment(template_id)}/builds"


def build_path(template_id: str, build_id: str) -> str:
    """Path of one Build (POST starts it)."""
    return f"{builds_path(template_id)}/{segment(build_id)}"


def build_logs_path(template_id: str, build_id: str) -> str:
    """Path of a Build's logs."""
    return f"{build_path(template_id, build_id)}/logs"


# --- v1 (bodies are not wrapped; ids are single quoted segments) ----------------------------

V1_OAUTH_TOKEN_PATH = f"{V1_PREFIX}/oauth/token"
V1_IMAGES_PATH = f"{V1_PREFIX}/images"
V1_TEMPLATES_PATH = f"{V1_PREFIX}/templates"
V1_CONTAINERS_PATH = f"{V1_PREFIX}/containers"
V1_ORGANIZATIONS_PATH = f"{V1_PREFIX}/organizations"
V1_ELASTIC_IPS_PATH = f"{V1_PREFIX}/elastic-ips"
V1_VPCS_PATH = f"{V1_PREFIX}/vpcs"
# The interface does not name the two image filters; these are sandboxkit's (and its
# emulator's) choice: a part of the image `name`, and its `OSSeries`.
IMAGE_NAME_FILTER = "name"
IMAGE_OS_SERIES_FILTER = "os_series"


def organization_path(org_id: str) -> str:
    """Path of one organization (GET reads it)."""
    return f"{V1_ORGANIZATIONS_PATH}/{segment(org_id)}"


def api_keys_path(org_id: str) -> str:
    """Path of an organization's API keys (POST creates one)."""
    return f"{organization_path(org_id)}/api-keys"


def v1_template_path(template_id: str) -> str:
    """Path of one v1 catalog Template."""
    return f"{V1_TEMPLATES_PATH}/{segment(template_id)}"


def container_path(container_id: str) -> str:
    """Path of one container (GET reads it, DELETE removes it)."""
    return f"{V1_CONTAINERS_PATH}/{segment(container_id)}"


def container_shell_path(container_id: str) -> str:
    """Path that opens a shell on a container (POST)."""
    return f"{container_path(container_id)}/shell"


def elastic_ip_path(elastic_ip_id: str) -> str:
    """Path of one elastic IP (DELETE releases it)."""
    return f"{V1_ELASTIC_IPS_PATH}/{segment(elastic_ip_id)}"


def elastic_ip_associate_path(elastic_ip_id: str) -> str:
    """Path that associates an elastic IP with an instance (POST)."""
    return f"{elastic_ip_path(elastic_ip_id)}/associate"


def vpc_path(vpc_id: str) -> str:
    """Path of one VPC (DELETE releases the default VPC)."""
    return f"{V1_VPCS_PATH}/{segment(vpc_id)}"


def data_plane_origin(scheme: str, sandbox_key: str, domain: str) -> str:
    """`{scheme}://{sandbox_key}.{domain}`; the domain is used verbatim (it may hold a port)."""
    return f"{scheme}://{sandbox_key}.{domain}"


# The default of ApiRequest.headers: shared, so it must be read-only.
NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class ApiRequest(NamedTuple):
    """One control-plane request, described without any I/O.

    `idempotent` decides whether the retry loop may send it again; `operation` names it in
    logs and errors; `authenticated` is False only for the OAuth code exchange.

    A NamedTuple rather than a frozen attrs class: it is as immutable, and one is built for
    every call, where attrs's frozen `__init__` cost twice as much (measured).
    """

    method: Method
    path: str
    operation: str
    surface: Surface
    idempotent: bool
    params: Sequence[tuple[str, str]] = ()
    json: Any = None
    headers: Mapping[str, str] = NO_HEADERS
    authenticated: bool = True


def v1_request(
    method: Method,
    path: str,
    *,
    operation: str,
    json: Any = None,
    params: Sequence[tuple[str, str]] = (),
    authenticated: bool = True,
) -> ApiRequest:
    """A v1 request. GET and DELETE may be retried; a v1 POST never is (DESIGN section 5):
    a resend could mint a second key, container or shell."""
    return ApiRequest(
        method,
        path,
        operation=operation,
        surface="v1",
        idempotent=method in ("GET", "DELETE"),
        params=params,
        json=json,
        authenticated=authenticated,
    )


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
