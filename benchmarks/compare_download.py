"""Cases 1 and 2 across checkouts: sandboxkit from two (or more) source trees, beside the
ceiling (downloads) or raw aiohttp (uploads, to `_sink.py`'s lean receiver).

Every run is a fresh child process (so each contender's CPU is its own, and each imports
sandboxkit from the tree it was given via PYTHONPATH) against one minimal server; the
contenders alternate within each round (A B C, then C B A) and figures are medians.

Usage::

    python benchmarks/compare_download.py --tree main=/work/main --tree new=. \
        --size-mib 1024 --rounds 5
    python benchmarks/compare_download.py --upload --tree before=../old --tree new=.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import free_pages_held

MiB = 1 << 20
GiB = 1 << 30
HERE = Path(__file__).resolve().parent


def _child(spec: dict[str, Any]) -> None:
    """One measured download or upload; prints its figures as one JSON line."""
    from _measure import Sampler
    from _transfer import BIG, Endpoints

    ends = Endpoints(spec["info"])
    dest = Path(spec["dest"])
    hashing = bool(spec["hashing"])
    figures: dict[str, Any] = {}
    if spec["kind"] != "ceiling":
        # Imported before the clock starts: a run measures the transfer, not the imports.
        import aiohttp  # noqa: F401

        import sandboxkit.emulator  # noqa: F401

    def measured(run: Any) -> Any:
        with Sampler() as sampler:
            before = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            result = run()
            figures["wall"] = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
        figures["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        figures["user"] = after.ru_utime - before.ru_utime
        figures["rss_growth"] = sampler.peak_rss - sampler.start_rss
        return result

    if spec["kind"] == "upload":
        measured(lambda: asyncio.run(_upload(spec, figures)))
        figures["size"] = Path(spec["source"]).stat().st_size
        print(json.dumps(figures), flush=True)
        return
    if spec["kind"] == "ceiling":
        from _ceiling import ceiling_download

        digest = measured(
            lambda: ceiling_download(ends.port, ends.host, ends.token, BIG, dest, hashing)
        )
    else:

        async def main() -> str | None:
            async with _sandbox(ends, figures) as sbx:
                result = await sbx.files.download(BIG, dest, checksum=hashing)
                return result.sha256

        digest = measured(lambda: asyncio.run(main()))
    figures["sha256"] = digest
    figures["size"] = dest.stat().st_size
    print(json.dumps(figures), flush=True)


async def _upload(spec: dict[str, Any], figures: dict[str, Any]) -> None:
    # The receiver answers only once it counted the whole Content-Length (or last chunk).
    from _transfer import UPLOADED, Endpoints, raw_upload

    ends = Endpoints({**spec["info"], "domain": spec["info"]["sink_domain"]})
    source = Path(spec["source"])
    if spec["raw"]:
        import aiohttp

        from sandboxkit.emulator import EmulatorResolver

        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=EmulatorResolver()),
            headers={"X-Access-Token": ends.token},
        ) as session:
            received = await raw_upload(session, ends.url, source)
        if received < spec["size"]:
            raise RuntimeError(f"the receiver counted {received} bytes")
        return
    async with _sandbox(ends, figures) as sbx:
        await sbx.files.upload(UPLOADED, source)


@contextlib.asynccontextmanager
async def _sandbox(ends: Any, figures: dict[str, Any]) -> AsyncIterator[Any]:
    """The sandbox of the minimal server, on a client from the tree on PYTHONPATH (whose
    path goes in `figures`, so a run shows which tree it measured)."""
    from _transfer import KEY

    import sandboxkit
    from sandboxkit.emulator import EmulatorResolver

    figures["sandboxkit"] = sandboxkit.__file__
    async with sandboxkit.Client(
        api_key=ends.api_key,
        base_url=ends.base_url,
        data_plane_scheme="http",
        resolver=EmulatorResolver(),
    ) as client:
        yield client.sandbox(sandbox_key=KEY, domain=ends.domain, access_token=ends.token)


def _run_child(spec: dict[str, Any], pythonpath: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(spec)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


async def _main(args: argparse.Namespace) -> None:
    from _server import ServerProcess
    from _transfer import BIG, make_file

    size = args.size_mib * MiB
    # Each contender: a name, what the child does, the tree on its PYTHONPATH, whether it
    # hashes (downloads) or is raw aiohttp (uploads). Ratios are against the last name.
    reference = "raw-aiohttp" if args.upload else "ceiling"
    contenders: list[tuple[str, str, str | None, bool]] = []
    if args.upload:
        contenders = [(name, "upload", path, False) for name, path in args.trees]
        contenders.append((reference, "upload", None, True))
    else:
        for hashing in (True, False):
            contenders += [(name, "sdk", path, hashing) for name, path in args.trees]
            contenders.append((reference, "ceiling", None, hashing))
    samples: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="sandboxkit-compare-") as tmp:
        work = Path(tmp)
        (work / "data/home/user").mkdir(parents=True)
        source = work / "data" / BIG.lstrip("/")
        expected = make_file(source, size)
        async with ServerProcess("minimal", {"data_dir": str(work / "data")}) as server:
            for index in range(args.rounds):
                order = contenders if index % 2 == 0 else contenders[::-1]
                for name, kind, pythonpath, flag in order:
                    dest = work / "out.bin"
                    spec = {
                        "kind": kind,
                        "info": server.info,
                        "dest": str(dest),
                        "source": str(source),
                        "size": size,
                        "hashing": flag and kind != "upload",
                        "raw": flag and kind == "upload",
                    }
                    figures = await asyncio.to_thread(_run_child, spec, pythonpath)
                    if kind != "upload":
                        dest.unlink()
                    if figures["size"] != size or (
                        kind != "upload" and flag and figures["sha256"] != expected
                    ):
                        raise RuntimeError(f"{name}: wrong bytes {figures}")
                    what = "upload" if kind == "upload" else "sha256" if flag else "no hash"
                    label = f"{name} {what}"
                    if index == 0 and "sandboxkit" in figures:
                        print(f"{name}: {figures['sandboxkit']}", file=sys.stderr)
                    samples.setdefault(label, []).append(figures)
                    print(
                        f"round {index} {label}: {size / 1e9 / figures['wall']:.3f} GB/s "
                        f"{figures['cpu'] / (size / GiB):.3f} CPU s/GiB "
                        f"rss +{figures['rss_growth'] / MiB:.1f} MiB",
                        file=sys.stderr,
                        flush=True,
                    )
    gib = size / GiB
    print(f"{args.rounds} rounds, {args.size_mib} MiB; medians (paired ratios vs {reference})")
    for label, runs in samples.items():
        ref = samples[f"{reference} {label.split(' ', 1)[1]}"]
        tput = statistics.median(b["wall"] / a["wall"] for a, b in zip(runs, ref, strict=True))
        cpu = statistics.median(a["cpu"] / b["cpu"] for a, b in zip(runs, ref, strict=True))
        print(
            f"{label:24} {statistics.median(size / 1e9 / r['wall'] for r in runs):6.3f} GB/s "
            f"{statistics.median(r['cpu'] / gib for r in runs):6.3f} CPU s/GiB "
            f"({statistics.median(r['user'] / gib for r in runs):5.3f} user) "
            f"x tput {tput:5.3f}  x CPU {cpu:5.3f}  "
            f"peak RSS +{max(r['rss_growth'] for r in runs) / MiB:5.1f} MiB"
        )
    if len(args.trees) == 2 and args.upload:
        # The figure issue 18 asks of uploads: one tree's speed over another's, paired.
        (a, _), (b, _) = args.trees
        first, second = samples[f"{a} upload"], samples[f"{b} upload"]
        ratio = statistics.median(x["wall"] / y["wall"] for x, y in zip(first, second, strict=True))
        print(f"{b} over {a}: {ratio:.3f}x the throughput (median of paired rounds)")


def main() -> None:
    """Parse the command line and run (or be one child run)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/compare_download.py")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH of a checkout")
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--upload", action="store_true", help="case 2 (uploads) instead of 1")
    parser.add_argument(
        "--hold-free-pages",
        action="store_true",
        help="root, on a VM with free page reporting: hold freed pages during the run",
    )
    args = parser.parse_args()
    if args.child:
        _child(json.loads(args.child))
        return
    if not args.tree:
        args.tree = [f"this={HERE.parent}"]
    args.trees = [(n, str(Path(p).resolve())) for n, p in (t.split("=", 1) for t in args.tree)]
    with free_pages_held(args.hold_free_pages) as held:
        if held is not None:
            print(f"memory: {held}", flush=True)
        asyncio.run(_main(args))


if __name__ == "__main__":
    threading.excepthook = threading.__excepthook__
    main()
