"""What every resource shares: per-call overrides and closable async iterators."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["AsyncStream"]

T = TypeVar("T")


class AsyncStream(Generic[T]):
    """An async iterator that can also be used with `async with` to close it early.

    Leaving the `async with` block (or breaking out of `async for` and calling `aclose()`)
    releases any connection the stream holds at once.
    """

    def __init__(self, generator: AsyncGenerator[T, None]) -> None:
        self._generator = generator

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        return await self._generator.__anext__()

    async def aclose(self) -> None:
        """Stop the stream and release what it holds."""
        await self._generator.aclose()

    async def __aenter__(self) -> AsyncStream[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
