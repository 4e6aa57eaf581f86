"""The ceiling contender of case 1: what this machine can do without asyncio or aiohttp.

A blocking socket, an HTTP/1.1 GET written by hand, the answer's head parsed just enough
(status, `Content-Length`), then the body `recv_into` a ring of 4 MiB buffers. Each full
buffer goes to a hash thread and a write thread at once (hashlib and os.write release the
GIL on large buffers), and is filled again only once both are done with it. No framework
can beat this on one connection: sandboxkit's download is reported as a ratio against it.
"""

from __future__ import annotations

import hashlib
import os
import queue
import socket
import threading
from pathlib import Path
from urllib.parse import quote

RING_BUFFER = 4 << 20
RING_SIZE = 4
_HEAD_LIMIT = 64 << 10


def ceiling_download(
    port: int, host: str, token: str, remote: str, dest: Path, hashing: bool
) -> str | None:
    """GET `remote` from 127.0.0.1:`port` into `dest`; returns the body's sha256 (or None)."""
    ring = [bytearray(RING_BUFFER) for _ in range(RING_SIZE)]
    hashed: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    written: queue.SimpleQueue[tuple[int, int] | None] = queue.SimpleQueue()
    digest = hashlib.sha256() if hashing else None
    users = 2 if hashing else 1
    done = [threading.Semaphore(0) for _ in ring]  # released by each user when finished
    failures: list[BaseException] = []

    def hasher() -> None:
        assert digest is not None
        while (item := hashed.get()) is not None:
            index, size = item
            digest.update(memoryview(ring[index])[:size])
            done[index].release()

    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def writer() -> None:
        try:
            while (item := written.get()) is not None:
                index, size = item
                view = memoryview(ring[index])[:size]
                while view:
                    view = view[os.write(fd, view) :]
                done[index].release()
        except BaseException as exc:  # reported by the reader
            failures.append(exc)
            for sem in done:
                sem.release(users)

    threads = [threading.Thread(target=writer)]
    if hashing:
        threads.append(threading.Thread(target=hasher))
    for thread in threads:
        thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            request = (
                f"GET /files?path={quote(remote, safe='/')} HTTP/1.1\r\n"
                f"Host: {host}\r\nX-Access-Token: {token}\r\n"
                "Accept-Encoding: identity\r\nConnection: close\r\n\r\n"
            )
            sock.sendall(request.encode())
            length, held = _read_head(sock, ring[0])
            left = length
            index = 0
            first = True
            while left:
                buffer = ring[index]
                if not first:
                    for _ in range(users):
                        done[index].acquire()  # both threads finished with its last fill
                    if failures:
                        raise failures[0]
                view = memoryview(buffer)
                filled = held if first and index == 0 else 0
                goal = min(RING_BUFFER, left)
                while filled < goal:
                    got = sock.recv_into(view[filled:goal])
                    if not got:
                        raise ConnectionError(f"the body ended {left - filled} bytes early")
                    filled += got
                left -= filled
                written.put((index, filled))
                if hashing:
                    hashed.put((index, filled))
                index = (index + 1) % RING_SIZE
                if index == 0:
                    first = False
    finally:
        written.put(None)
        hashed.put(None)
        for thread in threads:
            thread.join()
        os.close(fd)
    if failures:
        raise failures[0]
    return digest.hexdigest() if digest is not None else None


def _read_head(sock: socket.socket, buffer: bytearray) -> tuple[int, int]:
    """Read the answer's head into `buffer`; returns the body's length and how many of its
    bytes already sit at the start of `buffer` (moved there from behind the head)."""
    view = memoryview(buffer)
    filled = 0
    while True:
        got = sock.recv_into(view[filled:_HEAD_LIMIT])
        if not got:
            raise ConnectionError("the connection closed before the answer's head")
        filled += got
        end = buffer.find(b"\r\n\r\n", 0, filled)
        if end >= 0:
            break
        if filled >= _HEAD_LIMIT:
            raise ConnectionError("the answer's head is too large")
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    if status != 200:
        raise ConnectionError(f"the answer is {lines[0]!r}")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if length is None:
        raise ConnectionError("the answer has no Content-Length")
    body = filled - (end + 4)
    buffer[:body] = buffer[end + 4 : filled]
    return length, body
