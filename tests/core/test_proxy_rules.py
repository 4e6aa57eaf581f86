"""Which proxy each origin goes through (`_core.proxy_rules`): table-driven, no event loop.

The rules are curl's, requests' and httpx's: `https_proxy` for https origins, `http_proxy`
for http ones, the lower-case name first, `no_proxy` for the hosts reached directly, and
`proxy=` for every origin with the environment not read at all.
"""

from __future__ import annotations

import pickle

import pytest

import sandboxkit
from sandboxkit._core.proxy_rules import Proxy, ProxyRoutes, bypassed, parse_proxy, redacted, routes
from sandboxkit._core.retry import is_outage, is_retryable, is_transient

SECRET = "pw-SECRET"


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "expected"),
    [
        ("api.example.com", 443, "", False),
        ("api.example.com", 443, "*", True),
        ("api.example.com", 443, "example.com", True),
        ("api.example.com", 443, ".example.com", True),
        ("api.example.com", 443, "*.example.com", True),
        ("example.com", 443, ".example.com", True),
        ("example.com", 443, "example.com", True),
        ("badexample.com", 443, "example.com", False),
        ("example.com.evil.org", 443, "example.com", False),
        ("API.Example.COM.", 443, "example.com", True),
        ("api.example.com", 443, "other.org, example.com", True),
        ("api.example.com", 443, "other.org example.com", True),
        ("api.example.com", 443, " , ,other.org", False),
        ("api.example.com", 443, "example.com:443", True),
        ("api.example.com", 8443, "example.com:443", False),
        ("localhost", 80, "localhost", True),
        ("sbx-1.localhost", 8080, "localhost", True),
        ("sbx-1.localhost", 8080, "127.0.0.1", False),  # names are never resolved
        ("127.0.0.1", 8080, "127.0.0.1", True),
        ("127.0.0.1", 8080, "localhost", False),
        ("127.0.0.10", 8080, "127.0.0.1", False),
        ("127.0.0.1", 8080, "127.0.0.1:8080", True),
        ("127.0.0.1", 8081, "127.0.0.1:8080", False),
        ("127.0.0.1", 8080, "127.0.0.0/8", True),
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("example.com", 443, "10.0.0.0/8", False),
        ("10.1.2.3", 443, "10.0.0.0/33", False),  # a bad network matches nothing
        ("::1", 443, "::1", True),
        ("[::1]", 443, "::1", True),
        ("::1", 443, "[::1]", True),
        ("::1", 8080, "[::1]:8080", True),
        ("::1", 8081, "[::1]:8080", False),
        ("::1", 443, "0:0:0:0:0:0:0:1", True),
        ("fd00::5", 443, "fd00::/8", True),
        ("sbx-1.sandbox.test", 443, "sandbox.test", True),
    ],
)
def test_no_proxy_entries(host: str, port: int, no_proxy: str, expected: bool) -> None:
    """Each `no_proxy` form: `*`, names (themselves and below), IPs, networks, ports."""
    assert bypassed(host, port, no_proxy) is expected


@pytest.mark.parametrize(
    ("value", "url", "username", "password"),
    [
        ("http://proxy:3128", "http://proxy:3128", None, None),
        ("http://proxy", "http://proxy:80", None, None),
        ("https://proxy", "https://proxy:443", None, None),
        ("HTTP://Proxy.Corp:3128/", "http://proxy.corp:3128", None, None),
        ("http://[::1]:3128", "http://[::1]:3128", None, None),
        ("http://user:pass@proxy:3128", "http://proxy:3128", "user", "pass"),
        ("http://user@proxy:3128", "http://proxy:3128", "user", ""),
        ("http://us%40er:p%40ss%2F%3A@proxy:3128", "http://proxy:3128", "us@er", "p@ss/:"),
        ("  http://proxy:3128\n", "http://proxy:3128", None, None),
    ],
)
def test_proxy_urls(value: str, url: str, username: str | None, password: str | None) -> None:
    """A proxy URL's address and its (percent-decoded) credentials, kept apart."""
    assert parse_proxy(value) == Proxy(url, username, password)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "proxy:3128",
        "socks5://proxy:1080",
        "ftp://proxy",
        "http://",
        "http://:3128",
        "http://proxy:0",
        "http://proxy:70000",
        "http://proxy:port",
        "http://proxy:3128/path",
        "http://proxy:3128?q=1",
        "http://proxy:3128#f",
        "http://pro\nxy:3128",
        "http://pro xy:3128",
        "http://us%3Aer:pw@proxy:3128",
        3128,
        b"http://proxy:3128",
    ],
)
def test_bad_proxy_urls_are_refused(value: object) -> None:
    """Anything but `http(s)://[user[:password]@]host[:port]` is a ValidationError."""
    with pytest.raises(sandboxkit.ValidationError, match="proxy"):
        parse_proxy(value)


@pytest.mark.parametrize(
    "value",
    [
        f"socks5://user:{SECRET}@proxy:1080",
        f"http://user:{SECRET}@proxy:3128/path",
        f"http://user:{SECRET}@proxy:port",
        f"http://user:pw/{SECRET}@proxy:3128",  # an unescaped / cuts the authority short
        f"http://user:pw#{SECRET}@proxy:3128",
        f"http://user:pw?{SECRET}@proxy:3128",
        f"user:{SECRET}@proxy:3128",
        f"http://user:pw\n{SECRET}@proxy:3128",
    ],
)
def test_refusals_never_show_the_password(value: str) -> None:
    """The message of a refused proxy URL shows no part of its credentials."""
    with pytest.raises(sandboxkit.ValidationError) as caught:
        parse_proxy(value)
    assert SECRET not in str(caught.value) and "pw" not in str(caught.value)


def test_redacted_hides_everything_before_the_last_at() -> None:
    """`redacted` keeps the scheme and the address, nothing of the credentials."""
    assert redacted(f"http://user:{SECRET}@proxy:3128") == "http://***@proxy:3128"
    assert redacted(f"http://user:a/b@{SECRET}@proxy:3128/x") == "http://***@proxy:3128/x"
    assert redacted("http://proxy:3128") == "http://proxy:3128"
    assert redacted(f"u:{SECRET}@proxy") == "***@proxy"


def test_reprs_and_pickles_keep_credentials_apart() -> None:
    """`Proxy` and `ProxyRoutes` reprs say credentials exist, never what they are."""
    proxy = parse_proxy(f"http://user:{SECRET}@proxy:3128")
    text = repr(proxy) + repr(ProxyRoutes(everywhere=proxy, https=proxy)) + str(proxy)
    assert SECRET not in text and "user" not in text and "with credentials" in text
    assert pickle.loads(pickle.dumps(proxy)) == proxy


def env(**values: str) -> dict[str, str]:
    return dict(values)


HTTP = "http://127.0.0.1:8080"
HTTPS = "https://sbx-1.sandbox.test:443"


@pytest.mark.parametrize(
    ("environ", "origin", "expected"),
    [
        (env(), HTTPS, None),
        (env(HTTPS_PROXY="http://p:1"), HTTPS, "http://p:1"),
        (env(https_proxy="http://p:1"), HTTPS, "http://p:1"),
        (env(HTTPS_PROXY="http://p:1"), HTTP, None),  # http origins use HTTP_PROXY only
        (env(HTTP_PROXY="http://p:2"), HTTP, "http://p:2"),
        (env(HTTP_PROXY="http://p:2"), HTTPS, None),
        (env(HTTPS_PROXY="http://big:1", https_proxy="http://small:1"), HTTPS, "http://small:1"),
        (env(HTTPS_PROXY="http://big:1", https_proxy=""), HTTPS, None),  # lower-case turns off
        (env(HTTPS_PROXY=""), HTTPS, None),
        (env(HTTPS_PROXY="  "), HTTPS, None),
        (env(HTTPS_PROXY="p:1"), HTTPS, "http://p:1"),  # no scheme: http://, as curl
        (env(HTTPS_PROXY="https://p:1"), HTTPS, "https://p:1"),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="sandbox.test"), HTTPS, None),
        (env(HTTPS_PROXY="http://p:1", no_proxy="sandbox.test"), HTTPS, None),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="sandbox.test", no_proxy=""), HTTPS, "http://p:1"),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="other.test"), HTTPS, "http://p:1"),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="*"), HTTPS, None),
        (env(HTTP_PROXY="http://p:2", NO_PROXY="127.0.0.1"), HTTP, None),
        (env(HTTP_PROXY="http://p:2", NO_PROXY="127.0.0.1:8081"), HTTP, "http://p:2"),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="sandbox.test:443"), HTTPS, None),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY="sandbox.test:8443"), HTTPS, "http://p:1"),
        (env(HTTPS_PROXY="http://p:1"), "https://sbx-1.sandbox.test", "http://p:1"),
        (env(HTTPS_PROXY="http://p:1", NO_PROXY=":443"), "https://h", "http://p:1"),
        # CGI: HTTP_PROXY is the request's `Proxy:` header (httpoxy); http_proxy still counts
        (env(HTTP_PROXY="http://evil:1", REQUEST_METHOD="GET"), HTTP, None),
        (env(http_proxy="http://p:2", REQUEST_METHOD="GET"), HTTP, "http://p:2"),
        (env(ALL_PROXY="http://p:3"), HTTPS, None),  # not read
    ],
)
def test_the_environment_decides_per_origin(
    environ: dict[str, str], origin: str, expected: str | None
) -> None:
    """The environment's proxy for each origin, as curl, requests and httpx pick it."""
    chosen = routes(None, trust_env=True, environ=environ).for_origin(origin)
    assert (chosen.url if chosen else None) == expected


def test_proxy_wins_over_the_environment_and_no_proxy() -> None:
    """`proxy=` is every origin's, whatever the environment says (no_proxy included)."""
    environ = env(HTTPS_PROXY="http://other:1", HTTP_PROXY="http://other:2", NO_PROXY="*")
    chosen = routes("http://mine:3", trust_env=True, environ=environ)
    assert {chosen.for_origin(o) for o in (HTTP, HTTPS)} == {Proxy("http://mine:3")}


def test_trust_env_false_reads_nothing() -> None:
    """Without `trust_env`, no origin has a proxy, and a broken variable is no error."""
    environ = env(HTTPS_PROXY="socks5://x:1", HTTP_PROXY="http://p:2")
    chosen = routes(None, trust_env=False, environ=environ)
    assert chosen.for_origin(HTTP) is None and chosen.for_origin(HTTPS) is None


def test_a_bad_variable_is_named_without_its_credentials() -> None:
    """An unusable proxy variable is a ValidationError naming it and the way out."""
    environ = env(https_proxy=f"socks5://user:{SECRET}@p:1")
    with pytest.raises(sandboxkit.ValidationError, match=r"https_proxy.*trust_env=False") as caught:
        routes(None, trust_env=True, environ=environ)
    assert SECRET not in str(caught.value)


def test_trust_env_must_be_a_bool() -> None:
    """`trust_env="no"` is refused rather than read as true."""
    with pytest.raises(sandboxkit.ValidationError, match="trust_env"):
        routes(None, trust_env="no", environ={})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("status", "retried", "outage"),
    [
        (407, False, False),
        (403, False, False),
        (502, True, True),
        (503, True, True),
        (504, True, False),
    ],
)
def test_a_refused_tunnel_is_retried_only_when_the_host_was_unreachable(
    status: int, retried: bool, outage: bool
) -> None:
    """A ProxyError's status decides, as an APIError's does: 407 and 403 stay so."""
    error = sandboxkit.ProxyError("x", status=status, operation="op")
    assert is_retryable(error, sandboxkit.RetryPolicy()) is retried
    assert is_transient(error) is retried
    assert is_outage(error) is outage
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.status, copy.operation, str(copy)) == (
        sandboxkit.ProxyError,
        status,
        "op",
        "x",
    )
