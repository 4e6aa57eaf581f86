"""TLS contexts for the emulator, from a caller-supplied CA (trustme's, typically)."""

from __future__ import annotations

import ssl
from typing import Any, Protocol

from ._resolver import DATA_PLANE_SUFFIX

__all__ = ["CertificateAuthority", "client_context", "server_context"]


class CertificateAuthority(Protocol):
    """What the emulator needs from a CA; ``trustme.CA`` fits."""

    def issue_cert(self, *identities: str) -> Any:
        """A leaf certificate with ``configure_cert(ctx)``."""

    def configure_trust(self, ctx: ssl.SSLContext) -> None:
        """Make ``ctx`` trust this CA."""


def server_context(ca: CertificateAuthority, host: str) -> ssl.SSLContext:
    """A server context whose certificate covers the console and every sandbox host."""
    identities = ["127.0.0.1", "localhost", DATA_PLANE_SUFFIX, "*." + DATA_PLANE_SUFFIX]
    if host not in identities and host not in ("0.0.0.0", "::"):
        identities.append(host)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*identities).configure_cert(ctx)
    return ctx


def client_context(ca: CertificateAuthority) -> ssl.SSLContext:
    """A client context that trusts ``ca`` (and verifies host names)."""
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx
