"""Pure protocol facts of what we send: paths, header names, query strings, request recipes.

Nothing here does I/O or awaits (gidgethub's sans-I/O core); `transport.py` carries these
descriptions over aiohttp and the resources build them. What the answers mean is `answers`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Literal, NamedTuple
from urllib.parse import quote

from ..errors import Surface
from .options import Timeout

__all__ = [
    "ACCEPT_ENCODING",
    "ACCEPT_RANGES",
    "ACCESS_TOKEN",
    "AUTHORIZATION",
    "CONTENT_ENCODING",
    "CONTENT_RANGE",
    "DATE",
    "ETAG",
    "IDEMPOTENCY_KEY",
    "IDEMPOTENCY_REPLAYED",
    "IDEMPOTENT_METHODS",
    "IF_RANGE",
    "IMAGE_NAME_FILTER",
    "IMAGE_OS_SERIES_FILTER",
    "LAST_MODIFIED",
    "NO_HEADERS",
    "OUTAGE_STATUSES",
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
    "DataRequest",
    "api_keys_path",
    "build_logs_path",
    "build_path",
    "builds_path",
    "container_path",
    "container_shell_path",
    "data_plane_origin",
    "data_request",
    "elastic_ip_associate_path",
    "elastic_ip_path",
    "is_idempotent",
    "organization_path",
    "query_string",
    "range_headers",
    "request_target",
    "segment",
    "v1_request",
    "v1_template_path",
    "v2_request",
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
# The validators of a file's version (RFC 9110 8.8) and the precondition that carries one
# with a Range (13.1.5); Date tells whether a Last-Modified is strong enough for it (8.8.2.2).
ETAG = "ETag"
LAST_MODIFIED = "Last-Modified"
DATE = "Date"
IF_RANGE = "If-Range"

# 500 is deliberately absent: docs/design.md section 5 surfaces it at once.
RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})
# What a host that is down answers through the gateway in front of it: counted by its
# circuit (`retry.Circuit`) like a refused connect. 504 is a slow answer, not a dead host.
OUTAGE_STATUSES = frozenset({502, 503})

V2_PREFIX = "/api/v2"
V1_PREFIX = "/api/v1"
FILES_PATH = "/files"
TEMPLATES_PATH = f"{V2_PREFIX}/templates"

Method = Literal["GET", "POST", "DELETE", "PUT", "PATCH", "HEAD"]


# RFC 3986 "unreserved": characters no part of a URL ever needs quoted.
_UNRESERVED = re.compile(r"[A-Za-z0-9._~-]*")


# Cached: a batch sends the same few paths and ids thousands of times, and a path (its `/`
# quoted) costs a `quote()` of ~4 us, more than the rest of a request's own code.
@functools.lru_cache(maxsize=4096)
def segment(value: str) -> str:
    """Quote one path segment whole, `/`, `&`, `=`, `#` included, so an id can never add
    segments, parameters or a fragment."""
    if _UNRESERVED.fullmatch(value):
        return value  # the usual id: nothing to quote, and the check is ~10x cheaper than quote()
    return quote(value, safe="")


# What a query part may carry unquoted (RFC 3986 `query` less the `&`, `=`, `+`, `;` that
# parsers split or decode on, and `#`): exactly what yarl leaves as is when it requotes a
# query, so a target written here goes out the same by aiohttp's path (which requotes it) or
# the lean one (`connections.Route`, which sends it as written).
_QUERY_SAFE = "!$'()*,/:?@"


_QUERY_PLAIN = re.compile(r"[A-Za-z0-9._~!$'()*,/:?@-]*")  # unreserved and _QUERY_SAFE


def query_part(value: str) -> str:
    """Quote one query name or value whole: `&`, `=`, `+`, `#` and `%` included, so a value
    can never add parameters or a fragment."""
    if _QUERY_PLAIN.fullmatch(value):
        return value  # the usual path: nothing to quote, ~10x cheaper than quote()
    return quote(value, safe=_QUERY_SAFE)


def query_string(params: Sequence[tuple[str, str]]) -> str:
    """`name=value&...` for a URL, each name and value quoted whole by `query_part()`."""
    return "&".join([f"{query_part(name)}={query_part(value)}" for name, value in params])


def request_target(path: str, params: Sequence[tuple[str, str]] | str = ()) -> str:
    """`path?query` as a request line carries it; `params` may be a query already written."""
    query = params if isinstance(params, str) else query_string(params)
    return f"{path}?{query}" if query else path


def range_headers(
    start: int, end: int | None = None, if_range: str | None = None
) -> dict[str, str]:
    """The headers asking for bytes `start` to `end - 1` (to the file's end when None). With
    `if_range` (a strong validator of the version whose bytes are held), a server whose file
    is no longer that version answers the whole file (200) instead of the range."""
    headers = {RANGE: f"bytes={start}-{'' if end is None else end - 1}"}
    if if_range is not None:
        headers[IF_RANGE] = if_range
    return headers


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


# docs/design.md section 5, the one rule: these methods may be sent again. A POST may only where its
# operation makes a resend harmless, and says so (`keyed`): templates.create's Idempotency-Key,
# an upload that overwrites with the same bytes. Any other POST could act twice (mint a second
# key, container or shell, start a build twice).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE"})


def is_idempotent(method: str, *, keyed: bool = False) -> bool:
    """Whether a request may be retried: its method allows it, or the operation made it safe."""
    return keyed or method.upper() in IDEMPOTENT_METHODS


def v2_request(
    method: Method,
    path: str,
    *,
    operation: str,
    params: Sequence[tuple[str, str]] = (),
    json: Any = None,
    headers: Mapping[str, str] = NO_HEADERS,
    keyed: bool = False,
) -> ApiRequest:
    """A v2 control-plane request, retried as `is_idempotent` says."""
    return ApiRequest(
        method,
        path,
        operation=operation,
        surface="v2",
        idempotent=is_idempotent(method, keyed=keyed),
        params=params,
        json=json,
        headers=headers,
    )


def v1_request(
    method: Method,
    path: str,
    *,
    operation: str,
    json: Any = None,
    params: Sequence[tuple[str, str]] = (),
    authenticated: bool = True,
) -> ApiRequest:
    """A v1 request, retried as `is_idempotent` says: a v1 POST never is."""
    return ApiRequest(
        method,
        path,
        operation=operation,
        surface="v1",
        idempotent=is_idempotent(method),
        params=params,
        json=json,
        authenticated=authenticated,
    )


class DataRequest(NamedTuple):
    """One data-plane request, described without any I/O: built once by the engine that
    sends it (`data_request`) and passed whole down `DataPlane.open` -> `Transport.open` ->
    `HostRequest`, which add only what belongs to the host: its token, on its own pool.

    A NamedTuple, as `ApiRequest`: one is built for every request of every transfer.
    """

    method: str
    target: str  # the path and query as the request line carries them (`request_target`)
    operation: str
    timeout: Timeout  # this attempt's limits
    headers: Mapping[str, str] | None = None  # the request's own (None: none)
    data: Any = None  # a body (an upload's multipart writer)


def data_request(
    method: str,
    target: str,
    operation: str,
    timeout: Timeout,
    *,
    start: int | None = None,
    end: int | None = None,
    if_range: str | None = None,
    data: Any = None,
) -> DataRequest:
    """A data-plane request, its headers written here and nowhere else: with `start`, the
    `Range` of bytes `start` to `end - 1` (`range_headers`), and `If-Range` with `if_range`.
    The headers every request to a host carries (`Accept-Encoding: identity`, the token)
    are its pool's."""
    headers = None if start is None else range_headers(start, end, if_range)
    return DataRequest(method, target, operation, timeout, headers, data)
