"""ClientConfig: picklable Client options, checked at construction, and Client.from_config."""

from __future__ import annotations

import functools
import inspect
import pickle
import ssl
from pathlib import Path

import attrs
import pytest
import trustme

import sandboxkit
from sandboxkit import ClientConfig
from sandboxkit.emulator import EmulatorResolver

BASE = {"api_key": "sk-config-SECRET", "base_url": "http://127.0.0.1:1"}


def strict_context() -> ssl.SSLContext:
    """A module-level factory: pickles by reference."""
    return ssl.create_default_context()


def test_config_names_every_client_option() -> None:
    """ClientConfig has a field for every keyword option of Client, and nothing else."""
    fields = {f.name for f in attrs.fields(ClientConfig)}
    assert fields == set(inspect.signature(sandboxkit.Client).parameters)


def test_config_round_trips_through_pickle_and_hides_the_key() -> None:
    """A config with factories pickles, compares equal after, and never shows its key."""
    config = ClientConfig(
        **BASE,
        retry=sandboxkit.RetryPolicy(max_attempts=8),
        limits=sandboxkit.Limits(per_host_connections=2),
        ssl=strict_context,
        resolver=functools.partial(EmulatorResolver, "sandbox.test"),
    )
    copy = pickle.loads(pickle.dumps(config))
    assert attrs.evolve(copy, resolver=None) == attrs.evolve(config, resolver=None)
    assert isinstance(copy.make_resolver(), EmulatorResolver)
    assert "SECRET" not in repr(config)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"resolver": lambda: EmulatorResolver()}, "resolver does not pickle"),
        ({"ssl": lambda: ssl.create_default_context()}, "ssl does not pickle"),
        ({"ssl": ssl.create_default_context()}, "live SSLContext"),
        ({"resolver": EmulatorResolver()}, "not a resolver instance"),
        ({"ssl": 3}, "bool, a CA bundle path or a factory"),
        ({"data_plane_scheme": "ftp"}, "data_plane_scheme"),
        ({"retry": 5}, "RetryPolicy"),
    ],
)
def test_unusable_options_fail_at_construction(options: dict[str, object], match: str) -> None:
    """An option a worker could not receive or use is refused when the config is made."""
    with pytest.raises(sandboxkit.ValidationError, match=match):
        ClientConfig(**BASE, **options)  # type: ignore[arg-type]


async def test_from_config_builds_the_client_it_describes(tmp_path: Path) -> None:
    """Client.from_config applies every option, makes a fresh resolver and trusts a CA path."""
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    config = ClientConfig(
        **BASE,
        timeout=sandboxkit.Timeout(connect=1.0),
        retry=sandboxkit.RetryPolicy(max_attempts=8),
        limits=sandboxkit.Limits(per_host_connections=2),
        data_plane_scheme="http",
        ssl=ca_file,
        resolver=EmulatorResolver,
    )
    async with (
        sandboxkit.Client.from_config(config) as one,
        sandboxkit.Client.from_config(config) as two,
    ):
        assert one.base_url == "http://127.0.0.1:1"
        assert one.timeout == sandboxkit.Timeout(connect=1.0)
        assert one.data_plane_scheme == "http"
        assert (one.retry, one.limits) == (config.retry, config.limits)
        assert isinstance(one._transport._resolver, EmulatorResolver)
        assert one._transport._resolver is not two._transport._resolver
        assert isinstance(one._transport._ssl, ssl.SSLContext)
        assert len(one._transport._ssl.get_ca_certs()) == 1


def test_from_config_reports_bad_factories_and_ca_files(tmp_path: Path) -> None:
    """A factory returning the wrong thing, or a CA file that is not one, is a clear error."""
    with pytest.raises(sandboxkit.ValidationError, match="AbstractResolver"):
        sandboxkit.Client.from_config(ClientConfig(**BASE, resolver=dict))
    with pytest.raises(sandboxkit.ValidationError, match="SSLContext"):
        sandboxkit.Client.from_config(ClientConfig(**BASE, ssl=dict))
    with pytest.raises(sandboxkit.ValidationError, match="CA bundle"):
        sandboxkit.Client.from_config(ClientConfig(**BASE, ssl=tmp_path / "none.pem"))


def test_from_env_captures_the_environment_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """from_env reads the key and URL at once, so workers need not share the environment."""
    monkeypatch.setenv("SANDBOXKIT_API_KEY", "sk-env")
    monkeypatch.setenv("SANDBOXKIT_BASE_URL", "http://env.test")
    config = ClientConfig.from_env(base_url="http://explicit.test")
    monkeypatch.delenv("SANDBOXKIT_API_KEY")
    assert (config.api_key, config.base_url) == ("sk-env", "http://explicit.test")
    assert sandboxkit.Client.from_config(config).base_url == "http://explicit.test"
