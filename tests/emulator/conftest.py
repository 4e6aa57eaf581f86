"""The emulator tests' house rule; fixtures are in tests/conftest.py, helpers in support.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_server_errors(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail any test during which a server logged an error (an unhandled exception)."""
    caplog.set_level(logging.WARNING)
    yield
    errors = [r for r in caplog.get_records("call") if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
