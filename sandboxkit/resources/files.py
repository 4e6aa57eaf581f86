"""Data plane file transfer (placeholder until the files issue lands)."""

from __future__ import annotations

from .._calls import Calls

__all__ = ["Files"]


class Files:
    """File download and upload on one sandbox."""

    def __init__(self, calls: Calls, origin: str, token: str) -> None:
        self._calls = calls
        self._origin = origin
        self._token = token
