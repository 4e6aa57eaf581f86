"""Download one file many times over, spread over a Dask cluster.

Run it against the standalone emulator, which prints the variables it reads::

    sandboxkit emulator            # in another shell; paste its export lines here
    python examples/dask_download.py

Use Dask when the job list is larger than one machine's network or CPU; below that,
`batch.download_many` on one Client is simpler and just as fast.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dask.distributed import Client as DaskClient
from dask.distributed import LocalCluster

from sandboxkit import ClientConfig, batch, sync
from sandboxkit.dask import download_many_on_dask


def main() -> None:
    # Picklable: each worker builds its own Client from it (the SANDBOXKIT_* environment).
    config = ClientConfig.from_env()
    ref = batch.SandboxRef(
        os.environ["SANDBOXKIT_SANDBOX_KEY"],
        os.environ["SANDBOXKIT_SANDBOX_DOMAIN"],
        os.environ["SANDBOXKIT_SANDBOX_TOKEN"],
    )
    with sync.Client.from_config(config) as client:  # something to download
        sandbox = client.sandbox(
            sandbox_key=ref.sandbox_key, domain=ref.domain, access_token=ref.access_token
        )
        sandbox.files.upload("/home/user/hello.txt", b"hello from the sandbox\n" * 1000)
    out = Path(tempfile.mkdtemp(prefix="sandboxkit-dask-"))
    jobs = [batch.DownloadJob(ref, "/home/user/hello.txt", out / f"hello-{n}") for n in range(8)]
    # The dashboard on any free port of loopback (`dask.dashboard_link` tells which): the
    # default, port 8787 on every address, is taken while another cluster runs.
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0")
    with cluster, DaskClient(cluster) as dask:
        result = download_many_on_dask(dask, config, jobs, concurrency_per_worker=16)
    print(result.summary)
    for outcome in result.failures:
        print("failed:", outcome.job.remote, outcome.error)
    print(f"the files are in {out} (remove it when done)")


if __name__ == "__main__":
    main()
