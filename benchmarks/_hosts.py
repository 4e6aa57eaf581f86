"""Case 4: many small downloads spread over many sandbox hosts, at high concurrency.

Server: the minimal server, virtual-hosted: every ``{key}.sandbox.test`` is a sandbox, and
the small file is served from memory, so the cost measured is the client's pools.

Each run builds a fresh client (and closes it, inside the measurement) so its peak of open
sockets starts from nothing. The raw aiohttp contender shares one session across all hosts
with a 256-connection limit: the pattern sandboxkit replaces with per-host pools, whose
token never leaves its host. Its idle keep-alive sockets are not bounded by that limit.
sandboxkit runs with its default limits (a budget of sockets roomy enough for every host's
keep-alives here) and with a budget of half as many sockets as hosts, which forces idle
hosts out: each eviction costs a new session and connection when that host comes back.
The server counts the connections it accepts (the connects each contender paid for).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from _measure import Contender, MiB, fan_out, median, paired_ratio, paired_rounds
from _report import CaseResult, Column, target
from _server import ServerProcess, token_for

import sandboxkit
from sandboxkit.emulator import EmulatorResolver

SMALL = "/home/user/small.bin"
SMALL_SIZE = 16 * 1024
SERVER = "minimal aiohttp.web (benchmarks/_server.py), virtual hosts, file served from memory"
PER_HOST = 8
# A read that fails this way counts as an error; anything else is the benchmark's own bug.
FAILURES = (sandboxkit.SandboxKitError, aiohttp.ClientError, OSError)


async def run(downloads: int, hosts: int, concurrency: int, rounds: int, work: Path) -> CaseResult:
    """Run case 4: `downloads` reads of a small file over `hosts` hosts."""
    data = work / "data"
    (data / "home/user").mkdir(parents=True)
    content = random.Random(4).randbytes(SMALL_SIZE)
    (data / SMALL.lstrip("/")).write_bytes(content)
    # The same host sequence for every run: random, so pools are reused and evicted.
    order = random.Random(7).choices(range(hosts), k=downloads)
    keys = [f"sbx-{index:04d}" for index in range(hosts)]
    # The default budget, then one that forces evictions.
    bounds = [sandboxkit.Limits().max_sandbox_connections, max(PER_HOST, hosts // 2)]
    async with ServerProcess("minimal", {"data_dir": str(data)}) as server:
        info = server.info
        tokens = [token_for(info["secret"], key) for key in keys]
        domain = info["domain"]

        async def connections() -> dict[str, float]:
            counts = await server.command("connections")
            return {"connects": counts["accepted"], "server_peak": counts["peak"]}

        async def reset(_: Contender) -> None:
            await server.command("connections")

        def sdk(budget: int) -> Callable[[], Awaitable[dict[str, float]]]:
            async def run_sdk() -> dict[str, float]:
                limits = sandboxkit.Limits(
                    max_sandbox_connections=budget, per_host_connections=PER_HOST
                )
                async with sandboxkit.Client(
                    api_key=info["api_key"],
                    base_url=info["base_url"],
                    data_plane_scheme="http",
                    resolver=EmulatorResolver(),
                    limits=limits,
                ) as client:
                    handles = [
                        client.sandbox(sandbox_key=k, domain=domain, access_token=t)
                        for k, t in zip(keys, tokens, strict=True)
                    ]

                    async def fetch(host: int) -> bytes:
                        return await handles[host].files.read_bytes(SMALL)

                    errors = await fan_out(order, concurrency, fetch, content, FAILURES)
                    pools = client._transport.hosts
                    evicted = pools.evicted
                return {
                    "errors": errors,
                    "bound": budget,
                    "evictions": evicted,
                    **await connections(),
                }

            return run_sdk

        async def raw() -> dict[str, float]:
            connector = aiohttp.TCPConnector(
                limit=256, limit_per_host=PER_HOST, resolver=EmulatorResolver()
            )
            async with aiohttp.ClientSession(connector=connector) as session:

                async def fetch(host: int) -> bytes:
                    async with session.get(
                        f"http://{keys[host]}.{domain}/files",
                        params={"path": SMALL},
                        headers={"X-Access-Token": tokens[host]},
                    ) as response:
                        response.raise_for_status()
                        return await response.read()

                errors = await fan_out(order, concurrency, fetch, content, FAILURES)
            return {
                "errors": errors,
                "bound": float("nan"),
                "evictions": float("nan"),
                **await connections(),
            }

        contenders = [
            Contender(f"sandboxkit max_sandbox_connections={bound}", sdk(bound)) for bound in bounds
        ]
        contenders[0].name += " (default)"
        contenders.append(Contender("raw aiohttp, one session (limit=256)", raw))
        samples = await paired_rounds(contenders, rounds, sockets=True, between=reset)
    reference = samples[contenders[-1].name]
    rows = []
    targets = []
    for name, runs in samples.items():
        bound = runs[0].extra["bound"]
        peak = max(s.sockets for s in runs)
        errors = sum(s.extra["errors"] for s in runs)
        rows.append(
            {
                "contender": name,
                "wall_s": median([s.wall for s in runs]),
                "x_wall": paired_ratio(runs, reference, lambda s: s.wall),
                "per_s": median([downloads / s.wall for s in runs]),
                "us_cpu": median([s.cpu / downloads * 1e6 for s in runs]),
                "peak_sockets": peak,
                "server_peak": max(s.extra["server_peak"] for s in runs),
                "bound": bound,
                "connects": median([s.extra["connects"] for s in runs]),
                "evictions": median([s.extra["evictions"] for s in runs]),
                "errors": errors,
                "rss_growth_mib": max(s.rss_growth for s in runs) / MiB,
            }
        )
        if name.startswith("sandboxkit"):
            targets.append(target(f"{name}: peak sockets minus bound", peak - bound, "<= 0"))
            targets.append(target(f"{name}: errors", errors, "== 0"))
    default_row = rows[0]
    targets.append(target(f"{default_row['contender']}: x wall", default_row["x_wall"], "<= 1.2"))
    return CaseResult(
        name="hosts",
        title=f"4. many hosts: {downloads} downloads of {SMALL_SIZE // 1024} KiB over "
        f"{hosts} hosts, concurrency {concurrency}",
        server=SERVER,
        columns=[
            Column("wall_s", "wall s"),
            Column("x_wall", "x wall", "{:.2f}"),
            Column("per_s", "downloads/s", "{:.0f}"),
            Column("us_cpu", "CPU us/dl", "{:.0f}"),
            Column("peak_sockets", "peak sockets", "{:.0f}"),
            Column("server_peak", "server peak", "{:.0f}"),
            Column("bound", "socket bound", "{:.0f}"),
            Column("connects", "connects", "{:.0f}"),
            Column("evictions", "evictions", "{:.0f}"),
            Column("errors", "errors", "{:.0f}"),
            Column("rss_growth_mib", "peak RSS +MiB", "{:.1f}"),
        ],
        rows=rows,
        targets=targets,
        notes=[
            "peak sockets: sockets among this process's descriptors, sampled every 10 ms, "
            "minus those open before the run",
            "server peak: connections open at once as the server counts them (made, not yet "
            "lost: it lags the client's closes a little); connects: connections the server "
            "accepted in a run (median); evictions: idle hosts closed for the budget (median)",
            "socket bound: max_sandbox_connections (no control-plane connection is opened "
            "in this case)",
        ],
        config={
            "downloads": downloads,
            "hosts": hosts,
            "concurrency": concurrency,
            "per_host_connections": PER_HOST,
            "rounds": rounds,
        },
    )
