"""Every stated input rule raises ValidationError before any request is sent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import sandboxkit
from sandboxkit import CustomResources, PresetResources
from sandboxkit._core import validation as check

from ..conftest import ScriptServer

RES = CustomResources(cpu_count=2, memory_mb=2048, disk_size_mb=10240)
Call = Callable[[sandboxkit.Client], Awaitable[Any]]


async def _drain(iterable: Any) -> None:
    async for _ in iterable:
        pass


BAD_CALLS: dict[str, Call] = {
    "name empty": lambda c: c.templates.create(name="", resources=RES),
    "name too long": lambda c: c.templates.create(name="a" * 65, resources=RES),
    "name pattern": lambda c: c.templates.create(name="bad name!", resources=RES),
    "name non-ascii": lambda c: c.templates.create(name="naïve", resources=RES),
    "description too long": lambda c: c.templates.create(
        name="n", resources=RES, description="d" * 257
    ),
    "cpu over 16": lambda c: c.templates.create(
        name="n", resources=CustomResources(17, 1024, 1024)
    ),
    "memory over 65536": lambda c: c.templates.create(
        name="n", resources=CustomResources(2, 65537, 1024)
    ),
    "disk over 65536": lambda c: c.templates.create(
        name="n", resources=CustomResources(2, 1024, 65537)
    ),
    "cpu zero": lambda c: c.templates.create(name="n", resources=CustomResources(0, 1024, 1024)),
    "resources as dict": lambda c: c.templates.create(name="n", resources={"cpu_count": 2}),
    "preset blank": lambda c: c.templates.create(name="n", resources=PresetResources(" ")),
    "key empty": lambda c: c.templates.create(name="n", resources=RES, idempotency_key=""),
    "key with space": lambda c: c.templates.create(name="n", resources=RES, idempotency_key="a b"),
    "key too long": lambda c: c.templates.create(name="n", resources=RES, idempotency_key="k" * 65),
    "key non-ascii": lambda c: c.templates.create(name="n", resources=RES, idempotency_key="ké"),
    "labels not strings": lambda c: c.templates.create(name="n", resources=RES, labels={"a": 1}),
    "page_size 0": lambda c: _drain(c.templates.builds("t", page_size=0)),
    "page_size 101": lambda c: _drain(c.templates.builds("t", page_size=101)),
    "log limit 0": lambda c: _drain(c.templates.build_logs("t", "b", limit=0)),
    "log limit 101": lambda c: _drain(c.templates.build_logs("t", "b", limit=101)),
    "log offset -1": lambda c: _drain(c.templates.build_logs("t", "b", offset=-1)),
    "log level": lambda c: _drain(c.templates.build_logs("t", "b", level="fatal")),
    "empty template id": lambda c: _drain(c.templates.builds("")),
    "start empty build id": lambda c: c.templates.start_build("t", ""),
    "request absolute url": lambda c: c.request("GET", "http://evil.example/api/v2/x"),
    "request bad method": lambda c: c.request("TRACE", "/api/v2/x"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
async def test_bad_input_raises_before_any_request(
    case: str, script_server: ScriptServer, script_client: sandboxkit.Client
) -> None:
    """Each bad input raises ValidationError (a ValueError) and the server sees nothing."""
    with pytest.raises(sandboxkit.ValidationError) as info:
        await BAD_CALLS[case](script_client)
    assert isinstance(info.value, ValueError)
    assert script_server.seen == []


@pytest.mark.parametrize("page", [0, -1, 1.5, "1", True])
def test_page_rule(page: Any) -> None:
    """page must be an integer >= 1."""
    with pytest.raises(sandboxkit.ValidationError):
        check.check_page(page)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("a", True),
        ("A-z_0", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("", False),
        ("a.b", False),
        ("a b", False),
    ],
)
def test_template_name_rule(value: str, ok: bool) -> None:
    """Names are 1-64 of A-Za-z0-9_-."""
    if ok:
        assert check.check_template_name(value) == value
    else:
        with pytest.raises(sandboxkit.ValidationError):
            check.check_template_name(value)


@pytest.mark.parametrize(
    ("value", "ok"),
    [("!", True), ("~" * 64, True), ("a\tb", False), ("\x7f", False), ("é", False)],
)
def test_idempotency_key_rule(value: str, ok: bool) -> None:
    """Keys are 1-64 printable ASCII characters with no whitespace."""
    if ok:
        assert check.check_idempotency_key(value) == value
    else:
        with pytest.raises(sandboxkit.ValidationError):
            check.check_idempotency_key(value)


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        ("/home/user/a b#c&d?e%f", True),
        ("/home/ü/x", True),
        ("/", True),
        ("", False),
        ("relative/x", False),
        ("/home/../etc", False),
        ("/home/./x", False),
        ("/home/..", False),
        ("/a\x00b", False),
    ],
)
def test_remote_path_rule(path: str, ok: bool) -> None:
    """Remote paths are non-empty, absolute, free of . and .. segments and NUL."""
    if ok:
        assert check.check_remote_path(path) == path
    else:
        with pytest.raises(sandboxkit.ValidationError):
            check.check_remote_path(path)


def test_client_needs_key_and_url(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without argument or env, the client raises a ValidationError naming the env var."""
    monkeypatch.delenv("SANDBOXKIT_API_KEY", raising=False)
    monkeypatch.delenv("SANDBOXKIT_BASE_URL", raising=False)
    with pytest.raises(sandboxkit.ValidationError, match="SANDBOXKIT_BASE_URL"):
        sandboxkit.Client(api_key="k")
    with pytest.raises(sandboxkit.ValidationError, match="SANDBOXKIT_API_KEY"):
        sandboxkit.Client(base_url="http://127.0.0.1:1")
    monkeypatch.setenv("SANDBOXKIT_API_KEY", "env-key")
    monkeypatch.setenv("SANDBOXKIT_BASE_URL", "http://127.0.0.1:1/")
    client = sandboxkit.Client()
    assert client.base_url == "http://127.0.0.1:1"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base_url": "ftp://x"},
        {"base_url": "127.0.0.1:80"},
        {"base_url": "http://h/?q=1"},
        {"data_plane_scheme": "ws"},
        {"ssl": "yes"},
        {"api_key": "a\nb"},
    ],
)
def test_client_rejects_bad_options(kwargs: dict[str, Any]) -> None:
    """Bad client options fail at construction with ValidationError."""
    options = {"api_key": "k", "base_url": "http://127.0.0.1:1", **kwargs}
    with pytest.raises(sandboxkit.ValidationError):
        sandboxkit.Client(**options)


@pytest.mark.parametrize("username", ["", "a\nb", "a\x00", "\udc80", 5])
def test_username_rule(username: Any) -> None:
    """A username is a non-empty single line of valid Unicode."""
    with pytest.raises(sandboxkit.ValidationError):
        check.check_username(username)


BAD_OPTIONS: dict[str, Callable[[], object]] = {
    "timeout connect 0": lambda: sandboxkit.Timeout(connect=0),
    "timeout read negative": lambda: sandboxkit.Timeout(read=-1.0),
    "timeout total nan": lambda: sandboxkit.Timeout(total=float("nan")),
    "timeout total text": lambda: sandboxkit.Timeout(total="5"),  # type: ignore[arg-type]
    "timeout read bool": lambda: sandboxkit.Timeout(read=True),
    "limits per host 0": lambda: sandboxkit.Limits(per_host_connections=0),
    "limits sockets float": lambda: sandboxkit.Limits(max_sandbox_connections=2.5),  # type: ignore[arg-type]
    "limits sockets below one host": lambda: sandboxkit.Limits(
        per_host_connections=8, max_sandbox_connections=7
    ),
    "limits control bool": lambda: sandboxkit.Limits(control_plane_connections=True),
    "limits idle 0": lambda: sandboxkit.Limits(host_idle_seconds=0),
    "retry attempts 0": lambda: sandboxkit.RetryPolicy(max_attempts=0),
    "retry backoff negative": lambda: sandboxkit.RetryPolicy(initial_backoff=-0.1),
    "retry max backoff none": lambda: sandboxkit.RetryPolicy(max_backoff=None),  # type: ignore[arg-type]
    "retry after negative": lambda: sandboxkit.RetryPolicy(max_retry_after=-1),
}


@pytest.mark.parametrize("make", BAD_OPTIONS.values(), ids=BAD_OPTIONS.keys())
def test_option_values_refuse_bad_input_with_validation_error(make: Callable[[], object]) -> None:
    """Timeout, Limits and RetryPolicy raise sandboxkit's ValidationError naming the field."""
    with pytest.raises(sandboxkit.ValidationError, match=r"^\w+=.*: must be "):
        make()


def test_option_edges_are_accepted() -> None:
    """Zero backoff, None timeouts and a one-attempt policy are valid values."""
    assert sandboxkit.RetryPolicy(max_attempts=1, initial_backoff=0, max_backoff=0).max_attempts
    assert sandboxkit.Timeout(connect=None, read=None, total=0.5).total == 0.5
    assert sandboxkit.Limits(per_host_connections=1, host_idle_seconds=0.1).per_host_connections
    assert sandboxkit.Limits(per_host_connections=4, max_sandbox_connections=4)
