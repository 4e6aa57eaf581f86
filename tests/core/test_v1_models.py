"""v1 models, converter renames, paths and client-side checks: pure, table-driven, no loop."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import sandboxkit
from sandboxkit._core import protocol as proto
from sandboxkit._core import validation as check
from sandboxkit._core.convert import strict_converter, structure, unstructure
from sandboxkit.models import (
    ActionResult,
    ApiKey,
    ApiKeyRequest,
    Container,
    ContainersCreated,
    ContainerSpec,
    ElasticIpAssociation,
    EnvVar,
    Image,
    OAuthCodeExchange,
    OAuthToken,
    Organization,
    ShellResult,
    V1Template,
)

ORG = "0b6f1c2e-4a53-4e8f-9d62-3f1f0c7c9a10"
NOW = 1_700_000_000.0
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----"

IMAGE_WIRE: dict[str, Any] = {
    "id": "5a0a4c8e-1f0e-4c55-9f0d-2b8e8f1f7e01",
    "name": "ubuntu-22.04",
    "supportedProducts": ["sku-small"],
    "BootMode": "UEFI",
    "DefaultPartitionTable": [
        {"fileSystem": "ext4", "mountPoint": "/", "name": "root", "size": "40G"}
    ],
    "OSArchitecture": "x86_64",
    "OSSeries": "ubuntu",
    "OSVersion": "22.04",
    "SystemDiskSize": "40",
    "icon": "/i.svg",
    "path": "images/ubuntu",
    "idc": "us-denver-1",
    "orgId": ORG,
    "createdAt": "2023-11-14T22:13:20.000Z",
    "type": "Public",
}

TEMPLATE_WIRE: dict[str, Any] = {
    "id": "7d3c2b1a-0f9e-4d8c-b7a6-958473625140",
    "official": False,
    "name": "team agent v2",
    "path": "org/team-agent",
    "orgId": ORG,
    "credential": {"secret": "hunter2", "username": "agent"},
    "description": "the team's agent image",
    "status": "draft",
}


def _ssh_key(kind: str = "ssh-ed25519", comment: str = "me@host") -> str:
    name = kind.encode()
    blob = len(name).to_bytes(4, "big") + name + (32).to_bytes(4, "big") + bytes(range(32))
    return f"{kind} {base64.b64encode(blob).decode()} {comment}".strip()


@pytest.mark.parametrize(
    ("wire", "cls", "expected"),
    [
        (
            IMAGE_WIRE,
            Image,
            {
                "supported_products": ("sku-small",),
                "boot_mode": "UEFI",
                "os_architecture": "x86_64",
                "os_series": "ubuntu",
                "os_version": "22.04",
                "system_disk_size": "40",
                "org_id": ORG,
                "created_at": datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
                "type": "Public",
            },
        ),
        (
            {**IMAGE_WIRE, "BootMode": "PXE", "type": "Shared", "GPUDriver": "550", "x": [1]},
            Image,
            {"boot_mode": "PXE", "type": "Shared"},
        ),
        (
            TEMPLATE_WIRE,
            V1Template,
            {
                "org_id": ORG,
                "status": "draft",
                "official": False,
                "description": "the team's agent image",
            },
        ),
        (
            {"id": TEMPLATE_WIRE["id"], "status": "archived", "osFamily": "linux", "tags": ["a"]},
            V1Template,
            {"status": "archived", "name": None, "credential": None, "description": ""},
        ),
        ({"name": "Acme", "plan": "gold"}, Organization, {"name": "Acme"}),
        ({"result": "ok", "taskId": "t-1"}, ActionResult, {"result": "ok"}),
        ({"urlPath": "/shell/x?t=1", "ttl": 60}, ShellResult, {"url_path": "/shell/x?t=1"}),
        ({"accessToken": "oat-1", "expiresIn": 3600}, OAuthToken, {"access_token": "oat-1"}),
        ({"key": "sk-1", "id": "k"}, ApiKey, {"key": "sk-1"}),
        (
            {"id": "c-1", "status": "hibernating", "cpu": 2},
            Container,
            {
                "id": "c-1",
                "status": "hibernating",
                "raw": {"id": "c-1", "status": "hibernating", "cpu": 2},
            },
        ),
        ({"name": "no id"}, Container, {"id": None, "status": None}),
        (
            {"ids": ["a", "b"], "result": "ok"},
            ContainersCreated,
            {"ids": ("a", "b"), "result": "ok"},
        ),
        ({"id": "a"}, ContainersCreated, {"ids": ("a",), "result": None}),
        ([{"id": "a"}, "b", {"x": 1}], ContainersCreated, {"ids": ("a", "b")}),
        (None, ContainersCreated, {"ids": (), "raw": None}),
    ],
)
def test_v1_records_parse_leniently(wire: Any, cls: type[Any], expected: dict[str, Any]) -> None:
    """v1 records map camelCase names and accept unknown fields and unknown enum values."""
    parsed = structure(wire, cls)
    for attribute, value in expected.items():
        assert getattr(parsed, attribute) == value


def test_partition_table_renames() -> None:
    """DefaultPartitionTable entries map fileSystem and mountPoint."""
    image = structure(IMAGE_WIRE, Image)
    entry = image.default_partition_table[0]
    assert (entry.file_system, entry.mount_point, entry.size) == ("ext4", "/", "40G")


@pytest.mark.parametrize(
    ("model", "wire"),
    [
        (OAuthCodeExchange("github", "c0de"), {"provider": "github", "code": "c0de"}),
        (
            ApiKeyRequest("ci", "ce_resource", 1_800_000_000),
            {"name": "ci", "scope": "ce_resource", "expiresAt": 1_800_000_000},
        ),
        (ApiKeyRequest("ci", "ie_model"), {"name": "ci", "scope": "ie_model"}),
        (ElasticIpAssociation(ORG), {"instanceID": ORG}),
        (
            ContainerSpec("w", ORG, 2, "sku", "us-denver-1", (EnvVar("A", "1"),)),
            {
                "name": "w",
                "templateId": ORG,
                "count": 2,
                "product": "sku",
                "idc": "us-denver-1",
                "envs": [{"name": "A", "value": "1"}],
            },
        ),
    ],
)
def test_v1_request_bodies_use_wire_names(model: Any, wire: dict[str, Any]) -> None:
    """Request models unstructure to the interface's camelCase names and drop None."""
    assert unstructure(model) == wire
    assert strict_converter.structure(wire, type(model)) == model


@pytest.mark.parametrize(
    "value",
    [
        ApiKey("sk-live-secret"),
        OAuthToken("oat-live-secret"),
        EnvVar("TOKEN", "live-secret"),
        OAuthCodeExchange("gh", "live-secret"),
    ],
)
def test_secrets_stay_out_of_repr(value: Any) -> None:
    """Keys, tokens, codes and env values never show in a repr or str."""
    assert "live-secret" not in repr(value)
    assert "live-secret" not in str(value)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (proto.api_keys_path(ORG), f"/api/v1/organizations/{ORG}/api-keys"),
        (proto.organization_path(ORG), f"/api/v1/organizations/{ORG}"),
        (proto.v1_template_path(ORG), f"/api/v1/templates/{ORG}"),
        (proto.container_path("a/b?c"), "/api/v1/containers/a%2Fb%3Fc"),
        (proto.container_shell_path("c1"), "/api/v1/containers/c1/shell"),
        (proto.elastic_ip_associate_path("e1"), "/api/v1/elastic-ips/e1/associate"),
        (proto.elastic_ip_path("../x"), "/api/v1/elastic-ips/..%2Fx"),
        (proto.vpc_path("v1"), "/api/v1/vpcs/v1"),
        (proto.V1_OAUTH_TOKEN_PATH, "/api/v1/oauth/token"),
        (proto.V1_IMAGES_PATH, "/api/v1/images"),
        (proto.V1_TEMPLATES_PATH, "/api/v1/templates"),
        (proto.V1_CONTAINERS_PATH, "/api/v1/containers"),
    ],
)
def test_v1_paths(path: str, expected: str) -> None:
    """v1 paths match the interface and quote ids into a single segment."""
    assert path == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        (datetime.fromtimestamp(NOW + 60, UTC), int(NOW + 60)),
        (datetime.fromtimestamp(NOW + 60, timezone(timedelta(hours=-7))), int(NOW + 60)),
        (int(NOW) + 1, int(NOW) + 1),
    ],
)
def test_expires_at_accepted(value: Any, expected: int | None) -> None:
    """An aware datetime or int UNIX seconds in the future becomes UNIX seconds."""
    assert check.check_expires_at(value, NOW) == expected


@pytest.mark.parametrize(
    "value",
    [
        int(NOW),
        int(NOW) - 1,
        datetime.fromtimestamp(NOW - 1, UTC),
        datetime(2030, 1, 1),  # naive: ambiguous
        float(NOW + 60),
        True,
        "1800000000",
    ],
)
def test_expires_at_rejected(value: Any) -> None:
    """Past, naive, float, bool and string expiries are refused."""
    with pytest.raises(sandboxkit.ValidationError, match="expires_at"):
        check.check_expires_at(value, NOW)


@pytest.mark.parametrize(
    ("argument", "value", "max_length", "ok"),
    [
        ("name", "ubuntu-22.04_x", 50, True),
        ("name", "a" * 50, 50, True),
        ("name", "a" * 51, 50, False),
        ("os_series", "a" * 256, 256, True),
        ("os_series", "a" * 257, 256, False),
        ("name", "", 50, False),
        ("name", "ubuntu 22", 50, False),
        ("name", "ubuntu/22", 50, False),
        ("name", "ubuntu\n", 50, False),
        ("name", "übuntu", 50, False),
        ("name", 5, 50, False),
    ],
)
def test_image_filters(argument: str, value: Any, max_length: int, ok: bool) -> None:
    """Image filters hold 1-max letters, digits, '.', '_' and '-' only."""
    if ok:
        assert check.check_image_filter(argument, value, max_length) == value
    else:
        with pytest.raises(sandboxkit.ValidationError, match=argument):
            check.check_image_filter(argument, value, max_length)


@pytest.mark.parametrize(
    ("value", "ok"),
    [(1, True), (100, True), (0, False), (-1, False), (1.0, False), (True, False)],
)
def test_count(value: Any, ok: bool) -> None:
    """A container count is an integer >= 1."""
    if ok:
        assert check.check_count(value) == value
    else:
        with pytest.raises(sandboxkit.ValidationError, match="count"):
            check.check_count(value)


@pytest.mark.parametrize(
    ("envs", "expected"),
    [
        ((), ()),
        ({"A": "1", "B": ""}, (EnvVar("A", "1"), EnvVar("B", ""))),
        ([EnvVar("A", "x=y")], (EnvVar("A", "x=y"),)),
        (iter([EnvVar("A", "1")]), (EnvVar("A", "1"),)),
    ],
)
def test_envs_accepted(envs: Any, expected: tuple[EnvVar, ...]) -> None:
    """EnvVar entries or a name-to-value mapping become a tuple of EnvVar."""
    assert check.check_envs(envs) == expected


@pytest.mark.parametrize(
    "envs",
    [
        "A=1",
        [("A", "1")],
        [EnvVar("", "1")],
        [EnvVar("A=B", "1")],
        [EnvVar("A", "1"), EnvVar("A", "2")],
        {"A": 1},
        {"A": "nul\x00"},
        5,
    ],
)
def test_envs_rejected(envs: Any) -> None:
    """Non-EnvVar entries, bad names, duplicates and non-string values are refused."""
    with pytest.raises(sandboxkit.ValidationError, match="envs"):
        check.check_envs(envs)


def test_env_values_never_in_messages() -> None:
    """A rejected env entry's value does not appear in the error message."""
    with pytest.raises(sandboxkit.ValidationError) as caught:
        check.check_envs({"TOKEN": "s3cret\x00"})
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    "key",
    [
        _ssh_key(),
        _ssh_key(comment=""),
        _ssh_key("ssh-rsa"),
        _ssh_key("ecdsa-sha2-nistp256", "with spaces in comment"),
        _ssh_key("sk-ssh-ed25519@openssh.com"),
        _ssh_key() + "\n",
    ],
)
def test_ssh_public_keys_accepted(key: str) -> None:
    """OpenSSH public key lines pass, stripped of surrounding whitespace."""
    assert check.check_ssh_public_key(key) == key.strip()


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("", "one non-empty line"),
        (_ssh_key() + "\n" + _ssh_key(), "one non-empty line"),
        (PRIVATE_KEY, "private"),
        ("ssh-foo AAAA", "not an OpenSSH public key"),
        ("ssh-ed25519", "not an OpenSSH public key"),
        ("ssh-ed25519 not*base64", "not base64"),
        (_ssh_key().replace("ssh-ed25519 ", "ssh-rsa ", 1), "does not match"),
        (b"ssh-ed25519 AAAA", "must be a string"),
    ],
)  # fmt: skip
def test_ssh_public_keys_rejected(key: Any, reason: str) -> None:
    """Empty, multi-line, private, unknown-type and corrupt keys are refused."""
    with pytest.raises(sandboxkit.ValidationError, match=reason):
        check.check_ssh_public_key(key)


def test_ssh_env_from_string() -> None:
    """ssh_env builds the SSH_PUBLIC_KEY entry from key text, or under another name."""
    key = _ssh_key()
    assert sandboxkit.ssh_env(key + "\n") == EnvVar("SSH_PUBLIC_KEY", key)
    assert sandboxkit.ssh_env(key, name="AUTHORIZED_KEY").name == "AUTHORIZED_KEY"


def test_ssh_env_from_file(tmp_path: Any) -> None:
    """ssh_env reads a .pub file given as a path."""
    pub = tmp_path / "id_ed25519.pub"
    pub.write_text(_ssh_key() + "\n")
    assert sandboxkit.ssh_env(pub) == EnvVar("SSH_PUBLIC_KEY", _ssh_key())


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        ("missing", "cannot read"),
        ("private", "private"),
        ("binary", "not an OpenSSH public key"),
        ("as-str", "pathlib.Path"),
        ("bad-name", "envs name"),
    ],
)
def test_ssh_env_rejects(tmp_path: Any, setup: str, reason: str) -> None:
    """ssh_env refuses unreadable, private or binary files, a bare file name, a bad name."""
    target = tmp_path / "id.pub"
    arguments: dict[str, Any] = {"public_key": target}
    if setup == "private":
        target.write_text(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"
        )
    elif setup == "binary":
        target.write_bytes(b"\xff\xfe\x00key")
    elif setup == "as-str":
        arguments["public_key"] = "id_ed25519.pub"
    elif setup == "bad-name":
        arguments = {"public_key": _ssh_key(), "name": "A=B"}
    with pytest.raises(sandboxkit.ValidationError, match=reason) as caught:
        sandboxkit.ssh_env(**arguments)
    assert "AAAA" not in str(caught.value)  # key material is never echoed


def test_public_names_exported() -> None:
    """The v1 public names are exported and __all__ stays sorted."""
    for name in ("ssh_env", "Container", "ContainersCreated", "TemplateStatus"):
        assert name in sandboxkit.__all__
        assert hasattr(sandboxkit, name)
    assert sandboxkit.__all__ == sorted(sandboxkit.__all__)
