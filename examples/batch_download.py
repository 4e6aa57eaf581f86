"""Download a result file from a sandbox many times over; run it again and nothing is fetched.

Run it against the standalone emulator, which prints the variables it reads::

    sandboxkit emulator            # in another shell; paste its export lines here
    python examples/batch_download.py             # into a new temporary directory
    python examples/batch_download.py results/    # or into a directory you name

A real batch lists one job per sandbox; here one sandbox stands in for many. The second
pass uses `skip_existing=True`: downloads land whole or not at all, so a file already at its
destination is finished, and a batch killed at any moment continues where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import sandboxkit
from sandboxkit import batch


async def main(out: Path) -> None:
    ref = batch.SandboxRef(
        os.environ["SANDBOXKIT_SANDBOX_KEY"],
        os.environ["SANDBOXKIT_SANDBOX_DOMAIN"],
        os.environ["SANDBOXKIT_SANDBOX_TOKEN"],
    )
    async with sandboxkit.Client() as client:  # the SANDBOXKIT_* environment
        sbx = client.sandbox(
            sandbox_key=ref.sandbox_key, domain=ref.domain, access_token=ref.access_token
        )
        for n in range(20):  # something to download
            body = json.dumps({"run": n, "score": n / 20}).encode()
            await sbx.files.upload(f"/home/user/result-{n}.json", body)

        jobs = [
            batch.DownloadJob(ref, f"/home/user/result-{n}.json", out / f"result-{n}.json")
            for n in range(20)
        ]
        first = await batch.download_many(client, jobs, concurrency=8)
        print("first pass:", first.summary)
        again = await batch.download_many(client, jobs, concurrency=8, skip_existing=True)
        print("second pass:", again.summary)
        for outcome in first.failures + again.failures:  # one failure never stops the others
            print("failed:", outcome.job.remote, repr(outcome.error))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        results = Path(sys.argv[1])
        results.mkdir(parents=True, exist_ok=True)  # download_many checks it, up front
    else:  # not the current directory: run from a checkout, it would land in the tree
        results = Path(tempfile.mkdtemp(prefix="sandboxkit-batch-"))
    asyncio.run(main(results))
    print(f"the files are in {results}")
