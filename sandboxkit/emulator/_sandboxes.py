"""Sandboxes: a key, a token, a data center, and a directory on disk for the filesystem."""

from __future__ import annotations

import hmac
import secrets
import shutil
from pathlib import Path

import attrs

from ._values import Idc
from ._wire import DataProblem

__all__ = ["UNAUTHORIZED_MESSAGE", "Sandbox", "SandboxRegistry"]

# One message for every 401, so a caller cannot tell a missing sandbox from a bad token.
UNAUTHORIZED_MESSAGE = "missing or invalid access token"


@attrs.define(slots=True)
class Sandbox:
    """One sandbox; ``fs`` is the directory that stands for its ``/``."""

    key: str
    token: str
    idc: Idc
    home: Path
    token_expired: bool = False

    @property
    def fs(self) -> Path:
        """The directory backing the sandbox's filesystem root."""
        return self.home / "fs"

    @property
    def staging(self) -> Path:
        """Where uploads are streamed before they are renamed into place (outside ``fs``)."""
        return self.home / "staging"


class SandboxRegistry:
    """Live sandboxes, and the tokens of deleted ones (so those get 404, not 401)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.live: dict[str, Sandbox] = {}
        self._deleted_tokens: dict[str, str] = {}

    def create(self, idc: Idc) -> Sandbox:
        """A new sandbox with ``/home/user``, ``/tmp`` and ``/root`` directories."""
        key = "sbx-" + secrets.token_hex(8)
        sandbox = Sandbox(
            key=key, token="sat-" + secrets.token_urlsafe(24), idc=idc, home=self.base / key
        )
        for directory in ("home/user", "tmp", "root"):
            (sandbox.fs / directory).mkdir(parents=True)
        sandbox.staging.mkdir()
        self.live[key] = sandbox
        return sandbox

    def get(self, key: str) -> Sandbox:
        """The live sandbox ``key``.

        Raises:
            KeyError: no live sandbox has that key.
        """
        return self.live[key]

    def forget(self, key: str) -> Sandbox:
        """Remove sandbox ``key`` from the live set; its files are left to :meth:`erase`."""
        sandbox = self.live.pop(key)
        self._deleted_tokens[sandbox.token] = key
        return sandbox

    @staticmethod
    def erase(sandbox: Sandbox) -> None:
        """Delete a sandbox's files (blocking: run it off the event loop)."""
        shutil.rmtree(sandbox.home, ignore_errors=True)

    def authenticate(self, host_key: str | None, token: str | None) -> Sandbox:
        """The sandbox a data-plane request may use.

        Raises:
            DataProblem: 404 for a deleted sandbox asked with its own token; 401 with one
                identical message for a missing, malformed, expired or foreign token.
        """
        if token and host_key is not None and self._deleted_tokens.get(token) == host_key:
            raise DataProblem(404, "sandbox not found")
        sandbox = self.live.get(host_key) if host_key is not None else None
        if (
            sandbox is None
            or not token
            or sandbox.token_expired
            or not hmac.compare_digest(
                sandbox.token.encode(), token.encode("utf-8", "surrogateescape")
            )
        ):
            raise DataProblem(401, UNAUTHORIZED_MESSAGE)
        return sandbox
