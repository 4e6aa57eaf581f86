"""Case 3: small control-plane calls, sandboxkit against raw aiohttp + json (+ cattrs).

Server: the minimal server replaying build pages that the real emulator rendered (the
emulator's per-request work, journal and sorting included, would otherwise dominate).

Two workloads: walking every build of a large template (page_size 100, one page after the
other), and many list calls of a small template whose builds fit in one page, at
concurrency 1 and 64. The raw contenders do what a careful hand-written client does: one
session, `json.loads`, and (for the typed variant) the same cattrs decoding into
`Page[Build]` that sandboxkit does. Decoding is also timed on its own, without any I/O.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from _measure import Contender, Sample, median, paired_ratio, paired_rounds
from _report import CaseResult, Column, target
from _server import PAGE_SIZE_LARGE, PAGE_SIZE_SMALL, ServerProcess

import sandboxkit
from sandboxkit._core.convert import structure
from sandboxkit.models import Build, Page

SERVER = (
    "minimal aiohttp.web (benchmarks/_server.py) replaying pages rendered by sandboxkit.emulator"
)
CONCURRENCY = (1, 64)
SDK_PAGE = "sandboxkit builds_page()"
SDK_PAGES = "sandboxkit builds().pages() first page"
SDK_ITEMS = "sandboxkit builds() items of one page"


async def spread(count: int, concurrency: int, call: Callable[[], Awaitable[int]]) -> int:
    """Make `count` calls with at most `concurrency` in flight; returns the items seen."""
    left = count
    seen = 0

    async def worker() -> None:
        nonlocal left, seen
        while left > 0:
            left -= 1
            items = await call()  # not `seen += await ...`: that reads `seen` before waiting
            seen += items

    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, count)):
            group.create_task(worker())
    return seen


class RawClient:
    """Hand-written control-plane client: one aiohttp session, json, optional cattrs."""

    def __init__(self, session: aiohttp.ClientSession, api_key: str, typed: bool) -> None:
        self._session = session
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._typed = typed

    async def page(self, template_id: str, page: int, size: int) -> tuple[int, int]:
        """Fetch one page; returns (items on it, total)."""
        async with self._session.get(
            f"/api/v2/templates/{template_id}/builds",
            params={"page": str(page), "page_size": str(size)},
            headers=self._headers,
        ) as response:
            response.raise_for_status()
            body = await response.read()
        payload = json.loads(body)
        if self._typed:
            typed = structure(payload, Page[Build])
            return len(typed.items), typed.total
        return len(payload["items"]), int(payload["total"])

    async def walk(self, template_id: str, size: int) -> int:
        """Every build of the template, page after page."""
        seen, page = 0, 1
        while True:
            items, total = await self.page(template_id, page, size)
            seen += items
            if not items or page * size >= total:
                return seen
            page += 1


def decode_cost(body: bytes, repeat: int) -> tuple[float, float]:
    """CPU microseconds per `json.loads`, and per `json.loads` + cattrs, of one body."""
    started = time.process_time()
    for _ in range(repeat):
        json.loads(body)
    loads = (time.process_time() - started) / repeat
    started = time.process_time()
    for _ in range(repeat):
        structure(json.loads(body), Page[Build])
    typed = (time.process_time() - started) / repeat
    return loads * 1e6, typed * 1e6


async def run(builds: int, calls: int, rounds: int) -> CaseResult:
    """Run case 3 with `builds` builds to walk and `calls` single-page list calls."""
    small_builds = 5
    config = {"data_dir": ".", "builds": builds, "small_builds": small_builds}
    async with ServerProcess("minimal", config) as server:
        info = server.info
        big, small = info["template_id"], info["small_template_id"]
        async with (
            sandboxkit.Client(api_key=info["api_key"], base_url=info["base_url"]) as client,
            aiohttp.ClientSession(
                base_url=info["base_url"], connector=aiohttp.TCPConnector(limit=100)
            ) as session,
        ):
            raw_json = RawClient(session, info["api_key"], typed=False)
            raw_typed = RawClient(session, info["api_key"], typed=True)

            async def sdk_walk() -> dict[str, float]:
                seen = 0
                async for _ in client.templates.builds(big, page_size=PAGE_SIZE_LARGE):
                    seen += 1
                return {"items": seen}

            async def sdk_page() -> int:
                # One typed page call, what the raw contenders make.
                page = await client.templates.builds_page(small, page_size=PAGE_SIZE_SMALL)
                return len(page.items)

            async def sdk_pages() -> int:
                # The same page from the paging iterator (a cursor guards the walk).
                async for page in client.templates.builds(small, page_size=PAGE_SIZE_SMALL).pages():
                    return len(page.items)
                return 0

            async def sdk_items() -> int:
                # The same call with each Build handed out by the async iterator.
                seen = 0
                async for _ in client.templates.builds(small, page_size=PAGE_SIZE_SMALL):
                    seen += 1
                return seen

            def walker(raw: RawClient) -> Callable[[], Awaitable[dict[str, float]]]:
                async def walk() -> dict[str, float]:
                    return {"items": await raw.walk(big, PAGE_SIZE_LARGE)}

                return walk

            def lister(
                call: Callable[[], Awaitable[int]], concurrency: int
            ) -> Callable[[], Awaitable[dict[str, float]]]:
                async def run_calls() -> dict[str, float]:
                    return {"items": await spread(calls, concurrency, call)}

                return run_calls

            pages = -(-builds // PAGE_SIZE_LARGE)
            walk_samples = await paired_rounds(
                [
                    Contender("sandboxkit builds(page_size=100)", sdk_walk),
                    Contender("raw aiohttp + json + cattrs", walker(raw_typed)),
                    Contender("raw aiohttp + json", walker(raw_json)),
                ],
                rounds,
            )
            list_samples: dict[int, dict[str, list[Sample]]] = {}
            for concurrency in CONCURRENCY:
                list_samples[concurrency] = await paired_rounds(
                    [
                        Contender(SDK_PAGE, lister(sdk_page, concurrency)),
                        Contender(SDK_PAGES, lister(sdk_pages, concurrency)),
                        Contender(SDK_ITEMS, lister(sdk_items, concurrency)),
                        Contender(
                            "raw aiohttp + json + cattrs",
                            lister(lambda: _first(raw_typed, small), concurrency),
                        ),
                        Contender(
                            "raw aiohttp + json",
                            lister(lambda: _first(raw_json, small), concurrency),
                        ),
                    ],
                    rounds,
                )
            async with session.get(
                f"/api/v2/templates/{small}/builds",
                params={"page": "1", "page_size": str(PAGE_SIZE_SMALL)},
                headers={"Authorization": f"Bearer {info['api_key']}"},
            ) as response:
                small_body = await response.read()
            async with session.get(
                f"/api/v2/templates/{big}/builds",
                params={"page": "1", "page_size": str(PAGE_SIZE_LARGE)},
                headers={"Authorization": f"Bearer {info['api_key']}"},
            ) as response:
                big_body = await response.read()
    _check_items(walk_samples, builds)
    for samples in list_samples.values():
        _check_items(samples, calls * small_builds)
    rows = _rows(f"walk {builds} builds", walk_samples, pages, "page")
    for concurrency, samples in list_samples.items():
        rows += _rows(f"{calls} list calls, concurrency {concurrency}", samples, calls, "call")
    small_loads, small_typed = decode_cost(small_body, 2000)
    big_loads, big_typed = decode_cost(big_body, 200)
    rows.append(_decode_row(f"decode only: one page of {small_builds}", small_loads, small_typed))
    rows.append(_decode_row(f"decode only: one page of {PAGE_SIZE_LARGE}", big_loads, big_typed))
    sdk_64 = next(
        row for row in rows if "concurrency 64" in row["contender"] and SDK_PAGE in row["contender"]
    )
    return CaseResult(
        name="control",
        title="3. control plane: build listing",
        server=SERVER,
        columns=[
            Column("per_s", "calls/s", "{:.0f}"),
            Column("us_cpu", "CPU us/call", "{:.0f}"),
            Column("x_cpu_json", "x CPU vs json", "{:.2f}"),
            Column("x_cpu_typed", "x CPU vs json+cattrs", "{:.2f}"),
            Column("us_json", "json us", "{:.0f}"),
            Column("us_cattrs", "+cattrs us", "{:.0f}"),
        ],
        rows=rows,
        targets=[
            target(
                "typed page call at concurrency 64: CPU vs raw aiohttp + json.loads",
                sdk_64["x_cpu_json"],
                "<= 1.5",
            )
        ],
        notes=[
            f"a 'call' of the walk is one page of {PAGE_SIZE_LARGE} builds ({pages} pages); a "
            f"list call is one page holding {small_builds} builds",
            "decode-only rows: json.loads, and the extra CPU of cattrs into Page[Build], "
            "without I/O",
            f"the target row is '{SDK_PAGE}' (one typed page call, as the raw contenders make); "
            f"'{SDK_PAGES}' adds the paging cursor and '{SDK_ITEMS}' hands out each Build "
            "through the async iterator",
        ],
        config={"builds": builds, "list_calls": calls, "rounds": rounds},
    )


async def _first(raw: RawClient, template_id: str) -> int:
    items, _ = await raw.page(template_id, 1, PAGE_SIZE_SMALL)
    return items


def _check_items(samples: dict[str, list[Sample]], expected: int) -> None:
    for name, runs in samples.items():
        for sample in runs:
            if sample.extra.get("items") != expected:
                raise RuntimeError(f"{name}: saw {sample.extra.get('items')} of {expected} items")


def _rows(
    workload: str, samples: dict[str, list[Sample]], calls: int, unit: str
) -> list[dict[str, Any]]:
    json_ref = samples["raw aiohttp + json"]
    typed_ref = samples["raw aiohttp + json + cattrs"]
    rows = []
    for name, runs in samples.items():
        rows.append(
            {
                "contender": f"{workload}: {name}",
                "unit": unit,
                "per_s": median([calls / s.wall for s in runs]),
                "us_cpu": median([s.cpu / calls * 1e6 for s in runs]),
                "x_cpu_json": paired_ratio(runs, json_ref, lambda s: s.cpu),
                "x_cpu_typed": paired_ratio(runs, typed_ref, lambda s: s.cpu),
                "x_time_json": paired_ratio(runs, json_ref, lambda s: s.wall),
            }
        )
    return rows


def _decode_row(name: str, loads_us: float, typed_us: float) -> dict[str, Any]:
    return {"contender": name, "us_json": loads_us, "us_cattrs": typed_us - loads_us}
