"""Security checks: secrets stay out of reprs, errors and logs, and travel only to their host.

The API key goes to the console only; a sandbox's access token goes to that sandbox's host
only; neither shows in a repr, an exception (with its chain) or a log line at DEBUG. TLS
verification is on by default.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

import sandboxkit
from sandboxkit import models
from sandboxkit._http.hosts import HostKey
from sandboxkit.emulator import Emulator, Fault, RecordedRequest

from ..reliability_support import close_and_check, port_of, refused_port

LIMIT = 10
PAYLOAD = b"secret-free payload" * 500


def secrets_in(text: str, secrets: Iterable[str]) -> list[str]:
    """Which of `secrets` appear in `text`."""
    return [s for s in secrets if s in text]


def exception_text(exc: BaseException) -> str:
    """Everything a traceback of `exc` shows: messages of the whole chain and their reprs."""
    parts = ["".join(traceback.format_exception(exc))]
    seen: BaseException | None = exc
    while seen is not None:
        parts += [str(seen), repr(seen), repr(getattr(seen, "args", ()))]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(parts)


async def _sandbox(emu: Emulator, client: sandboxkit.Client) -> tuple[sandboxkit.Sandbox, str, str]:
    body = await emu.create_sandbox()
    data = body["data"]
    (emu.sandbox_root(data["sandbox_key"]) / "home/user/f.bin").write_bytes(PAYLOAD)
    return client.sandbox_from_response(body), data["sandbox_key"], data["sandbox_access_token"]


async def test_reprs_never_show_a_secret(emulator: Emulator, tmp_path: Path) -> None:
    """The client, its parts, sandbox handles, pools and secret-bearing models never show a
    key or token in repr or str."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        sbx, _, token = await _sandbox(emulator, client)
        await sbx.files.download("/home/user/f.bin", tmp_path / "f.bin")
        pool = client._transport.hosts.get(HostKey(sbx.origin, token))
        assert pool is not None
        config = sandboxkit.ClientConfig(api_key=emulator.api_key, base_url=emulator.base_url)
        objects: list[Any] = [
            client,
            client._transport,
            client._calls,
            client.templates,
            client.v1,
            sbx,
            sbx.files,
            sbx.files._plane,
            pool,
            config,
            models.ApiKey(key="sk-minted-SECRET"),
            models.OAuthToken(access_token="oauth-SECRET"),
            models.EnvVar("SSH_PUBLIC_KEY", "env-SECRET"),
            models.TemplateCredential(secret="cred-SECRET", username="u"),
            models.OAuthCodeExchange(provider="gh", code="code-SECRET"),
        ]
        secrets = [emulator.api_key, token, "SECRET"]
        for thing in objects:
            assert secrets_in(repr(thing) + str(thing), secrets) == [], type(thing).__name__


async def _failures(
    emu: Emulator, client: sandboxkit.Client, tmp_path: Path
) -> list[BaseException]:
    """Run operations that fail every way they can, and collect the exceptions."""
    sbx, key, token = await _sandbox(emu, client)
    attempts: list[Any] = [
        lambda: client.v1.exchange_oauth_code("github", "oauth-code-SECRET\n"),
        lambda: client.v1.exchange_oauth_code("github", "oauth-code-SECRET"),
        lambda: client.v1.create_api_key("not-a-uuid", "k"),
        lambda: client.v1.get_organization("00000000-0000-4000-8000-000000000000"),
        lambda: sbx.files.read_bytes("/home/user/missing"),
        lambda: sbx.files.read_bytes("/root/secret"),
        lambda: sbx.files.download("/home/user/f.bin", tmp_path / "no" / "dir"),
        lambda: client.sandbox(
            sandbox_key=key, domain=emu.domain, access_token="wrong-SECRET-token"
        ).files.read_bytes("/home/user/f.bin"),
        lambda: client.sandbox(
            sandbox_key=key, domain=f"sandbox.test:{refused_port()}", access_token=token
        ).files.read_bytes("/home/user/f.bin"),
    ]

    async def exhausted_download() -> Any:
        emu.faults.script("files.download", *[Fault.status(502)] * 3)
        return await sbx.files.read_bytes("/home/user/f.bin")

    async def exhausted_builds() -> Any:
        emu.faults.script("builds.list", *[Fault.cut(5)] * 3)
        return await _drain(client.templates.builds("tpl-x"))

    attempts += [exhausted_download, exhausted_builds]
    caught: list[BaseException] = []
    for attempt in attempts:
        with anyio.fail_after(LIMIT):
            try:
                await attempt()
            except sandboxkit.SandboxKitError as exc:
                caught.append(exc)
    for bad in ("key\nSECRET", ""):
        try:
            sandboxkit.Client(api_key=bad, base_url=emu.base_url)
        except sandboxkit.ValidationError as exc:
            caught.append(exc)
        try:
            client.sandbox(sandbox_key="k", domain="d", access_token=bad or " \n")
        except sandboxkit.ValidationError as exc:
            caught.append(exc)
    return caught


async def _drain(items: Any) -> list[Any]:
    return [item async for item in items]


async def test_exceptions_never_show_a_secret(emulator: Emulator, tmp_path: Path) -> None:
    """No exception message, repr, chain or traceback carries the API key, a sandbox token or
    a one-time OAuth code."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay(3)) as client:
        caught = await _failures(emulator, client, tmp_path)
        tokens = [s.token for s in emulator._core.sandboxes.live.values()]
    assert len(caught) == 15
    for exc in caught:
        text = exception_text(exc)
        assert secrets_in(text, [emulator.api_key, *tokens, "SECRET"]) == [], text[-600:]


async def test_debug_logs_never_show_a_secret(
    emulator: Emulator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """At DEBUG, over failing and retried runs on both planes (a request and an answer line
    each, hooks that raise), no log record (message, arguments or traceback) carries a key,
    a token, or a username or path from a query."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="sandboxkit")  # whatever an earlier test set it to
    hooks = {name: _broken_hook for name in ("on_request", "on_response", "on_retry")}
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay(4), **hooks) as client:
        sbx, _, _ = await _sandbox(emulator, client)
        emulator.faults.script("files.download", Fault.status(429, retry_after="0"), Fault.cut(100))
        emulator.faults.script("files.upload", Fault.status(502), Fault.cut_before_headers())
        emulator.faults.script("templates.create", Fault.status(503), Fault.cut(3))
        with anyio.fail_after(LIMIT):
            await sbx.files.download("/home/user/f.bin", tmp_path / "f.bin", username=USER)
            await sbx.files.upload("/home/user/g.bin", PAYLOAD, username=USER)
            await client.templates.create(
                name="t", resources=sandboxkit.CustomResources(2, 2048, 10240)
            )
        await _failures(emulator, client, tmp_path)
        tokens = [s.token for s in emulator._core.sandboxes.live.values()]
    records = caplog.get_records("call")
    assert any(r.levelno == logging.WARNING and "retrying" in r.getMessage() for r in records)
    lines = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    for operation in ("files.download", "files.upload", "templates.create", "builds.list"):
        assert any(line.startswith(f"{operation}: request ") for line in lines), operation
        assert any(line.startswith(f"{operation}: answer ") for line in lines), operation
    assert any("hook raised" in line for line in lines)
    for record in records:
        text = record.getMessage()
        if record.exc_info:
            text += "".join(traceback.format_exception(*record.exc_info))
        assert secrets_in(text, [emulator.api_key, *tokens, "SECRET", USER]) == [], text
        assert "f.bin" not in text and "g.bin" not in text, text


USER = "agent-user-7f3a"


def _broken_hook(event: object) -> None:
    raise RuntimeError("a hook's own bug")


def _carried(entry: RecordedRequest) -> str:
    """Everything a request put on the wire besides its body: host, path, query, headers."""
    fields = [entry.host, entry.path, *entry.query.values()]
    fields += [f"{name}: {value}" for name, value in entry.headers.items()]
    return "\n".join(fields)


async def test_each_secret_reaches_only_its_own_host(emulator: Emulator, tmp_path: Path) -> None:
    """In the journals of the console and two sandboxes, the API key appears only on the
    console and each sandbox token only on its own sandbox, through retries included."""
    async with emulator.client(retry=sandboxkit.RetryPolicy.no_delay()) as client:
        a, key_a, token_a = await _sandbox(emulator, client)
        b, key_b, token_b = await _sandbox(emulator, client)
        emulator.faults.script("files.download", Fault.cut(10), Fault.status(429))
        emulator.faults.script("files.upload", Fault.status(502))
        emulator.faults.script("builds.list", Fault.status(503))
        with anyio.fail_after(LIMIT):
            created = await client.templates.create(
                name="t", resources=sandboxkit.CustomResources(2, 2048, 10240)
            )
            await _drain(client.templates.builds(created.id))
            await client.v1.get_organization(emulator.org_id)
            await client.v1.exchange_oauth_code("github", emulator.oauth_code)
            for sbx in (a, b, a):
                await sbx.files.download("/home/user/f.bin", tmp_path / "f.bin")
                await sbx.files.upload("/home/user/g.bin", PAYLOAD)
                assert await sbx.files.read_bytes("/home/user/g.bin") == PAYLOAD
        await close_and_check(client, [port_of(emulator.base_url), port_of(emulator.domain)])
    tokens = {key_a: token_a, key_b: token_b}
    console = [e for e in emulator.journal if e.server == "console"]
    data = [e for e in emulator.journal if e.server == "data"]
    assert len(console) >= 5 and {e.sandbox_key for e in data} == {key_a, key_b}
    for entry in console:
        assert "X-Access-Token" not in entry.headers
        assert secrets_in(_carried(entry), tokens.values()) == []
        if entry.route == "v1.oauth.exchange":
            assert "Authorization" not in entry.headers
        else:
            assert entry.headers["Authorization"] == f"Bearer {emulator.api_key}"
    for entry in data:
        assert entry.sandbox_key is not None
        assert "Authorization" not in entry.headers
        assert entry.headers["X-Access-Token"] == tokens[entry.sandbox_key]
        others = [emulator.api_key] + [t for k, t in tokens.items() if k != entry.sandbox_key]
        assert secrets_in(_carried(entry), others) == []


async def test_tls_is_verified_by_default(tls_emulator: Emulator) -> None:
    """Without `ssl=`, both planes refuse the untrusted certificate with an
    APIConnectionError that names certificate verification; nothing reaches a handler."""
    body = await tls_emulator.create_sandbox()
    client = sandboxkit.Client(
        api_key=tls_emulator.api_key,
        base_url=tls_emulator.base_url,
        resolver=tls_emulator.resolver,
        retry=sandboxkit.RetryPolicy.no_delay(2),
    )
    delays: list[float] = []

    async def no_wait(delay: float) -> None:
        delays.append(delay)

    client._calls.sleep = no_wait
    async with client:
        with anyio.fail_after(LIMIT):
            with pytest.raises(
                sandboxkit.CertificateVerificationError, match="certificate verification"
            ):
                await client.v1.get_organization(tls_emulator.org_id)
            with pytest.raises(sandboxkit.APIConnectionError, match="certificate verification"):
                await client.sandbox_from_response(body).files.read_bytes("/home/user/x")
    assert tls_emulator.journal == []
    assert delays == []  # an untrusted certificate is final: no retry was even planned


async def test_tls_with_the_right_ca_succeeds(tls_emulator: Emulator) -> None:
    """With `ssl=` a context trusting the CA, both planes work over https."""
    body = await tls_emulator.create_sandbox()
    key = body["data"]["sandbox_key"]
    (tls_emulator.sandbox_root(key) / "home/user/f.bin").write_bytes(PAYLOAD)
    assert tls_emulator.ssl_context is not None
    async with sandboxkit.Client(
        api_key=tls_emulator.api_key,
        base_url=tls_emulator.base_url,
        resolver=tls_emulator.resolver,
        ssl=tls_emulator.ssl_context,
    ) as client:
        assert tls_emulator.base_url.startswith("https://") and client.data_plane_scheme == "https"
        with anyio.fail_after(LIMIT):
            assert (await client.v1.get_organization(tls_emulator.org_id)).name
            sbx = client.sandbox_from_response(body)
            assert await sbx.files.read_bytes("/home/user/f.bin") == PAYLOAD
        await close_and_check(
            client, [port_of(tls_emulator.base_url), port_of(tls_emulator.domain)]
        )
