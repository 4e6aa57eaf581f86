"""Batch helpers asked for while writing an agent (issue 16): SandboxRef.from_response and
UploadJob from bytes, over loopback against the emulator."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

import sandboxkit
from sandboxkit import batch
from sandboxkit.emulator import Emulator

# -- SandboxRef.from_response ---------------------------------------------------------------


async def test_a_ref_from_a_create_answer_reaches_the_sandbox(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """SandboxRef.from_response reads the create answer as sandbox_from_response does, and
    the batch functions reach that sandbox with it."""
    body = await emulator.create_sandbox()
    ref = batch.SandboxRef.from_response(body)
    data = body["data"]
    token = data["sandbox_access_token"]
    assert ref == batch.SandboxRef(data["sandbox_key"], data["domain"], token)
    handle = emulator_client.sandbox_from_response(body)
    assert (ref.sandbox_key, ref.domain) == (handle.sandbox_key, handle.domain)
    assert token not in repr(ref)
    (emulator.sandbox_root(ref.sandbox_key) / "home/user/in.txt").write_bytes(b"from ref")
    job = batch.DownloadJob(ref, "/home/user/in.txt", tmp_path / "in.txt")
    result = await batch.download_many(emulator_client, [job])
    assert result.ok and (tmp_path / "in.txt").read_bytes() == b"from ref"


def test_a_ref_takes_the_token_at_the_top_level_too() -> None:
    """The token may sit beside `data` rather than in it, as the client's reader allows."""
    body = {"data": {"sandbox_key": "k1", "domain": "sbx.example"}, "sandbox_access_token": "t"}
    assert batch.SandboxRef.from_response(body) == batch.SandboxRef("k1", "sbx.example", "t")
    assert pickle.loads(pickle.dumps(batch.SandboxRef.from_response(body))).access_token == "t"


def test_one_address_type_and_the_old_progress_name() -> None:
    """`batch.SandboxRef` is `sandboxkit.SandboxRef`, the one address type (what
    `from_response` returns is exactly it); `batch.Progress`, the old name of a batch's job
    callback, still answers, with a DeprecationWarning naming `JobProgress`."""
    assert batch.SandboxRef is sandboxkit.SandboxRef
    body = {"data": {"sandbox_key": "k1", "domain": "d", "sandbox_access_token": "t"}}
    assert type(sandboxkit.SandboxRef.from_response(body)) is sandboxkit.SandboxRef
    with pytest.warns(DeprecationWarning, match="batch.JobProgress"):
        old = batch.Progress
    assert old is batch.JobProgress
    assert batch.JobProgress is not sandboxkit.Progress  # jobs, not bytes
    with pytest.raises(AttributeError):
        _ = batch.NoSuchName


async def test_client_sandbox_takes_the_ref_itself(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """`client.sandbox(ref)` reaches the sandbox a SandboxRef names, as the three keywords
    do; a ref beside keywords, a non-ref, or nothing is a ValidationError before any request."""
    body = await emulator.create_sandbox()
    ref = sandboxkit.SandboxRef.from_response(body)
    (emulator.sandbox_root(ref.sandbox_key) / "home/user/r.txt").write_bytes(b"by ref")
    by_ref = emulator_client.sandbox(ref)
    assert (by_ref.sandbox_key, by_ref.domain) == (ref.sandbox_key, ref.domain)
    assert await by_ref.files.read_bytes("/home/user/r.txt") == b"by ref"
    sent = len(emulator.journal)
    for wrong, message in [
        ({"ref": ref, "sandbox_key": ref.sandbox_key}, "a SandboxRef or"),
        ({"ref": ("k", "d", "t")}, "must be a SandboxRef"),
        ({}, "sandbox_key must be"),
    ]:
        with pytest.raises(sandboxkit.ValidationError, match=message):
            emulator_client.sandbox(**wrong)
    assert len(emulator.journal) == sent


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"data": {"domain": "d", "sandbox_access_token": "t"}}, "lacks sandbox_key$"),
        ({"data": {"sandbox_key": "k"}}, "lacks domain, sandbox_access_token$"),
        ({}, "lacks sandbox_key, domain, sandbox_access_token$"),
        (["not", "a", "mapping"], "as a mapping"),
        ({"data": {"sandbox_key": "a.b", "domain": "d", "sandbox_access_token": "t"}}, "plain"),
        ({"data": {"sandbox_key": "k", "domain": "d", "sandbox_access_token": "t\n"}}, "line"),
    ],
)
def test_a_ref_names_what_the_answer_lacks(body: Any, message: str) -> None:
    """An answer without a key, domain or token (or with an unusable one) is a
    ValidationError naming it."""
    with pytest.raises(sandboxkit.ValidationError, match=message):
        batch.SandboxRef.from_response(body)


# -- UploadJob from bytes -------------------------------------------------------------------


async def test_upload_many_sends_bytes_and_files_alike(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """Jobs holding bytes upload them from memory beside jobs naming files (an empty one
    too); the summary counts the bytes of both."""
    ref = batch.SandboxRef.from_response(await emulator.create_sandbox())
    on_disk = tmp_path / "disk.bin"
    on_disk.write_bytes(b"d" * 3000)
    memory = bytes(range(256)) * 40
    jobs = [
        batch.UploadJob(ref, "/home/user/memory.bin", memory),
        batch.UploadJob(ref, "/home/user/disk.bin", on_disk),
        batch.UploadJob(ref, "/home/user/empty.txt", b""),
    ]
    result = await batch.upload_many(emulator_client, jobs, concurrency=2)
    assert result.ok, result.failures
    home = emulator.sandbox_root(ref.sandbox_key) / "home/user"
    assert (home / "memory.bin").read_bytes() == memory
    assert (home / "disk.bin").read_bytes() == b"d" * 3000
    assert (home / "empty.txt").read_bytes() == b""
    assert result.summary.bytes == len(memory) + 3000
    assert [o.result.path for o in result.outcomes if o.result] == [j.remote for j in jobs]


async def test_a_failed_bytes_job_is_not_counted(
    emulator: Emulator, emulator_client: sandboxkit.Client
) -> None:
    """A bytes job the service refuses (no such directory) fails alone; its bytes are not in
    the summary."""
    ref = batch.SandboxRef.from_response(await emulator.create_sandbox())
    jobs = [
        batch.UploadJob(ref, "/home/user/ok.bin", b"12345"),
        batch.UploadJob(ref, "/no/such/dir/x.bin", b"1234567890"),
    ]
    result = await batch.upload_many(emulator_client, jobs)
    assert [o.ok for o in result.outcomes] == [True, False]
    assert (result.summary.done, result.summary.failed, result.summary.bytes) == (1, 1, 5)


def test_bytes_jobs_show_their_size_not_their_content() -> None:
    """A job's repr shows how many bytes it holds, never the bytes (nor the token); a path
    still converts to a Path; the job holds the caller's very bytes object."""
    ref = batch.SandboxRef("k", "d", "SECRET-TOKEN")
    data = b"PRIVATE-CONTENT" * 10
    job = batch.UploadJob(ref, "/home/user/a", data)
    assert job.source is data
    assert "<150 bytes>" in repr(job) and b"PRIVATE" not in repr(job).encode()
    assert "SECRET" not in repr(job)
    assert batch.UploadJob(ref, "/home/user/a", "rel/file").source == Path("rel/file")
    assert pickle.loads(pickle.dumps(job)) == job


def test_jobs_name_their_local_file_as_download_and_upload_do() -> None:
    """`dest` and `source`, as `files.download(remote, dest)` and `files.upload(remote,
    source)`; the old `local` still works, with a DeprecationWarning, in and out."""
    ref = batch.SandboxRef("k", "d", "t")
    down = batch.DownloadJob(ref, "/home/user/a", dest="out/a")
    up = batch.UploadJob(ref, "/home/user/a", source=b"x")
    assert (down.dest, up.source) == (Path("out/a"), b"x")
    with pytest.deprecated_call(match=r"DownloadJob.local is now DownloadJob.dest"):
        old = batch.DownloadJob(ref, "/home/user/a", local="out/a")
    assert old == down
    with pytest.deprecated_call(match=r"UploadJob.local is now UploadJob.source"):
        assert up.local == b"x"
    with pytest.raises(TypeError, match="both source= and its old name local="):
        batch.UploadJob(ref, "/home/user/a", b"x", local=b"y")
    with pytest.raises(TypeError, match="missing its local path: dest="):
        batch.DownloadJob(ref, "/home/user/a")


async def test_a_bad_job_among_bytes_jobs_stops_the_batch_before_sending(
    emulator: Emulator, emulator_client: sandboxkit.Client, tmp_path: Path
) -> None:
    """Bytes jobs are checked like the others (remote path, sandbox), and a missing local
    file still names its job; nothing is sent."""
    ref = batch.SandboxRef.from_response(await emulator.create_sandbox())
    bad_remote = [batch.UploadJob(ref, "/home/user/a", b"x"), batch.UploadJob(ref, "rel", b"y")]
    with pytest.raises(sandboxkit.ValidationError, match=r"^jobs\[1\]: "):
        await batch.upload_many(emulator_client, bad_remote)
    missing = [batch.UploadJob(ref, "/home/user/a", b"x"), batch.UploadJob(ref, "/b", tmp_path)]
    with pytest.raises(sandboxkit.ValidationError, match=r"^jobs\[1\]: local file"):
        await batch.upload_many(emulator_client, missing)
    assert [r for r in emulator.journal if r.server == "data"] == []


def test_summaries_and_results_show_durations_rounded() -> None:
    """A summary is printed for people (`elapsed=0.051`, not 0.05064345099998491); the value
    itself keeps every digit."""
    summary = batch.BatchSummary(
        total=1, done=1, failed=0, bytes=3, attempts=1, retries=0, resumes=0, elapsed=0.0506434
    )
    assert "elapsed=0.051," in repr(summary) and summary.elapsed == 0.0506434
    result = sandboxkit.DownloadResult(
        path=Path("x"), size=1, sha256=None, attempts=1, resumes=0, elapsed=1.23456
    )
    assert repr(result).endswith("elapsed=1.235)")
