"""A plain `Client()` reaches a standalone emulator: `*.localhost` is loopback by default, and
`SANDBOXKIT_DATA_PLANE_SCHEME` sets the data plane's scheme."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp.abc import AbstractResolver, ResolveResult

import sandboxkit
from sandboxkit import ClientConfig
from sandboxkit._http.resolver import LoopbackResolver
from sandboxkit.cli._files import data_plane_resolver
from sandboxkit.emulator import Emulator

from ..reliability_support import refused_port

SCHEME_ENV = "SANDBOXKIT_DATA_PLANE_SCHEME"
OPTIONS = {"api_key": "k", "base_url": "http://127.0.0.1:1"}


class RecordingResolver(AbstractResolver):
    """Stands in for a resolver: records each name, answers `address` (a marker by default)."""

    def __init__(self, *_: object, address: str = "192.0.2.7", **__: object) -> None:
        self.address = address
        self.asked: list[tuple[str, int, int]] = []
        self.closed = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append((host, port, family))
        return [
            ResolveResult(
                hostname=host, host=self.address, port=port, family=family, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def default_resolvers(monkeypatch: pytest.MonkeyPatch) -> list[RecordingResolver]:
    """Every aiohttp default resolver made from now on, as a RecordingResolver."""
    made: list[RecordingResolver] = []

    def make(*args: Any, **kwargs: Any) -> RecordingResolver:
        made.append(RecordingResolver(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(aiohttp, "DefaultResolver", make)
    return made


@pytest.mark.parametrize(
    "host", ["x.localhost", "sbx-1f.localhost", "A.B.LocalHost.", "localhost", "LOCALHOST."]
)
async def test_localhost_names_are_loopback_without_a_lookup(
    host: str, default_resolvers: list[RecordingResolver]
) -> None:
    """`localhost` and every name under it are 127.0.0.1 (::1 for IPv6 only), as in curl;
    nobody else is asked."""
    resolver = LoopbackResolver()
    for family in (socket.AF_INET, socket.AF_UNSPEC):
        (result,) = await resolver.resolve(host, 8080, family)
        assert (result["host"], result["port"], result["family"]) == (
            "127.0.0.1",
            8080,
            socket.AF_INET,
        )
        assert result["hostname"] == host
    (v6,) = await resolver.resolve(host, 443, socket.AF_INET6)
    assert (v6["host"], v6["port"], v6["family"]) == ("::1", 443, socket.AF_INET6)
    await resolver.close()
    assert default_resolvers == []


@pytest.mark.parametrize(
    "host", ["example.invalid", "localhost.example.com", "notlocalhost", "localhost-1", "127.0.0.1"]
)
async def test_other_names_go_to_the_default_resolver_unchanged(
    host: str, default_resolvers: list[RecordingResolver]
) -> None:
    """Any other name is asked of aiohttp's default resolver, with the same port and family,
    and its answer is returned as it is; closing closes that resolver."""
    resolver = LoopbackResolver()
    answer = await resolver.resolve(host, 80, socket.AF_UNSPEC)
    [default] = default_resolvers
    assert default.asked == [(host, 80, socket.AF_UNSPEC)]
    assert [r["host"] for r in answer] == ["192.0.2.7"]
    await resolver.close()
    assert default.closed


async def test_the_clis_resolver_adds_the_embedded_emulators_domain(
    default_resolvers: list[RecordingResolver],
) -> None:
    """The CLI's data-plane resolver is the same class with one more domain: the embedded
    emulator's `*.sandbox.test` and `*.localhost` are loopback, any other name goes to the
    default resolver as it is (unlike `EmulatorResolver`, which refuses it)."""
    resolver = data_plane_resolver()
    for host in ["sbx-1.sandbox.test", "SANDBOX.TEST.", "x.localhost"]:
        (result,) = await resolver.resolve(host, 80)
        assert (result["host"], result["port"]) == ("127.0.0.1", 80)
    assert default_resolvers == []
    assert [r["host"] for r in await resolver.resolve("sandbox.test.example", 80)] == ["192.0.2.7"]
    [default] = default_resolvers
    assert default.asked == [("sandbox.test.example", 80, socket.AF_INET)]
    await resolver.close()
    assert default.closed


async def test_example_invalid_is_left_to_the_system() -> None:
    """With the real default resolver, a name the system does not know still fails as the
    system says (no loopback answer is invented for it)."""
    resolver = LoopbackResolver()
    try:
        with pytest.raises(OSError):
            await resolver.resolve("example.invalid", 80)
    finally:
        await resolver.close()


async def test_default_client_reaches_localhost_sandbox_hosts(tmp_path: Path) -> None:
    """A Client given no resolver moves bytes to and from `{key}.localhost:PORT`."""
    async with Emulator(domain="localhost") as emu:
        assert emu.domain.startswith("localhost:")
        body = await emu.create_sandbox()
        async with sandboxkit.Client(
            api_key=emu.api_key, base_url=emu.base_url, data_plane_scheme="http"
        ) as client:
            sbx = client.sandbox_from_response(body)
            assert sbx.origin.startswith("http://sbx-") and ".localhost:" in sbx.origin
            await sbx.files.upload("/home/user/f.bin", b"\x00\x01" * 5000)
            await sbx.files.download("/home/user/f.bin", tmp_path / "f.bin")
        assert (tmp_path / "f.bin").read_bytes() == b"\x00\x01" * 5000
        assert [r.status for r in emu.journal_for("files.upload")] == [200]


async def test_client_closes_the_default_resolver_it_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Client's own resolver asks aiohttp's default for other names, and `aclose()`
    closes it (a resolver the caller passed is left open: see the next test)."""
    made: list[RecordingResolver] = []

    def make() -> RecordingResolver:
        made.append(RecordingResolver(address="127.0.0.1"))
        return made[-1]

    monkeypatch.setattr(aiohttp, "DefaultResolver", make)
    port = refused_port()
    client = sandboxkit.Client(
        api_key="k", base_url=f"http://console.example:{port}", retry=sandboxkit.RetryPolicy.none()
    )
    with pytest.raises(sandboxkit.APIConnectionError):
        await client.request("GET", "/api/v2/products")
    [default] = made
    assert default.asked[0][:2] == ("console.example", port) and not default.closed
    await client.aclose()
    assert default.closed


async def test_a_callers_resolver_is_used_as_given() -> None:
    """`resolver=` replaces the default entirely: even a localhost name goes to it."""
    mine = RecordingResolver(address="127.0.0.1")
    port = refused_port()
    async with sandboxkit.Client(
        **OPTIONS, data_plane_scheme="http", resolver=mine, retry=sandboxkit.RetryPolicy.none()
    ) as client:
        sbx = client.sandbox(sandbox_key="k", domain=f"localhost:{port}", access_token="t")
        with pytest.raises(sandboxkit.APIConnectionError):
            await sbx.files.read_bytes("/f")
    assert mine.asked and mine.asked[0][:2] == ("k.localhost", port)
    assert not mine.closed  # the caller's to close


async def test_tls_to_localhost_sandbox_hosts(tmp_path: Path) -> None:
    """Over TLS, each `{key}.localhost` host has a certificate naming it (a wildcard over
    one label is refused by clients): a default Client trusting the CA verifies it."""
    async with Emulator(domain="localhost", ca=trustme.CA()) as emu:
        bodies = [await emu.create_sandbox() for _ in range(2)]
        async with sandboxkit.Client(
            api_key=emu.api_key, base_url=emu.base_url, ssl=emu.ssl_context
        ) as client:
            for n, body in enumerate(bodies):
                sbx = client.sandbox_from_response(body)
                assert sbx.origin.startswith("https://")
                await sbx.files.upload("/tmp/t", f"secure {n}".encode())
                assert await sbx.files.read_bytes("/tmp/t") == f"secure {n}".encode()


def test_data_plane_scheme_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without `data_plane_scheme=`, `SANDBOXKIT_DATA_PLANE_SCHEME` decides (any case,
    spaces ignored); unset or empty means https; an argument wins."""
    monkeypatch.setenv(SCHEME_ENV, "http")
    client = sandboxkit.Client(**OPTIONS)
    assert client.data_plane_scheme == "http"
    sbx = client.sandbox(sandbox_key="k", domain="localhost:1", access_token="t")
    assert sbx.origin == "http://k.localhost:1"
    assert sandboxkit.Client(**OPTIONS, data_plane_scheme="https").data_plane_scheme == "https"
    monkeypatch.setenv(SCHEME_ENV, " HTTPS ")
    assert sandboxkit.Client(**OPTIONS).data_plane_scheme == "https"
    monkeypatch.setenv(SCHEME_ENV, "")
    assert sandboxkit.Client(**OPTIONS).data_plane_scheme == "https"
    monkeypatch.delenv(SCHEME_ENV)
    assert sandboxkit.Client(**OPTIONS).data_plane_scheme == "https"


def test_a_bad_scheme_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value other than http or https fails at construction, naming the variable; an
    explicit argument is still checked on its own."""
    monkeypatch.setenv(SCHEME_ENV, "ftp")
    with pytest.raises(sandboxkit.ValidationError, match=SCHEME_ENV):
        sandboxkit.Client(**OPTIONS)
    with pytest.raises(sandboxkit.ValidationError, match=SCHEME_ENV):
        ClientConfig.from_env(**OPTIONS)
    assert sandboxkit.Client(**OPTIONS, data_plane_scheme="http").data_plane_scheme == "http"
    monkeypatch.delenv(SCHEME_ENV)
    with pytest.raises(sandboxkit.ValidationError, match="data_plane_scheme"):
        sandboxkit.Client(**OPTIONS, data_plane_scheme="HTTP")


def test_client_config_reads_the_scheme_now_or_where_the_client_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`ClientConfig.from_env` captures the scheme on the driver; a plain config leaves it
    None, read where `Client.from_config` runs."""
    monkeypatch.setenv(SCHEME_ENV, "http")
    assert ClientConfig.from_env(**OPTIONS).data_plane_scheme == "http"
    assert ClientConfig.from_env(**OPTIONS, data_plane_scheme="https").data_plane_scheme == "https"
    config = ClientConfig(**OPTIONS)
    assert config.data_plane_scheme is None
    assert sandboxkit.Client.from_config(config).data_plane_scheme == "http"
    monkeypatch.delenv(SCHEME_ENV)
    assert ClientConfig.from_env(**OPTIONS).data_plane_scheme is None
    assert sandboxkit.Client.from_config(config).data_plane_scheme == "https"
