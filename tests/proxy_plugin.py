"""A proxy.py plugin, loaded by the proxy's own process (tests/proxy_support.py starts it).

It resolves the emulator's names (`*.sandbox.test`, `*.localhost`) to 127.0.0.1, as the
system resolver here does not, and appends each request it reads to the JSON-lines file
named by `$SANDBOXKIT_TEST_PROXY_RECORD`: for a plain-http request the request itself, for
an https one the CONNECT that opens its tunnel (what goes through the tunnel stays opaque).
A request the proxy refuses (wrong credentials) is not recorded: it never gets this far.
"""

from __future__ import annotations

import json
import os
from typing import Any

from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

RECORD_ENV = "SANDBOXKIT_TEST_PROXY_RECORD"
_LOOPBACK_SUFFIXES = (".sandbox.test", ".localhost")


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("latin-1")


class LoopbackRecorder(HttpProxyBasePlugin):
    """Loopback for the emulator's names; one record per request read."""

    def resolve_dns(self, host: str, port: int) -> tuple[str | None, Any]:
        name = host.lower().rstrip(".")
        if name in ("localhost", "sandbox.test") or name.endswith(_LOOPBACK_SUFFIXES):
            return "127.0.0.1", None
        return None, None

    def handle_client_request(self, request: HttpParser) -> HttpParser:
        record = {
            "method": _text(request.method),
            "host": _text(request.host),
            "port": request.port,
            "path": _text(request.path),
            "headers": {_text(k): _text(v) for k, v in (request.headers or {}).values()},
        }
        with open(os.environ[RECORD_ENV], "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")
        return request
