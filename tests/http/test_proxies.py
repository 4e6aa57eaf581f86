"""Both planes through a real forward proxy: proxy.py in a process of its own (proxy_support).

proxy.py records each request it reads (its CONNECTs for https); a `WireTap` in front of it
keeps every byte it was sent, so what the proxy could read is asserted, not assumed. The
emulator's names resolve at the proxy (its plugin), as a real proxy resolves real names.
Every test sets the proxy variables it needs and clears the others (`clean_proxy_env`).
"""

from __future__ import annotations

import base64
import logging
import pickle
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme

import sandboxkit
from sandboxkit.emulator import Emulator, EmulatorResolver

from ..proxy_support import PROXY_VARIABLES, ProxyServer, WireTap
from ..reliability_support import refused_port
from .test_security import exception_text, secrets_in

LIMIT = 20
PAYLOAD = b"payload through the proxy " * 200
USER = "proxy-USER-7"
PASSWORD = "proxy-PW-SECRET-9"


def credential_forms(user: str, password: str) -> list[str]:
    """Every form proxy credentials could leak in: as given, and as the header carries them."""
    pair = f"{user}:{password}"
    return [user, password, pair, base64.b64encode(pair.encode()).decode()]


CREDENTIALS = credential_forms(USER, PASSWORD)


@pytest.fixture
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No proxy variable in either case (nor REQUEST_METHOD); the test sets what it needs."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


@pytest.fixture
def proxy_server(tmp_path: Path) -> Iterator[ProxyServer]:
    """proxy.py without authentication, stopped after the test."""
    folder = tmp_path / "open-proxy"
    folder.mkdir()
    with ProxyServer(folder) as running:
        yield running


@pytest.fixture
def auth_proxy_server(tmp_path: Path) -> Iterator[ProxyServer]:
    """proxy.py demanding Basic credentials USER:PASSWORD (407 otherwise)."""
    folder = tmp_path / "auth-proxy"
    folder.mkdir()
    with ProxyServer(folder, basic_auth=f"{USER}:{PASSWORD}") as running:
        yield running


def with_credentials(url: str, user: str = USER, password: str = PASSWORD) -> str:
    return url.replace("://", f"://{user}:{password}@", 1)


class Exercised:
    """A sandbox with a file, and the hosts a run over both planes reaches."""

    def __init__(self, emu: Emulator, body: dict[str, Any]) -> None:
        data = body["data"]
        self.body = body
        self.token: str = data["sandbox_access_token"]
        self.console = emu.base_url.split("://", 1)[1]
        self.data_host = f"{data['sandbox_key']}.{emu.domain}"
        (emu.sandbox_root(data["sandbox_key"]) / "home/user/f.bin").write_bytes(PAYLOAD)


async def new_sandbox(emu: Emulator) -> Exercised:
    return Exercised(emu, await emu.create_sandbox())


async def both_planes(client: sandboxkit.Client, emu: Emulator, box: Exercised, dest: Path) -> None:
    """A console call, an upload, a read and a download (4 requests); each result checked."""
    with anyio.fail_after(LIMIT):
        assert (await client.v1.get_organization(emu.org_id)).name
        sbx = client.sandbox_from_response(box.body)
        await sbx.files.upload("/home/user/g.bin", PAYLOAD[::-1])
        assert await sbx.files.read_bytes("/home/user/g.bin") == PAYLOAD[::-1]
        await sbx.files.download("/home/user/f.bin", dest)
    assert dest.read_bytes() == PAYLOAD  # noqa: ASYNC240 (a small file, once)


def journal_servers(emu: Emulator) -> list[str]:
    return [entry.server for entry in emu.journal]


async def test_both_planes_go_through_the_environments_proxy(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With HTTP_PROXY set, every request of both planes is one the proxy read and
    forwarded; an http origin goes through in clear, token and API key included (the
    documented cost of a plain-http data plane)."""
    box = await new_sandbox(emulator)
    async with WireTap(proxy_server.port) as tap:
        clean_proxy_env.setenv("HTTP_PROXY", tap.url)
        async with emulator.client(trust_env=True) as client:
            emulator.journal.clear()
            await both_planes(client, emulator, box, tmp_path / "f.bin")
    records = proxy_server.records()
    assert len(records) == len(emulator.journal) == 4
    assert proxy_server.targets() == {box.console, box.data_host}
    assert [r["method"] for r in records] == [e.method for e in emulator.journal]
    assert set(journal_servers(emulator)) == {"console", "data"}
    assert box.token.encode() in tap.sent and emulator.api_key.encode() in tap.sent


async def test_https_goes_through_a_tunnel_the_proxy_cannot_read(
    tls_emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Over TLS each host is one CONNECT; every byte the proxy was sent is free of the API
    key, the sandbox token, the paths and the file's bytes."""
    box = await new_sandbox(tls_emulator)
    async with WireTap(proxy_server.port) as tap:
        clean_proxy_env.setenv("HTTPS_PROXY", tap.url)
        async with tls_emulator.client(trust_env=True) as client:
            await both_planes(client, tls_emulator, box, tmp_path / "f.bin")
    records = proxy_server.records()
    assert {r["method"] for r in records} == {"CONNECT"}
    assert proxy_server.targets() == {box.console, box.data_host}
    assert len(tls_emulator.journal) == 4  # the requests themselves arrived, inside tunnels
    assert tap.sent.count(b"CONNECT ") == len(records) and tap.connections == len(records)
    hidden = [tls_emulator.api_key, box.token, "X-Access-Token", "Authorization", "/api/"]
    assert secrets_in(tap.sent.decode("latin-1"), hidden) == []
    assert PAYLOAD[:64] not in tap.sent and PAYLOAD[::-1][:64] not in tap.sent


async def test_an_https_proxy_carries_tls_inside_tls(
    tmp_path: Path, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    """An `https://` proxy: TLS to the proxy, each host's TLS inside it (the CONNECT
    itself is encrypted: on the wire to the proxy not even a host name is in clear)."""
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "proxy-cert.pem", tmp_path / "proxy-key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    with ProxyServer(tmp_path, certificate=(cert, key)) as proxy:
        async with Emulator(ca=ca) as emu, WireTap(proxy.port) as tap:
            box = await new_sandbox(emu)
            async with emu.client(proxy=tap.url.replace("http:", "https:")) as client:
                await both_planes(client, emu, box, tmp_path / "f.bin")
            assert len(emu.journal) == 4
        assert {r["method"] for r in proxy.records()} == {"CONNECT"}
        assert proxy.targets() == {box.console, box.data_host}
    hidden = ["CONNECT", box.data_host, emu.api_key, box.token]
    assert tap.connections >= 2 and secrets_in(tap.sent.decode("latin-1"), hidden) == []


async def test_certificates_are_verified_through_the_tunnel(
    tls_emulator: Emulator, proxy_server: ProxyServer, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    """Through a proxy, TLS is still end to end: the host's untrusted certificate is refused
    (the proxy has no say in it)."""
    async with sandboxkit.Client(
        api_key=tls_emulator.api_key,
        base_url=tls_emulator.base_url,
        proxy=proxy_server.url,
        retry=sandboxkit.RetryPolicy.none(),
    ) as client:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.CertificateVerificationError):
            await client.v1.get_organization(tls_emulator.org_id)
    assert proxy_server.targets() == {tls_emulator.base_url.split("://", 1)[1]}
    assert tls_emulator.journal == []


@pytest.mark.parametrize(
    "no_proxy", ["127.0.0.1,sandbox.test", " .sandbox.test , 127.0.0.0/8 ", "*"]
)
async def test_no_proxy_hosts_are_reached_directly(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
    no_proxy: str,
) -> None:
    """Hosts NO_PROXY lists skip the proxy: the emulator gets every request, the proxy none."""
    box = await new_sandbox(emulator)
    clean_proxy_env.setenv("HTTP_PROXY", proxy_server.url)
    clean_proxy_env.setenv("NO_PROXY", no_proxy)
    async with emulator.client(trust_env=True) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
    assert len(emulator.journal) == 4
    assert proxy_server.records() == []


async def test_no_proxy_is_decided_per_origin(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`no_proxy=sandbox.test` (lower case): the sandbox hosts are direct, the console is not."""
    box = await new_sandbox(emulator)
    clean_proxy_env.setenv("http_proxy", proxy_server.url)
    clean_proxy_env.setenv("no_proxy", "sandbox.test")
    async with emulator.client(trust_env=True) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
    assert proxy_server.targets() == {box.console}
    assert len(proxy_server.records()) == journal_servers(emulator).count("console") == 1


async def test_trust_env_false_ignores_the_environment(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`trust_env=False` reads no proxy variable (a broken one included); so does
    `Emulator.client()` by default, whose names only its resolver knows."""
    box = await new_sandbox(emulator)
    clean_proxy_env.setenv("HTTP_PROXY", proxy_server.url)
    clean_proxy_env.setenv("HTTPS_PROXY", f"socks5://{USER}:{PASSWORD}@127.0.0.1:1")
    async with sandboxkit.Client(
        api_key=emulator.api_key,
        base_url=emulator.base_url,
        data_plane_scheme="http",
        resolver=emulator.resolver,
        trust_env=False,
    ) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
    async with emulator.client() as client:
        await both_planes(client, emulator, box, tmp_path / "f2.bin")
    assert len(emulator.journal) == 8
    assert proxy_server.records() == []


async def test_proxy_wins_over_the_environment(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`proxy=` carries every request although the environment names a dead proxy and
    NO_PROXY=* (the environment is not read at all)."""
    box = await new_sandbox(emulator)
    dead = f"http://127.0.0.1:{refused_port()}"
    clean_proxy_env.setenv("HTTP_PROXY", dead)
    clean_proxy_env.setenv("HTTPS_PROXY", dead)
    clean_proxy_env.setenv("NO_PROXY", "*")
    async with emulator.client(proxy=proxy_server.url, retry=sandboxkit.RetryPolicy.none()) as c:
        await both_planes(c, emulator, box, tmp_path / "f.bin")
    assert len(proxy_server.records()) == len(emulator.journal) == 4
    assert proxy_server.targets() == {box.console, box.data_host}


async def test_a_dead_proxy_is_a_connection_error_naming_the_proxy(
    emulator: Emulator, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    """A proxy that refuses connections: APIConnectionError saying it is the proxy's port."""
    port = refused_port()
    dead = f"http://127.0.0.1:{port}"
    async with emulator.client(proxy=dead, retry=sandboxkit.RetryPolicy.no_delay(2)) as client:
        with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.APIConnectionError) as caught:
            await client.v1.get_organization(emulator.org_id)
    assert f"cannot connect to the proxy 127.0.0.1:{port}" in str(caught.value)
    assert emulator.journal == []


async def test_a_tunnel_the_proxy_cannot_open_is_retried(
    tls_emulator: Emulator, proxy_server: ProxyServer, clean_proxy_env: pytest.MonkeyPatch
) -> None:
    """A proxy that cannot reach the host answers its CONNECT 502: a ProxyError with that
    status, retried as a bad gateway is (one CONNECT per attempt)."""
    box = await new_sandbox(tls_emulator)
    async with WireTap(proxy_server.port) as tap:
        retry = sandboxkit.RetryPolicy.no_delay(3)
        async with tls_emulator.client(proxy=tap.url, retry=retry) as client:
            sbx = client.sandbox(
                sandbox_key=box.body["data"]["sandbox_key"],
                domain=f"sandbox.test:{refused_port()}",
                access_token=box.token,
            )
            with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.ProxyError) as caught:
                await sbx.files.read_bytes("/home/user/f.bin")
    assert caught.value.status == 502 and "the proxy answered 502" in str(caught.value)
    assert tap.sent.count(b"CONNECT ") == 3
    assert box.token.encode() not in tap.sent


async def test_netrc_is_never_read(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With the environment trusted, a `.netrc` (by $NETRC and in $HOME) gives no
    credentials to the proxy nor to the hosts."""
    netrc = tmp_path / ".netrc"
    netrc.write_text("default login netrc-user password netrc-SECRET\n")
    netrc.chmod(0o600)
    clean_proxy_env.setenv("NETRC", str(netrc))
    clean_proxy_env.setenv("HOME", str(tmp_path))
    clean_proxy_env.setenv("HTTP_PROXY", proxy_server.url)
    clean_proxy_env.setenv("NO_PROXY", "sandbox.test")
    box = await new_sandbox(emulator)
    async with emulator.client(trust_env=True) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
    seen = [r["headers"] for r in proxy_server.records()]
    assert len(seen) == 1 and "Proxy-Authorization" not in seen[0]
    data = [e for e in emulator.journal if e.server == "data"]
    assert len(data) == 3 and all("Authorization" not in e.headers for e in data)
    assert seen[0]["Authorization"] == f"Bearer {emulator.api_key}"


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_proxy_credentials_work(
    emulator: Emulator,
    tls_emulator: Emulator,
    auth_proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
    tls: bool,
) -> None:
    """Credentials in the proxy URL (percent-decoded) authenticate each plain request, or
    each CONNECT, to a proxy that demands them."""
    emu = tls_emulator if tls else emulator
    box = await new_sandbox(emu)
    async with emu.client(proxy=with_credentials(auth_proxy_server.url)) as client:
        await both_planes(client, emu, box, tmp_path / "f.bin")
    records = auth_proxy_server.records()
    assert len(records) == (2 if tls else 4)
    assert {r["headers"]["Proxy-Authorization"] for r in records} == {f"Basic {CREDENTIALS[3]}"}
    assert len(emu.journal) == 4
    if tls:  # the hosts never got them (a plain request's are the proxy's to remove, and
        # proxy.py removes them from the first request of a connection only)
        assert all("Proxy-Authorization" not in entry.headers for entry in emu.journal)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_wrong_proxy_credentials_fail_at_once(
    emulator: Emulator,
    tls_emulator: Emulator,
    auth_proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tls: bool,
) -> None:
    """A 407 is final: a ProxyError for a tunnel (an APIError with status 407 for a plain
    request, which is the proxy's own answer), sent once, however many attempts are allowed."""
    emu = tls_emulator if tls else emulator
    box = await new_sandbox(emu)
    async with WireTap(auth_proxy_server.port) as tap:
        url = with_credentials(tap.url, password="wrong-PW-SECRET")
        async with emu.client(proxy=url, retry=sandboxkit.RetryPolicy.no_delay(4)) as client:
            sbx = client.sandbox_from_response(box.body)
            for call in (
                lambda: client.v1.get_organization(emu.org_id),
                lambda: sbx.files.read_bytes("/home/user/f.bin"),
            ):
                with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.SandboxKitError) as caught:
                    await call()
                error = caught.value
                expected = sandboxkit.ProxyError if tls else sandboxkit.APIError
                assert type(error) is expected and error.status == 407  # type: ignore[attr-defined]
                assert "credentials" in str(error) or not tls
                text = exception_text(error) + frame_locals_text(error)
                assert secrets_in(text, credential_forms(USER, "wrong-PW-SECRET")) == []
    assert tap.sent.count(b"CONNECT " if tls else b"GET ") == 2
    assert auth_proxy_server.records() == [] and emu.journal == []


SANDBOXKIT = str(Path(sandboxkit.__file__).parent)


def frame_locals_text(exc: BaseException) -> str:
    """The repr of every local of each of sandboxkit's frames in the tracebacks of `exc` and
    its chain: what an error tracker that records locals would store of ours."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        for frame, _ in traceback.walk_tb(seen.__traceback__):
            if not frame.f_code.co_filename.startswith(SANDBOXKIT):
                continue  # the test's own frames hold the URL it gave
            for name, value in frame.f_locals.items():
                try:
                    parts.append(f"{name}={value!r}")
                except Exception:  # a half-built object (its __init__ raised)
                    parts.append(f"{name}: {type(value).__name__}")
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


async def test_proxy_credentials_never_leak(
    emulator: Emulator,
    auth_proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No repr, DEBUG log record, exception (chain, traceback and its frames' locals) or
    config of ours shows the proxy's user name or password, in any form."""
    caplog.set_level(logging.DEBUG)
    url = with_credentials(auth_proxy_server.url)
    box = await new_sandbox(emulator)
    caught: list[BaseException] = []
    async with emulator.client(proxy=url, retry=sandboxkit.RetryPolicy.no_delay(2)) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
        sbx = client.sandbox_from_response(box.body)
        wrong = client.sandbox(
            sandbox_key=box.body["data"]["sandbox_key"],
            domain=emulator.domain,
            access_token="wrong-token",
        )
        failing: list[Any] = [
            lambda: sbx.files.read_bytes("/home/user/missing"),
            lambda: wrong.files.read_bytes("/home/user/f.bin"),
            lambda: client.v1.get_organization("00000000-0000-4000-8000-000000000000"),
            lambda: client.request("GET", "/api/v2/nowhere"),
        ]
        for call in failing:
            with anyio.fail_after(LIMIT), pytest.raises(sandboxkit.SandboxKitError) as error:
                await call()
            caught.append(error.value)
        config = sandboxkit.ClientConfig(api_key=emulator.api_key, proxy=url)
        things: list[Any] = [client, client._transport, client._transport.proxies, sbx, config]
        text = "\n".join(repr(t) + str(t) for t in things)
    assert len(auth_proxy_server.records()) == 4 + 4  # the failures went through it too
    for exc in caught:
        text += exception_text(exc) + frame_locals_text(exc)
    # A refused option: its message and chain (the caller's argument is, unavoidably, a
    # local of the constructor's frame, as it is of the caller's).
    for bad in (f"socks5://{USER}:{PASSWORD}@p:1", f"http://{USER}:{PASSWORD}@p:1/x"):
        with pytest.raises(sandboxkit.ValidationError) as refused:
            sandboxkit.Client(api_key="k", base_url=emulator.base_url, proxy=bad)
        text += exception_text(refused.value)
        with pytest.raises(sandboxkit.ValidationError) as refused:
            sandboxkit.ClientConfig(proxy=bad)
        text += exception_text(refused.value)
    for record in caplog.get_records("call"):
        text += record.getMessage() + repr(record.args)
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
    assert secrets_in(text, CREDENTIALS) == []


async def test_client_config_carries_the_proxy_options(
    emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`proxy` and `trust_env` survive pickling and reach the Client built from the config;
    the config's repr hides the credentials."""
    box = await new_sandbox(emulator)
    url = with_credentials(proxy_server.url)
    config = sandboxkit.ClientConfig(
        api_key=emulator.api_key, base_url=emulator.base_url, data_plane_scheme="http", proxy=url
    )
    copy = pickle.loads(pickle.dumps(config))
    assert copy == config and copy.proxy == url and copy.trust_env is True
    assert "proxy='http://***@127.0.0.1:" in repr(config) and PASSWORD not in repr(config)
    async with sandboxkit.Client.from_config(copy) as client:
        await both_planes(client, emulator, box, tmp_path / "f.bin")
    assert len(proxy_server.records()) == 4
    clean_proxy_env.setenv("HTTP_PROXY", proxy_server.url)
    direct = sandboxkit.ClientConfig(
        api_key=emulator.api_key,
        base_url=emulator.base_url,
        data_plane_scheme="http",
        resolver=EmulatorResolver,
        trust_env=False,
    )
    async with sandboxkit.Client.from_config(pickle.loads(pickle.dumps(direct))) as client:
        await both_planes(client, emulator, box, tmp_path / "f2.bin")
    assert len(proxy_server.records()) == 4 and len(emulator.journal) == 8


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"proxy": "socks5://127.0.0.1:1080"}, "http:// or https://"),
        ({"proxy": "http://"}, "no host"),
        ({"proxy": "127.0.0.1:3128"}, "http:// or https://"),
        ({"proxy": 3128}, "URL string"),
        ({"trust_env": "yes"}, "trust_env"),
    ],
)
def test_bad_proxy_options_are_refused_at_construction(
    clean_proxy_env: pytest.MonkeyPatch, options: dict[str, Any], match: str
) -> None:
    """A bad `proxy=` or `trust_env=` is a ValidationError from the Client and the config."""
    with pytest.raises(sandboxkit.ValidationError, match=match):
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1", **options)
    with pytest.raises(sandboxkit.ValidationError):
        sandboxkit.ClientConfig(**options)


def test_a_bad_proxy_variable_is_refused_at_construction(
    clean_proxy_env: pytest.MonkeyPatch,
) -> None:
    """An unusable HTTPS_PROXY fails `Client()` (naming it, not its credentials) unless the
    environment is not trusted."""
    clean_proxy_env.setenv("HTTPS_PROXY", f"socks5://{USER}:{PASSWORD}@127.0.0.1:1080")
    with pytest.raises(sandboxkit.ValidationError, match="HTTPS_PROXY") as caught:
        sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1")
    assert secrets_in(exception_text(caught.value), CREDENTIALS) == []
    sandboxkit.Client(api_key="k", base_url="http://127.0.0.1:1", trust_env=False)


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
async def test_a_large_body_read_below_the_parser_through_the_proxy(
    emulator: Emulator,
    tls_emulator: Emulator,
    proxy_server: ProxyServer,
    clean_proxy_env: pytest.MonkeyPatch,
    tmp_path: Path,
    tls: bool,
) -> None:
    """A body read by `_ring` (the threshold lowered to every body) arrives whole through a
    plain proxy and through a CONNECT tunnel carrying TLS, and its connection is not reused:
    the next download through the tunnel opens a new one."""
    from sandboxkit._http import ring as _ring
    from sandboxkit._http import transport as _bodies

    made: list[int] = []

    class Counted(_ring.RingReader):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            made.append(1)

    clean_proxy_env.setattr(_bodies, "RING_MIN_BODY", 1)
    clean_proxy_env.setattr(_bodies, "RingReader", Counted)
    emu = tls_emulator if tls else emulator
    box = await new_sandbox(emu)
    data = bytes(range(256)) * (5 * _ring.RING_BUFFER // 256 + 3)
    (emu.sandbox_root(box.body["data"]["sandbox_key"]) / "home/user/big.bin").write_bytes(data)
    async with emu.client(proxy=proxy_server.url) as client:
        sbx = client.sandbox_from_response(box.body)
        with anyio.fail_after(LIMIT):
            for name in ("a", "b"):
                result = await sbx.files.download("/home/user/big.bin", tmp_path / name)
                assert result.size == len(data)
                assert (tmp_path / name).read_bytes() == data
    assert len(made) == 2
    if tls:  # one tunnel per download: the first connection was closed, not pooled
        assert [r["method"] for r in proxy_server.records()] == ["CONNECT", "CONNECT"]
