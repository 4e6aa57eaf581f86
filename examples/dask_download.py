"""Download one file from each of many sandboxes, spread over a Dask cluster.

Run it against the emulator (which prints its URL and API key)::

    python -m sandboxkit.emulator --port 8080 --data-port 8081 &
    SANDBOXKIT_API_KEY=... SANDBOXKIT_BASE_URL=http://127.0.0.1:8080 \\
        python examples/dask_download.py KEY DOMAIN TOKEN

Use Dask when the job list is larger than one machine's network or CPU; below that,
`batch.download_many` on one Client is simpler and just as fast.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from dask.distributed import Client as DaskClient
from dask.distributed import LocalCluster

from sandboxkit import ClientConfig, batch, sync
from sandboxkit.dask import download_many_on_dask
from sandboxkit.emulator import EmulatorResolver


def main(sandbox_key: str, domain: str, token: str) -> None:
    # Factories, not live objects: each worker builds its own resolver from the class.
    config = ClientConfig.from_env(data_plane_scheme="http", resolver=EmulatorResolver)
    with sync.Client.from_config(config) as client:  # something to download
        sandbox = client.sandbox(sandbox_key=sandbox_key, domain=domain, access_token=token)
        sandbox.files.upload("/home/user/hello.txt", b"hello from the sandbox\n" * 1000)
    ref = batch.SandboxRef(sandbox_key, domain, token)
    out = Path(tempfile.mkdtemp(prefix="sandboxkit-dask-"))
    jobs = [batch.DownloadJob(ref, "/home/user/hello.txt", out / f"hello-{n}") for n in range(8)]
    with LocalCluster(n_workers=2, threads_per_worker=1) as cluster, DaskClient(cluster) as dask:
        result = download_many_on_dask(dask, config, jobs, concurrency_per_worker=16)
    print(result.summary)
    for outcome in result.failures:
        print("failed:", outcome.job.remote, outcome.error)


if __name__ == "__main__":
    main(*sys.argv[1:4])
