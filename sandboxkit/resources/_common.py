"""What every resource shares: per-call overrides and closable async iterators."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Sequence
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["AsyncStream", "PagedStream"]

T = TypeVar("T")


class AsyncStream(Generic[T]):
    """An async iterator that can also be used with `async with` to close it early.

    Public as `sandboxkit.AsyncStream`: what `files.iter_bytes`, `templates.build_logs` and
    the Build pager (`async for`, `.pages()`) return. Leaving the `async with` block (or
    breaking out of `async for` and calling `aclose()`) releases any connection the stream
    holds at once.
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


class PagedStream(AsyncStream[T]):
    """The items of pages fetched one at a time, handed out without a generator per item.

    `next_page` returns the next page's items, or None once there is no next page. A page
    call that fails (or is cancelled) leaves the stream where it was: the next `__anext__`
    asks for that page again.
    """

    def __init__(self, next_page: Callable[[], Awaitable[Sequence[T] | None]]) -> None:
        self._next_page = next_page
        self._buffer: Iterator[T] = iter(())
        self._done = False

    async def __anext__(self) -> T:
        # Most calls are served from the page in hand; only a page boundary awaits.
        for item in self._buffer:
            return item
        while not self._done:
            items = await self._next_page()
            if items is None:
                self._done = True
                break
            self._buffer = iter(items)
            for item in self._buffer:
                return item
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop the stream; it holds no connection between pages."""
        self._done = True
        self._buffer = iter(())
