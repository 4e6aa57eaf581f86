"""Paging state for Builds and Build logs. Pure: the resources do the requests.

Each cursor says what to ask for next and digests an answer, guarding against servers whose
paging would loop forever (docs/design.md section 9).
"""

from __future__ import annotations

import attrs

from .. import models
from ..errors import PaginationError

__all__ = ["BuildCursor", "LogCursor"]

# Empty pages that still claim `has_more` before we call the cursor stuck.
MAX_EMPTY_PAGES = 3


@attrs.define
class BuildCursor:
    """Page-numbered Build listing: stops at `total` or an empty page, never repeats an id."""

    page_size: int
    page: int = 1
    done: bool = False
    seen: set[str] = attrs.field(factory=set)
    stale_pages: int = 0

    def params(self) -> list[tuple[str, str]]:
        """Query for the next page."""
        return [("page", str(self.page)), ("page_size", str(self.page_size))]

    def feed(self, page: models.Page[models.Build]) -> tuple[models.Build, ...]:
        """Digest one page; returns the Builds not yielded before (new builds shift pages)."""
        seen = self.seen
        fresh = tuple([b for b in page.items if b.id not in seen])
        seen.update([b.id for b in fresh])
        # New builds shift items onto later pages, so one repeated page is normal; page
        # after page of nothing new is a server that would keep us asking up to its `total`.
        self.stale_pages = 0 if fresh or not page.items else self.stale_pages + 1
        if self.stale_pages >= MAX_EMPTY_PAGES:
            raise PaginationError(
                f"{MAX_EMPTY_PAGES} build pages in a row held only builds already listed"
            )
        size = page.page_size if page.page_size > 0 else self.page_size
        if not page.items or self.page * size >= page.total:
            self.done = True
        self.page += 1
        return fresh


@attrs.define
class LogCursor:
    """Offset-paged logs: follows `next_offset` while `has_more`, refuses to go backwards."""

    offset: int
    limit: int
    level: str | None = None
    # A follower expects a live build to claim more than it has yet; it polls instead.
    following: bool = False
    empty_pages: int = 0

    def params(self) -> list[tuple[str, str]]:
        """Query for the next page."""
        query = [("offset", str(self.offset)), ("limit", str(self.limit))]
        if self.level is not None:
            query.append(("level", self.level))
        return query

    def feed(self, page: models.LogPage) -> tuple[tuple[models.LogEntry, ...], bool]:
        """Digest one page; returns (new entries, whether to ask again right away).

        `False` means caught up: nothing more exists now (a follower polls later).
        """
        entries = tuple(e for e in page.entries if e.offset >= self.offset)
        if page.next_offset < self.offset:
            raise PaginationError(
                f"log cursor went backwards: next_offset {page.next_offset} < {self.offset}"
            )
        if not page.has_more:
            self.offset = max(self.offset, page.next_offset)
            self.empty_pages = 0
            return entries, False
        if page.next_offset == self.offset:
            if entries:
                raise PaginationError(
                    f"log cursor does not advance: next_offset stays {page.next_offset} "
                    "while entries keep coming"
                )
            self.empty_pages += 1
            if self.empty_pages >= MAX_EMPTY_PAGES and not self.following:
                raise PaginationError(
                    f"{MAX_EMPTY_PAGES} empty log pages at offset {self.offset} still "
                    "claim has_more"
                )
            return entries, False
        # docs/design.md section 9: a few empty pages that still claim more is a loop, even when
        # the offset creeps forward; a follower polls instead.
        self.empty_pages = 0 if entries else self.empty_pages + 1
        self.offset = page.next_offset
        if self.empty_pages >= MAX_EMPTY_PAGES and not self.following:
            raise PaginationError(
                f"{MAX_EMPTY_PAGES} empty log pages in a row still claim has_more"
            )
        return entries, True
