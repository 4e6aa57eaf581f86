"""A data-plane server fast enough never to set the pace of a small-file fan-out (case 9).

An asyncio `Protocol` answering `GET /files?path=...` on any `{key}.sandbox.test` host with
one small file from memory, keep-alive, after checking the host's `X-Access-Token` (the
tokens are `_server.token_for`, computed once per host, not per request). Enough HTTP/1.1
for the three clients of case 9 and no more: request heads are read up to their blank
line, bodies are not expected, pipelined requests are answered in order. Anything it does
not understand gets a 400 and a close. Speaks `_server.ServerProcess`'s protocol: one JSON
line when ready, then one answer per command (`requests` counts what it served and the
connections it accepted since the last time it was asked).
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from typing import Any, cast

from _server import DATA_PLANE_SUFFIX, _announce, _command_loop, die_with_parent, token_for

_BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
_DENIED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n"


class _Files(asyncio.Protocol):
    """One connection: heads in, the file (or a refusal) out."""

    def __init__(self, server: _Server) -> None:
        self._server = server
        self._buffer = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport, but not always an asyncio.Transport: uvloop's do not subclass
        # asyncio's classes, so isinstance() would refuse them.
        self._transport = cast(asyncio.Transport, transport)
        self._server.connects += 1

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer + data if self._buffer else data
        transport = self._transport
        assert transport is not None
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head, buffer = buffer[:end], buffer[end + 4 :]
            answer = self._server.answer(head)
            transport.write(answer)
            if answer is _BAD:
                transport.close()
                return
        self._buffer = buffer


class _Server:
    def __init__(self, payload: bytes, tokens: dict[bytes, bytes]) -> None:
        self.tokens = tokens
        self.served = 0
        self.connects = 0
        self._ok = (
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            b"Accept-Ranges: bytes\r\nContent-Length: %d\r\n\r\n" % len(payload)
        ) + payload

    def answer(self, head: bytes) -> bytes:
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"GET /files?"):
            return _BAD
        host = token = None
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"host":
                host = value.strip().split(b".", 1)[0]
            elif name == b"x-access-token":
                token = value.strip()
        if host is None or token is None or self.tokens.get(host) != token:
            return _DENIED
        self.served += 1
        return self._ok


async def _serve(config: dict[str, Any]) -> None:
    payload = random.Random(config.get("seed", 9)).randbytes(config["file_size"])
    keys = [f"sbx-{index:04d}" for index in range(config["hosts"])]
    secret = config["secret"]
    tokens = {key.encode(): token_for(secret, key).encode() for key in keys}
    server = _Server(payload, tokens)
    listener = await asyncio.get_running_loop().create_server(
        lambda: _Files(server), "127.0.0.1", 0, backlog=4096
    )
    port = listener.sockets[0].getsockname()[1]
    _announce({"port": port, "domain": f"{DATA_PLANE_SUFFIX}:{port}"})

    def handle(command: dict[str, Any]) -> dict[str, Any]:
        if command.get("cmd") == "requests":
            served, server.served = server.served, 0
            connects, server.connects = server.connects, 0
            return {"served": served, "connects": connects}
        return {"error": f"unknown command {command.get('cmd')!r}"}

    await _command_loop(handle)
    listener.close()


def main(argv: list[str]) -> int:
    """Serve with the JSON config `argv[1]` (`argv[0]` is the kind, always `fast`)."""
    die_with_parent()
    asyncio.run(_serve(json.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
