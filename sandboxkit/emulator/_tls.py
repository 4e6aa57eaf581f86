"""TLS contexts for the emulator, from a caller-supplied CA (trustme's, typically)."""

from __future__ import annotations

import ssl
from collections import OrderedDict
from typing import Any, Protocol

__all__ = ["CertificateAuthority", "client_context", "server_context"]

# Per-host certificates kept at once (see _PerHostCertificates); older ones are made again.
_CACHED_HOSTS = 1024


class CertificateAuthority(Protocol):
    """What the emulator needs from a CA; ``trustme.CA`` fits."""

    def issue_cert(self, *identities: str) -> Any:
        """A leaf certificate with ``configure_cert(ctx)``."""

    def configure_trust(self, ctx: ssl.SSLContext) -> None:
        """Make ``ctx`` trust this CA."""


def _leaf_context(ca: CertificateAuthority, *identities: str) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*identities).configure_cert(ctx)
    return ctx


class _PerHostCertificates:
    """An SNI callback giving each ``{label}.{domain}`` host a certificate naming it.

    TLS clients refuse a wildcard over a single label (``*.localhost`` does not match
    ``key.localhost`` in OpenSSL, nor in browsers), so under a one-label domain each sandbox
    host is issued its own certificate when a client first names it (about 2 ms).
    """

    def __init__(self, ca: CertificateAuthority, domain: str) -> None:
        self._ca = ca
        self._suffix = "." + domain
        self._contexts: OrderedDict[str, ssl.SSLContext] = OrderedDict()

    def __call__(self, sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        host = (name or "").lower().rstrip(".")
        label = host.removesuffix(self._suffix)
        if not host.endswith(self._suffix) or not label or "." in label:
            return  # the default certificate answers (and fails to match a stranger)
        ctx = self._contexts.pop(host, None) or _leaf_context(self._ca, host)
        self._contexts[host] = ctx
        if len(self._contexts) > _CACHED_HOSTS:
            self._contexts.popitem(last=False)
        sock.context = ctx


def server_context(ca: CertificateAuthority, host: str, domain: str) -> ssl.SSLContext:
    """A server context whose certificates cover the console and every sandbox host.

    Args:
        ca: the CA issuing them.
        host: the listening address (named in the certificate unless a wildcard address).
        domain: the data-plane domain: sandbox hosts are ``{key}.{domain}``.
    """
    identities = ["127.0.0.1", "localhost", domain, "*." + domain]
    if host not in identities and host not in ("0.0.0.0", "::"):
        identities.append(host)
    ctx = _leaf_context(ca, *dict.fromkeys(identities))
    if "." not in domain:
        ctx.sni_callback = _PerHostCertificates(ca, domain)
    return ctx


def client_context(ca: CertificateAuthority) -> ssl.SSLContext:
    """A client context that trusts ``ca`` (and verifies host names)."""
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx
