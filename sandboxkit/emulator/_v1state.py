"""Version 1 records: the organization, OAuth codes, API keys, images, templates, containers,
elastic IPs and the default VPC."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from ._wire import iso

__all__ = ["ApiKey", "V1State"]

# The platform's own organization owns the public images and official templates.
PLATFORM_ORG = "00000000-0000-4000-8000-000000000001"


@attrs.define(slots=True)
class ApiKey:
    """A created organization API key."""

    name: str
    scope: str
    expires_at: int | None


def _partition(size: str) -> list[dict[str, str]]:
    return [
        {"fileSystem": "vfat", "mountPoint": "/boot/efi", "name": "efi", "size": "512M"},
        {"fileSystem": "ext4", "mountPoint": "/", "name": "root", "size": size},
    ]


class V1State:
    """All v1 records of the one emulated organization."""

    def __init__(self, clock: Callable[[], float], idc_names: list[str]) -> None:
        self.clock = clock
        self.idc_names = idc_names
        self.org_id = str(uuid.uuid4())
        self.org_name = "Emulated Organization"
        self.break_org_reads = False
        self.oauth_codes: set[str] = set()
        self.access_tokens: set[str] = set()
        self.api_keys: dict[str, ApiKey] = {}
        self.oauth_code = self.issue_oauth_code()
        created = iso(clock() - 86400.0)
        idc = idc_names[0]
        self.images: list[dict[str, Any]] = [
            self._image("ubuntu-22.04", "ubuntu", "22.04", "UEFI", "Public", idc, created),
            self._image("debian-12", "debian", "12", "UEFI", "Public", idc, created),
            self._image("centos-7.9_legacy", "centos", "7.9", "Legacy", "Customized", idc, created),
        ]
        self.templates: list[dict[str, Any]] = [
            self._template("Ubuntu 22.04 Base", "ubuntu/base", True, "published"),
            self._template("python-3.12", "python/3.12", True, "published"),
            self._template("team agent v2", "org/team-agent", False, "draft"),
        ]
        # One record with an unusual shape: missing fields, an unknown status, extra keys.
        self.templates.append(
            {
                "id": str(uuid.uuid4()),
                "name": "legacy-image",
                "path": "legacy/image",
                "status": "archived",
                "osFamily": "linux",
                "tags": ["legacy"],
                "official": True,
            }
        )
        self.containers: dict[str, dict[str, Any]] = {}
        self.elastic_ips: dict[str, dict[str, Any]] = {
            str(uuid.uuid4()): {"address": f"203.0.113.{n}", "instanceID": None} for n in (10, 11)
        }
        self.vpcs: dict[str, dict[str, Any]] = {
            str(uuid.uuid4()): {"name": "default", "isDefault": True}
        }

    def _image(
        self, name: str, series: str, version: str, boot: str, kind: str, idc: str, created: str
    ) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "name": name,
            "supportedProducts": ["sku-small", "sku-medium"],
            "BootMode": boot,
            "DefaultPartitionTable": _partition("40G"),
            "OSArchitecture": "x86_64",
            "OSSeries": series,
            "OSVersion": version,
            "SystemDiskSize": "40",
            "icon": f"/static/icons/{series}.svg",
            "path": f"images/{name}",
            "idc": idc,
            "orgId": PLATFORM_ORG if kind == "Public" else self.org_id,
            "createdAt": created,
            "type": kind,
        }

    def _template(self, name: str, path: str, official: bool, status: str) -> dict[str, Any]:
        return {
            "id": str(uuid.uuid4()),
            "official": official,
            "name": name,
            "path": path,
            "orgId": PLATFORM_ORG if official else self.org_id,
            "credential": {"secret": "", "username": "" if official else "agent"},
            "description": "" if official else "the team's agent image",
            "status": status,
        }

    def issue_oauth_code(self) -> str:
        """A fresh one-time OAuth authorization code."""
        code = "oac-" + secrets.token_urlsafe(16)
        self.oauth_codes.add(code)
        return code

    def exchange(self, code: str) -> str | None:
        """The access token for a one-time ``code``; None when the code is not valid."""
        if code not in self.oauth_codes:
            return None
        self.oauth_codes.discard(code)
        token = "oat-" + secrets.token_urlsafe(24)
        self.access_tokens.add(token)
        return token

    def create_api_key(self, name: str, scope: str, expires_at: int | None) -> str:
        """Store a new API key and return its value (shown once)."""
        key = "sk-org-" + secrets.token_urlsafe(24)
        self.api_keys[key] = ApiKey(name, scope, expires_at)
        return key

    def token_ok(self, token: str) -> bool:
        """Whether ``token`` is a live access token or an unexpired API key."""
        if token in self.access_tokens:
            return True
        api_key = self.api_keys.get(token)
        if api_key is None:
            return False
        return api_key.expires_at is None or self.clock() < api_key.expires_at

    def template(self, template_id: str) -> dict[str, Any] | None:
        """The v1 template with id ``template_id``."""
        for record in self.templates:
            if record["id"] == template_id.lower():
                return record
        return None
