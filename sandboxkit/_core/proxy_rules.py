"""Which proxy, if any, each origin's requests go through: `proxy=`, or the environment.

Pure: the Client reads `proxy=`, `trust_env=` and (with `trust_env`) the environment once,
when it is built, into a `ProxyRoutes`; the transport asks it once per session, and each
session serves one origin (the console, or one sandbox host), so this is per origin.

The environment is read as curl, requests and httpx read it: `https_proxy` for https
origins, `http_proxy` for http ones (the lower-case name wins over the upper-case one, and an
empty lower-case value turns the variable off), a value without a scheme is `http://`, and
`no_proxy` lists the hosts reached directly. `HTTP_PROXY` in capitals is ignored when
`REQUEST_METHOD` is set: under CGI it is the client's `Proxy:` header (httpoxy). `.netrc` is
never read: proxy credentials come only from the proxy URL.

Credentials in a proxy URL never appear in a repr or a message of ours: `Proxy` keeps them
apart from its URL, and every message shows the URL through `redacted`.
"""

from __future__ import annotations

import base64
import ipaddress
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import attrs

from ..errors import ValidationError

__all__ = [
    "PROXY_AUTHORIZATION",
    "Proxy",
    "ProxyRoutes",
    "bypassed",
    "parse_proxy",
    "redacted",
    "routes",
]

PROXY_AUTHORIZATION = "Proxy-Authorization"

_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def redacted(url: str) -> str:
    """`url` with everything between its scheme and its last `@` (a user name and password)
    replaced by `***`, for messages and reprs. The last `@`, not the authority's: a password
    may hold a `/`, `?` or `#` that no parser would take for part of it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    return f"{scheme}{sep}{rest}"


@attrs.frozen(repr=False)
class Proxy:
    """One proxy: its URL without credentials, and the credentials apart (or None).

    Attributes:
        url: `scheme://host:port`, what aiohttp's `proxy=` is given.
        username, password: for the proxy's Basic authentication, percent-decoded.
    """

    url: str
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        credentials = ", with credentials" if self.username is not None else ""
        return f"Proxy({self.url!r}{credentials})"

    @property
    def authorization(self) -> str | None:
        """The `Proxy-Authorization` value (Basic, UTF-8), or None without credentials."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def _fail(source: str, value: str, why: str) -> ValidationError:
    return ValidationError(f"{source}={redacted(value)!r}: {why}")


def _port(parts: SplitResult) -> int | None:
    try:
        return parts.port
    except ValueError:
        return -1


def parse_proxy(value: object, *, source: str = "proxy") -> Proxy:
    """The `Proxy` an `http://[user:password@]host[:port]` (or https) URL names.

    Args:
        value: the URL.
        source: where it came from (`proxy`, `HTTPS_PROXY`...), for the message.

    Raises:
        ValidationError: not a string, another scheme, no host, a bad port, or a path,
            query or fragment; the message shows the URL without its credentials.
    """
    if not isinstance(value, str):
        raise ValidationError(f"{source} must be a URL string such as 'http://proxy:3128'")
    text = value.strip()
    if any(ch in text for ch in "\r\n\x00\t "):
        raise ValidationError(f"{source} must not contain whitespace or control characters")
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise _fail(source, text, "must be an http:// or https:// proxy URL")
    if not parts.hostname:
        raise _fail(source, text, "has no host")
    port = _port(parts)
    if port is not None and not 0 < port < 65536:
        raise _fail(source, text, "has an invalid port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise _fail(
            source,
            text,
            "must not carry a path, query or fragment (percent-encode a / ? # or @ in the "
            "user name or password)",
        )
    host = parts.hostname
    if ":" in host:
        host = f"[{host}]"
    url = f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"
    if parts.username is None:
        return Proxy(url)
    username = unquote(parts.username)
    if ":" in username:  # Basic authentication cannot carry it (RFC 7617)
        raise _fail(source, text, "has a user name with a ':' in it")
    return Proxy(url, username, unquote(parts.password or ""))


def _split_entry(entry: str) -> tuple[str, int | None]:
    """A `no_proxy` entry's host and port (None: any port)."""
    if entry.startswith("["):  # [v6] or [v6]:port
        host, _, rest = entry[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, ""
    return host, int(port) if port.isdigit() else None


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _matches(entry: str, host: str, address: IPAddress | None, port: int) -> bool:
    if "/" in entry:  # a network: 10.0.0.0/8, fd00::/8
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            return False
        return address is not None and address in network
    name, wanted_port = _split_entry(entry)
    if wanted_port is not None and wanted_port != port:
        return False
    entry_address = _ip(name)
    if entry_address is not None:
        return address == entry_address
    name = name.lower().removeprefix("*").lstrip(".").rstrip(".")
    return bool(name) and (host == name or host.endswith("." + name))


def bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether `no_proxy` says `host:port` is reached directly, not through the proxy.

    Entries are separated by commas (or spaces): `*` (every host); a name, which matches
    itself and every name under it (`example.com` and `.example.com` both match
    `example.com` and `api.example.com`; `localhost` matches `x.localhost`); an IP address,
    which matches that address only; a network (`10.0.0.0/8`); and any of these with
    `:port`, which limits it to that port. Names are never resolved: `127.0.0.1` does not
    match `localhost`.
    """
    name = host.lower().strip("[]").rstrip(".")
    address = _ip(name)
    for entry in no_proxy.replace(",", " ").split():
        if entry == "*" or _matches(entry, name, address, port):
            return True
    return False


@attrs.frozen(repr=False)
class ProxyRoutes:
    """The proxy for each origin: one for every origin (`proxy=`), or the environment's.

    Attributes:
        everywhere: the `proxy=` one, used for every origin.
        http, https: the environment's, by the origin's scheme.
        no_proxy: the environment's `no_proxy` list.
    """

    everywhere: Proxy | None = None
    http: Proxy | None = None
    https: Proxy | None = None
    no_proxy: str = ""

    def __repr__(self) -> str:
        return (
            f"ProxyRoutes(everywhere={self.everywhere!r}, http={self.http!r}, "
            f"https={self.https!r}, no_proxy={self.no_proxy!r})"
        )

    def tunnel_headers(self) -> dict[str, str] | None:
        """The extra headers of each CONNECT: the credentials of the proxy that every
        proxied https origin goes through (there is one), or None."""
        proxy = self.everywhere or self.https
        value = proxy.authorization if proxy is not None else None
        return None if value is None else {PROXY_AUTHORIZATION: value}

    def session_options(self, origin: str, headers: dict[str, str]) -> dict[str, Any]:
        """A session's `headers=` and `proxy=` for its one origin, so the proxy is chosen
        once, when it is made (aiohttp's `trust_env` stays off: it would read `.netrc`).
        Proxy credentials ride on each request to an http origin (the proxy reads them),
        and only on the CONNECT for an https one (`tunnel_headers`, per request: a
        session's headers would go through the tunnel)."""
        proxy = self.for_origin(origin)
        if proxy is None:
            return {"headers": headers}
        if proxy.authorization is not None and origin[:5].lower() == "http:":
            headers = {**headers, PROXY_AUTHORIZATION: proxy.authorization}
        return {"headers": headers, "proxy": proxy.url}

    def for_origin(self, origin: str) -> Proxy | None:
        """The proxy for requests to `origin` (`scheme://host[:port]`), or None (direct)."""
        if self.everywhere is not None:
            return self.everywhere
        if self.http is None and self.https is None:
            return None  # the usual: no proxy set (asked for each new host's pool)
        parts = urlsplit(origin)
        scheme = parts.scheme.lower()
        proxy = self.https if scheme == "https" else self.http if scheme == "http" else None
        if proxy is None or not parts.hostname:
            return None
        port = _port(parts) or _DEFAULT_PORTS[scheme]
        return None if bypassed(parts.hostname, port, self.no_proxy) else proxy


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """A variable's value by its lower-case name first, then its upper-case one, with the
    name it was found under; None when unset or empty."""
    lower = environ.get(name)
    if lower is not None:
        return (name, lower.strip()) if lower.strip() else None
    upper = name.upper()
    if upper == "HTTP_PROXY" and "REQUEST_METHOD" in environ:
        return None  # CGI: the request's own `Proxy:` header (httpoxy, CVE-2016-5385)
    value = environ.get(upper, "").strip()
    return (upper, value) if value else None


def _from_env(environ: Mapping[str, str], name: str) -> Proxy | None:
    found = _variable(environ, name)
    if found is None:
        return None
    source, value = found
    if "://" not in value:
        value = "http://" + value  # `proxy:3128`, as curl, requests and httpx take it
    try:
        return parse_proxy(value, source=source)
    except ValidationError as exc:
        raise ValidationError(
            f"{exc} (set trust_env=False to ignore the environment's proxies)"
        ) from None


def routes(
    proxy: str | None, *, trust_env: bool, environ: Mapping[str, str] | None = None
) -> ProxyRoutes:
    """The proxy routes of a Client: `proxy=` for every origin (the environment is then not
    read at all), else with `trust_env` the environment's, else none.

    Raises:
        ValidationError: `proxy` or a proxy variable is not a usable proxy URL.
    """
    if not isinstance(trust_env, bool):
        raise ValidationError("trust_env must be a bool")
    if proxy is not None:
        return ProxyRoutes(everywhere=parse_proxy(proxy))
    if not trust_env:
        return ProxyRoutes()
    env = os.environ if environ is None else environ
    no_proxy = _variable(env, "no_proxy")
    return ProxyRoutes(
        http=_from_env(env, "http_proxy"),
        https=_from_env(env, "https_proxy"),
        no_proxy=no_proxy[1] if no_proxy else "",
    )
