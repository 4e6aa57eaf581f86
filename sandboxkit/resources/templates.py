"""v2 control plane: Templates and their Builds."""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import anyio
import attrs

from .._core import operations as ops
from .._core import protocol as proto
from .._core import validation as check
from .._core.answers import unwrap_v2
from .._core.convert import unstructure
from .._core.cursors import BuildCursor, LogCursor
from .._core.options import CallOptions, RetryPolicy, Timeout
from .._http.calls import Calls, decode_reply
from ..errors import BuildFailedError, BuildWaitTimeoutError, NotFoundError, ResponseDecodeError
from ..models import (
    Build,
    BuildFailure,
    BuildStatus,
    LogEntry,
    LogPage,
    Page,
    Resources,
    TemplateCreated,
)
from ._common import AsyncStream, PagedStream

__all__ = ["BuildPager", "Templates"]


_BUILD_PAGE = Page[Build]  # subscripted once: the alias is looked up on every page otherwise


async def _fetch_build_page(
    calls: Calls, path: str, cursor: BuildCursor, options: CallOptions
) -> Page[Build]:
    """The one request for a page of Builds, for the pager and for `builds_page` alike."""
    request = proto.v2_request("GET", path, operation=ops.BUILDS_LIST, params=cursor.params())
    reply = await calls.send(request, options)
    page = decode_reply(reply, reply.payload, _BUILD_PAGE)
    request_id = reply.request_id
    if page.request_id == request_id:  # the usual case: the body carries it
        return page
    return attrs.evolve(page, request_id=request_id)


class BuildPager:
    """Builds of a Template, newest first: `async for` over Builds, `.pages()` over Pages."""

    def __init__(
        self, calls: Calls, template_id: str, page_size: int, options: CallOptions
    ) -> None:
        self._calls = calls
        self._template_id = template_id
        self._path = proto.builds_path(template_id)
        self._page_size = page_size
        self._options = options

    def __repr__(self) -> str:
        return f"BuildPager(template_id={self._template_id!r}, page_size={self._page_size})"

    async def _fetch(self, cursor: BuildCursor) -> Page[Build]:
        return await _fetch_build_page(self._calls, self._path, cursor, self._options)

    def pages(self) -> AsyncStream[Page[Build]]:
        """Iterate over whole pages as the service returns them."""
        cursor = BuildCursor(page_size=self._page_size)

        async def next_page() -> tuple[Page[Build]] | None:
            if cursor.done:
                return None
            page = await self._fetch(cursor)
            cursor.feed(page)
            return (page,)

        return PagedStream(next_page)

    def __aiter__(self) -> AsyncStream[Build]:
        cursor = BuildCursor(page_size=self._page_size)

        async def next_page() -> tuple[Build, ...] | None:
            if cursor.done:
                return None
            return cursor.feed(await self._fetch(cursor))

        return PagedStream(next_page)


class Templates:
    """Templates and Builds on the v2 control plane."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls

    async def create(
        self,
        *,
        name: str,
        resources: Resources,
        description: str | None = None,
        idc_name: str | None = None,
        labels: Mapping[str, str] | None = None,
        build: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> TemplateCreated:
        """Create a Template and its initial Build.

        With `build` the Build starts at once (combined flow); without it the Build waits for
        `start_build` (split flow, 422 in data centers that do not support it). The call is
        idempotent: one key (a fresh UUID4 unless given) is reused on every retry.

        Args:
            name: 1-64 characters of letters, digits, `_`, `-`.
            resources: `CustomResources` or `PresetResources`.
            description: at most 256 characters.
            idc_name: the owning data center; None or blank selects the org's default.
            labels: string labels for filtering.
            build: the initial Build definition, passed through as given.
            idempotency_key: 1-64 printable ASCII characters without whitespace.

        Raises:
            ValidationError: bad input, before any request.
            IdempotencyMismatchError: the key was used with a different body.
            IdempotencyKeyConsumedError: the key's Template was deleted.
        """
        body = {
            "name": check.check_template_name(name),
            "resources": unstructure(check.check_resources(resources)),
            "description": check.check_description(description),
            "idc_name": idc_name,
            "labels": check.check_labels(labels),
            "build": dict(build) if build is not None else None,
        }
        key = check.check_idempotency_key(
            idempotency_key if idempotency_key is not None else str(uuid.uuid4())
        )
        request = proto.v2_request(
            "POST",
            proto.TEMPLATES_PATH,
            operation=ops.TEMPLATES_CREATE,
            json={k: v for k, v in body.items() if v is not None},
            headers={proto.IDEMPOTENCY_KEY: key},
            keyed=True,  # safe to resend: the key makes the service answer once
        )
        reply = await self._calls.send(request, CallOptions(timeout, retry))
        data = unwrap_v2(reply.payload)
        if not isinstance(data, dict):
            raise ResponseDecodeError(
                "templates.create: no data object in the answer",
                status=reply.status,
                request_id=reply.request_id,
            )
        created = decode_reply(reply, data, TemplateCreated)
        replayed = reply.headers.get(proto.IDEMPOTENCY_REPLAYED, "").lower() == "true"
        return attrs.evolve(
            created,
            replayed=replayed,
            idempotency_key=reply.headers.get(proto.IDEMPOTENCY_KEY) or key,
            request_id=reply.request_id,
        )

    async def start_build(
        self,
        template_id: str,
        build_id: str,
        *,
        timeout: Timeout | None = None,
    ) -> Any:
        """Start a waiting Build (split flow). Never retried: a retry could start it twice.

        Returns the answer's `data` as the service sends it (its shape is not shown).
        """
        request = proto.v2_request(
            "POST",
            proto.build_path(
                check.check_path_id("template_id", template_id),
                check.check_path_id("build_id", build_id),
            ),
            operation=ops.BUILDS_START,
        )
        reply = await self._calls.send(request, CallOptions(timeout))
        return unwrap_v2(reply.payload)

    def builds(
        self,
        template_id: str,
        *,
        page_size: int = 20,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> BuildPager:
        """Builds of a Template, newest first, fetched lazily page by page.

        Example::

            async for build in client.templates.builds(template_id, page_size=50):
                print(build.id, build.status)
        """
        return BuildPager(
            self._calls,
            check.check_path_id("template_id", template_id),
            check.check_page_size(page_size),
            CallOptions(timeout, retry),
        )

    async def builds_page(
        self,
        template_id: str,
        *,
        page: int = 1,
        page_size: int = 20,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> Page[Build]:
        """One page of a Template's Builds, newest first: one request, for callers that show
        or jump to page `page` themselves (`builds()` walks them all).

        Example::

            page = await client.templates.builds_page(template_id, page=2, page_size=50)
            print(page.total, [b.id for b in page.items])
        """
        cursor = BuildCursor(
            page_size=check.check_page_size(page_size), page=check.check_page(page)
        )
        path = proto.builds_path(check.check_path_id("template_id", template_id))
        return await _fetch_build_page(self._calls, path, cursor, CallOptions(timeout, retry))

    async def get_build(
        self,
        template_id: str,
        build_id: str,
        *,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> Build | None:
        """Find one Build by scanning the list (the interface shows no single-Build read)."""
        async for build in self.builds(template_id, page_size=100, timeout=timeout, retry=retry):
            if build.id == build_id:
                return build
        return None

    async def wait_for_build(
        self,
        template_id: str,
        build_id: str,
        *,
        timeout: float | Timeout | None = 600.0,
        poll_interval: float = 0.5,
        max_poll_interval: float = 5.0,
        raise_on_failure: bool = False,
        retry: RetryPolicy | None = None,
    ) -> Build:
        """Wait until a Build is final and return it: status `ready` or `failed`, or any
        status once it has `finished_at` or a `failure` (`Build.is_finished`).

        It polls `get_build` at once, then after `poll_interval` seconds, doubling the wait
        up to `max_poll_interval`, until the Build is final or `timeout` has passed (a poll
        still running then is abandoned).

        Args:
            timeout: how long to wait in all, polls included, in seconds (None: no limit);
                or a `Timeout`, whose `total` is that limit and whose `connect` and `read`
                apply to each poll.
            poll_interval: the first wait between two polls, in seconds.
            max_poll_interval: the longest wait between two polls, in seconds.
            raise_on_failure: raise `BuildFailedError` for a failed Build, not return it.
            retry: the retry policy of each poll.

        Returns:
            The final Build: check `status` (a `BuildStatus`, or the string of a status
            sandboxkit does not know) and `failure`.

        Raises:
            ValidationError: an empty id, or a timeout or interval that is not a positive
                number of seconds (before any request).
            NotFoundError: no such Template (the service's 404), or no Build `build_id`
                among its Builds (status 404: the list was read through, without it).
            BuildWaitTimeoutError: an `APITimeoutError`: `timeout` passed before the Build
                was final; its `build` is the last one seen. The Build itself goes on.
            BuildFailedError: with `raise_on_failure`, the Build failed.
            APIError, TransportError: a poll failed, its retries spent.

        Example::

            build = await client.templates.wait_for_build(template_id, build_id, timeout=900)
            if build.status == sandboxkit.BuildStatus.FAILED:
                print(build.failure)
        """
        ids = (
            check.check_path_id("template_id", template_id),
            check.check_path_id("build_id", build_id),
        )
        limit, per_poll, intervals = check.check_wait(timeout, poll_interval, max_poll_interval)
        options, seen = CallOptions(per_poll, retry), list[Build]()
        # The injected clock decides when to stop (tests move it); this scope, on the event
        # loop's clock, also ends a poll still running at the deadline.
        with anyio.move_on_after(limit):
            build = await self._poll_build(ids, intervals, limit, options, seen)
            if build is not None and raise_on_failure and (failed := _failure_of(build)):
                raise failed
            if build is not None:
                return build
        last = seen[-1] if seen else None
        raise BuildWaitTimeoutError(
            f"templates.wait_for_build: build {ids[1]} of template {ids[0]} was not final "
            f"after {limit}s (last status: {last.status if last else None})",
            template_id=ids[0],
            build_id=ids[1],
            timeout=float(limit or 0),
            build=last,
        )

    async def _poll_build(
        self,
        ids: tuple[str, str],
        intervals: tuple[float, float],
        limit: float | None,
        options: CallOptions,
        seen: list[Build],
    ) -> Build | None:
        """The Build once final, or None when `limit` seconds pass first; `seen` holds the
        last Build read."""
        deadline = None if limit is None else self._calls.clock() + limit
        delay, longest = intervals
        while True:
            build = await self.get_build(*ids, timeout=options.timeout, retry=options.retry)
            if build is None:
                raise NotFoundError(
                    f"templates.wait_for_build: template {ids[0]} has no build {ids[1]}",
                    status=404,
                    surface="v2",
                )
            seen[:] = (build,)
            if build.is_finished:
                return build
            left = None if deadline is None else deadline - self._calls.clock()
            if left is not None and left <= delay:
                await self._calls.sleep(max(left, 0.0))  # the outer scope may end it first
                return None
            await self._calls.sleep(delay)
            delay = min(longest, delay * 2)

    def build_logs(
        self,
        template_id: str,
        build_id: str,
        *,
        level: str | None = None,
        offset: int = 0,
        limit: int = 100,
        follow: bool = False,
        poll_interval: float = 0.5,
        max_poll_interval: float = 5.0,
        raise_on_failure: bool = False,
        timeout: Timeout | None = None,
        retry: RetryPolicy | None = None,
    ) -> AsyncStream[LogEntry]:
        """Log entries of a Build, following `next_offset` while `has_more`.

        With `follow=True` it keeps polling (backing off from `poll_interval` to
        `max_poll_interval`) until the Build is final (`Build.is_finished`), then drains what
        is left; `raise_on_failure` then raises `BuildFailedError` for a failed Build.

        Returns:
            A `sandboxkit.AsyncStream` of `LogEntry`: `async for` it, and `async with` it to
            stop early.
        """
        cursor = LogCursor(
            offset=check.check_log_offset(offset),
            limit=check.check_log_limit(limit),
            level=check.check_log_level(level),
            following=follow,
        )
        ids = (
            check.check_path_id("template_id", template_id),
            check.check_path_id("build_id", build_id),
        )
        options = CallOptions(timeout, retry)
        return AsyncStream(
            self._logs(
                ids, cursor, follow, (poll_interval, max_poll_interval), raise_on_failure, options
            )
        )

    async def _log_page(
        self, ids: tuple[str, str], cursor: LogCursor, options: CallOptions
    ) -> LogPage:
        request = proto.v2_request(
            "GET",
            proto.build_logs_path(*ids),
            operation=ops.BUILDS_LOGS,
            params=cursor.params(),
        )
        reply = await self._calls.send(request, options)
        return decode_reply(reply, unwrap_v2(reply.payload), LogPage)

    async def _logs(
        self,
        ids: tuple[str, str],
        cursor: LogCursor,
        follow: bool,
        intervals: tuple[float, float],
        raise_on_failure: bool,
        options: CallOptions,
    ) -> AsyncGenerator[LogEntry, None]:
        delay, max_delay = intervals
        finished: Build | None = None
        while True:
            entries, more = cursor.feed(await self._log_page(ids, cursor, options))
            for entry in entries:
                yield entry
            if entries:
                delay = intervals[0]
            if more:
                continue
            if not follow or finished is not None:
                break
            build = await self.get_build(*ids, timeout=options.timeout, retry=options.retry)
            if build is None or build.is_finished:
                finished = build or Build(id=ids[1])
                continue  # one last drain: entries written just before the end
            await self._calls.sleep(delay)
            delay = min(max_delay, delay * 2)
        if raise_on_failure and finished is not None and (failed := _failure_of(finished)):
            raise failed


def _failure_of(build: Build) -> BuildFailedError | None:
    """The error for a failed Build (a `failure`, or the status `failed`), else None."""
    if build.failure is None and build.status != BuildStatus.FAILED:
        return None
    failure = build.failure or BuildFailure()
    return BuildFailedError(build_id=build.id, code=failure.code, message=failure.message)
