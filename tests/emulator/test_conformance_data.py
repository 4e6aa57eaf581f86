"""Conformance of the data plane with the interface's download table and upload rules."""

from __future__ import annotations

import aiohttp
import pytest

from sandboxkit.emulator import Emulator, Fault

from .support import MULTIPART_TYPE, Box, data_error, multipart, new_box, upload

CONTENT = bytes(range(256)) * 40  # 10240 bytes


def put(emu: Emulator, box: Box, path: str, content: bytes = CONTENT) -> None:
    """Place a file in the sandbox directly on disk."""
    target = emu.sandbox_root(box.key) / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(content)


async def get(
    http: aiohttp.ClientSession, box: Box, path: str | None, **headers: str
) -> aiohttp.ClientResponse:
    params = {"path": path} if path is not None else {}
    return await http.get(box.files, params=params, headers={**box.auth, **headers})


# -- GET /files: 200 ----------------------------------------------------------------------


async def test_download_200_full_file_with_headers(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """200: raw octet-stream bytes with Content-Disposition, Accept-Ranges, Content-Length."""
    put(clocked_emulator, wire_box, "/home/user/out.bin")
    async with await get(raw_http, wire_box, "/home/user/out.bin") as response:
        assert response.status == 200
        assert await response.read() == CONTENT
        assert response.headers["Content-Type"] == "application/octet-stream"
        assert response.headers["Content-Disposition"] == "attachment; filename=out.bin"
        assert response.headers["Accept-Ranges"] == "bytes"
        assert response.headers["Content-Length"] == str(len(CONTENT))


async def test_download_sends_no_checksum_headers(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Rule 4: no checksum headers are returned."""
    put(clocked_emulator, wire_box, "/tmp/f")
    async with await get(raw_http, wire_box, "/tmp/f") as response:
        await response.read()
        names = {name.lower() for name in response.headers}
    assert not names & {"etag", "content-md5", "digest", "repr-digest", "x-checksum"}


async def test_download_chunked_when_size_not_known_up_front(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """200 without Content-Length uses Transfer-Encoding: chunked (IDC option)."""
    box = await new_box(clocked_emulator, "ap-chunked")
    put(clocked_emulator, box, "/tmp/f")
    async with await get(raw_http, box, "/tmp/f") as response:
        assert response.status == 200
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert "Content-Length" not in response.headers
        assert await response.read() == CONTENT


async def test_download_content_disposition_quotes_unusual_names(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Content-Disposition names the basename; names that are not tokens are quoted."""
    put(clocked_emulator, wire_box, "/tmp/my file #1.txt", b"x")
    async with await get(raw_http, wire_box, "/tmp/my file #1.txt") as response:
        assert response.status == 200
        assert response.headers["Content-Disposition"] == 'attachment; filename="my file #1.txt"'


# -- Range: 206, 416, and data centers without resume ------------------------------------


@pytest.mark.parametrize(
    ("range_header", "start", "end"),
    [
        ("bytes=100-199", 100, 199),
        ("bytes=10000-", 10000, 10239),
        ("bytes=-40", 10200, 10239),
        ("bytes=10000-99999", 10000, 10239),
    ],
)
async def test_range_206_on_resume_idc(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    wire_box: Box,
    range_header: str,
    start: int,
    end: int,
) -> None:
    """206: Content-Range bytes s-e/total and the range's Content-Length, with resume support."""
    put(clocked_emulator, wire_box, "/tmp/f")
    async with await get(raw_http, wire_box, "/tmp/f", Range=range_header) as response:
        assert response.status == 206
        assert response.headers["Content-Range"] == f"bytes {start}-{end}/{len(CONTENT)}"
        assert response.headers["Content-Length"] == str(end - start + 1)
        assert response.headers["Accept-Ranges"] == "bytes"
        assert await response.read() == CONTENT[start : end + 1]


@pytest.mark.parametrize("range_header", ["bytes=10240-", "bytes=99999-100000"])
async def test_range_start_beyond_length_416(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box, range_header: str
) -> None:
    """416: only with resume support, when the Range start is beyond the file length."""
    put(clocked_emulator, wire_box, "/tmp/f")
    async with await get(raw_http, wire_box, "/tmp/f", Range=range_header) as response:
        await data_error(response, 416)
        assert response.headers["Content-Range"] == f"bytes */{len(CONTENT)}"


@pytest.mark.parametrize("range_header", ["bytes=100-199", "bytes=99999-"])
async def test_no_resume_idc_answers_200_whole_file_to_range(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, range_header: str
) -> None:
    """Rule 2: without resume support a Range gets 200, the entire file, Accept-Ranges: none."""
    box = await new_box(clocked_emulator, "eu-lite")
    put(clocked_emulator, box, "/tmp/f")
    async with await get(raw_http, box, "/tmp/f", Range=range_header) as response:
        assert response.status == 200
        assert response.headers["Accept-Ranges"] == "none"
        assert "Content-Range" not in response.headers
        assert await response.read() == CONTENT


async def test_malformed_range_is_ignored(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A Range that is not one bytes=start-end range gets the whole file (200)."""
    put(clocked_emulator, wire_box, "/tmp/f")
    async with await get(raw_http, wire_box, "/tmp/f", Range="bytes=0-1,5-9") as response:
        assert response.status == 200
        assert await response.read() == CONTENT


# -- GET /files: errors ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    # "/tmp/../tmp/f" names no directory: only the relative-segment rule can refuse it.
    [
        *[None, "", "home/user/f", "./f", "/home/./f", "/home/../etc/passwd", "/tmp/.."],
        *["/a\x00b", "/tmp/../tmp/f"],
    ],
)
async def test_download_bad_path_400(
    raw_http: aiohttp.ClientSession, wire_box: Box, path: str | None
) -> None:
    """400: path missing, empty, not absolute, with relative segments or NUL."""
    async with await get(raw_http, wire_box, path) as response:
        await data_error(response, 400)


async def test_download_directory_400(raw_http: aiohttp.ClientSession, wire_box: Box) -> None:
    """A directory path is not a file: 400 (the emulator's documented choice)."""
    async with await get(raw_http, wire_box, "/home/user") as response:
        await data_error(response, 400)


@pytest.mark.parametrize(
    "path", ["/home/user/missing.bin", "/nodir/f", "/home/user/f/under-a-file"]
)
async def test_download_missing_file_or_parent_404(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box, path: str
) -> None:
    """404: file or parent missing."""
    put(clocked_emulator, wire_box, "/home/user/f", b"x")
    async with await get(raw_http, wire_box, path) as response:
        await data_error(response, 404)


async def test_download_deleted_sandbox_404(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """404: sandbox gone (deleted), asked with its own token."""
    await clocked_emulator.delete_sandbox(wire_box.key)
    async with await get(raw_http, wire_box, "/tmp/f") as response:
        await data_error(response, 404)


async def test_root_files_403_unless_root(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """403: token valid, file permissions forbid; username=root acts as root."""
    put(clocked_emulator, wire_box, "/root/secret", b"s3")
    async with await get(raw_http, wire_box, "/root/secret") as response:
        await data_error(response, 403)
    params = {"path": "/root/secret", "username": "root"}
    async with raw_http.get(wire_box.files, params=params, headers=wire_box.auth) as response:
        assert response.status == 200
        assert await response.read() == b"s3"


async def test_idc_ignoring_username_acts_as_default_user(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Some data centers ignore username and always act as the default user."""
    box = await new_box(clocked_emulator, "ap-chunked")
    put(clocked_emulator, box, "/root/secret", b"s3")
    params = {"path": "/root/secret", "username": "root"}
    async with raw_http.get(box.files, params=params, headers=box.auth) as response:
        await data_error(response, 403)


@pytest.mark.parametrize(
    ("status", "fault"),
    [(429, Fault.status(429)), (500, Fault.status(500)), (502, Fault.status(502))],
)
async def test_download_error_statuses_have_message_body(
    clocked_emulator: Emulator,
    raw_http: aiohttp.ClientSession,
    wire_box: Box,
    status: int,
    fault: Fault,
) -> None:
    """429, 500 and 502 rows: the data-plane error body {message} only."""
    clocked_emulator.faults.script("files.download", fault)
    async with await get(raw_http, wire_box, "/tmp/none") as response:
        await data_error(response, status)


# -- authentication ---------------------------------------------------------------------------


async def test_401_identical_for_missing_malformed_expired_foreign_tokens(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Auth rule 6: missing, malformed, expired or foreign tokens give the identical 401."""
    other = await new_box(clocked_emulator)
    expired = await new_box(clocked_emulator)
    clocked_emulator.expire_token(expired.key)
    attempts = [
        (wire_box.files, {}),
        (wire_box.files, {"X-Access-Token": "not a token"}),
        (wire_box.files, {"X-Access-Token": other.token}),
        (expired.files, expired.auth),
        (f"http://sbx-unknown.{clocked_emulator.domain}/files", wire_box.auth),
    ]
    bodies = []
    for url, headers in attempts:
        async with raw_http.get(url, params={"path": "/tmp/x"}, headers=headers) as response:
            await data_error(response, 401)
            bodies.append(await response.read())
    assert len(set(bodies)) == 1


async def test_sandbox_a_token_fails_on_sandbox_b(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Auth rule 4: sandbox A's token fails against sandbox B's host; files are separate."""
    a, b = await new_box(clocked_emulator), await new_box(clocked_emulator)
    put(clocked_emulator, b, "/tmp/b-only", b"b")
    async with raw_http.get(b.files, params={"path": "/tmp/b-only"}, headers=a.auth) as response:
        await data_error(response, 401)
    async with raw_http.get(a.files, params={"path": "/tmp/b-only"}, headers=a.auth) as response:
        await data_error(response, 404)


async def test_deleted_sandbox_foreign_token_still_401(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """A deleted sandbox answers 404 only to its own token; another token stays 401."""
    a, b = await new_box(clocked_emulator), await new_box(clocked_emulator)
    await clocked_emulator.delete_sandbox(a.key)
    async with raw_http.get(a.files, params={"path": "/tmp/x"}, headers=b.auth) as response:
        await data_error(response, 401)


async def test_control_plane_token_invalid_on_data_plane(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Auth rule 3: control-plane tokens are invalid on the data plane."""
    for headers in (
        {"X-Access-Token": clocked_emulator.api_key},
        {"Authorization": f"Bearer {clocked_emulator.api_key}"},
    ):
        async with raw_http.get(
            wire_box.files, params={"path": "/tmp/x"}, headers=headers
        ) as response:
            await data_error(response, 401)


async def test_data_plane_token_invalid_on_control_plane(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Auth rule 3: data-plane tokens are invalid on the control plane."""
    headers = {"Authorization": f"Bearer {wire_box.token}"}
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=headers
    ) as response:
        assert response.status == 401
    async with raw_http.get(
        f"{clocked_emulator.base_url}/api/v2/products", headers=wire_box.auth
    ) as response:
        assert response.status == 401


async def test_unknown_data_plane_path_404(raw_http: aiohttp.ClientSession, wire_box: Box) -> None:
    """Paths other than /files are 404 with the data-plane error body (after auth)."""
    async with raw_http.get(
        wire_box.files.replace("/files", "/nothing"), headers=wire_box.auth
    ) as response:
        await data_error(response, 404)
    async with raw_http.get(wire_box.files.replace("/files", "/nothing")) as response:
        await data_error(response, 401)


# -- POST /files ------------------------------------------------------------------------------


async def test_upload_success_is_single_element_array(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Upload: 200 with a JSON array holding one {path, name, type: file}; the file is written."""
    async with await upload(raw_http, wire_box, "/home/user/in.bin", CONTENT) as response:
        assert response.status == 200
        assert await response.json() == [
            {"path": "/home/user/in.bin", "name": "in.bin", "type": "file"}
        ]
    assert (
        clocked_emulator.sandbox_root(wire_box.key) / "home/user/in.bin"
    ).read_bytes() == CONTENT


async def test_upload_overwrites(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Upload overwrites an existing file."""
    put(clocked_emulator, wire_box, "/tmp/f", b"old contents, longer")
    async with await upload(raw_http, wire_box, "/tmp/f", b"new") as response:
        assert response.status == 200
    assert (clocked_emulator.sandbox_root(wire_box.key) / "tmp/f").read_bytes() == b"new"


async def test_upload_with_aiohttp_formdata(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A multipart body as aiohttp's FormData builds it is accepted."""
    form = aiohttp.FormData()
    form.add_field("file", b"abc", filename="f.txt", content_type="text/plain")
    async with raw_http.post(
        wire_box.files, params={"path": "/tmp/f.txt"}, data=form, headers=wire_box.auth
    ) as r:
        assert r.status == 200
    assert (clocked_emulator.sandbox_root(wire_box.key) / "tmp/f.txt").read_bytes() == b"abc"


async def test_upload_extra_path_field_400(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Upload rule 1: an extra path form field in the body is rejected with 400."""
    for parts in (
        [("file", "f", b"x"), ("path", None, b"/tmp/f")],
        [("path", None, b"/tmp/f"), ("file", "f", b"x")],
    ):
        headers = {**wire_box.auth, "Content-Type": MULTIPART_TYPE}
        body = multipart(*parts)
        async with raw_http.post(
            wire_box.files, params={"path": "/tmp/f"}, data=body, headers=headers
        ) as r:
            await data_error(r, 400)
    assert not (clocked_emulator.sandbox_root(wire_box.key) / "tmp/f").exists()


async def test_upload_without_file_part_400(raw_http: aiohttp.ClientSession, wire_box: Box) -> None:
    """One file part named file is required; two are rejected too."""
    headers = {**wire_box.auth, "Content-Type": MULTIPART_TYPE}
    for body in (multipart(), multipart(("file", "a", b"1"), ("file", "b", b"2"))):
        async with raw_http.post(
            wire_box.files, params={"path": "/tmp/f"}, data=body, headers=headers
        ) as r:
            await data_error(r, 400)


@pytest.mark.parametrize("content_type", ["application/octet-stream", "application/json", None])
async def test_upload_non_multipart_415(
    raw_http: aiohttp.ClientSession, wire_box: Box, content_type: str | None
) -> None:
    """Upload rule 2: a Content-Type other than multipart/form-data returns 415."""
    headers = dict(wire_box.auth)
    if content_type:
        headers["Content-Type"] = content_type
    async with raw_http.post(
        wire_box.files, params={"path": "/tmp/f"}, data=b"raw", headers=headers
    ) as r:
        await data_error(r, 415)


async def test_upload_missing_parent_404(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """The parent directory must already exist: 404 otherwise."""
    async with await upload(raw_http, wire_box, "/no/such/dir/f", b"x") as response:
        await data_error(response, 404)


@pytest.mark.parametrize("path", ["", "tmp/f", "/tmp/../f", "/tmp/./f", "/", "/tmp"])
async def test_upload_bad_path_400(
    raw_http: aiohttp.ClientSession, wire_box: Box, path: str
) -> None:
    """Upload path rules (required, absolute, no relative segments, not a directory): 400."""
    async with await upload(raw_http, wire_box, path, b"x") as response:
        await data_error(response, 400)


async def test_upload_401_and_403(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """Upload answers 401 for a bad token and 403 on permissions, like download."""
    stranger = Box(wire_box.key, "sat-wrong", wire_box.domain)
    async with await upload(raw_http, stranger, "/tmp/f", b"x") as response:
        await data_error(response, 401)
    async with await upload(raw_http, wire_box, "/root/f", b"x") as response:
        await data_error(response, 403)
    async with await upload(raw_http, wire_box, "/root/f", b"x", username="root") as response:
        assert response.status == 200


async def test_upload_size_limit_413_exact_boundary(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession
) -> None:
    """Upload rule 3: a file of exactly the limit is accepted; one byte more gets 413."""
    box = await new_box(clocked_emulator, "eu-lite")
    limit = 10 * 2**20
    async with await upload(raw_http, box, "/tmp/exact", b"\0" * limit) as response:
        assert response.status == 200
    async with await upload(raw_http, box, "/tmp/over", b"\0" * (limit + 1)) as response:
        await data_error(response, 413)
    assert not (clocked_emulator.sandbox_root(box.key) / "tmp/over").exists()
    assert list((clocked_emulator.sandbox_root(box.key).parent / "staging").iterdir()) == []


async def test_truncated_multipart_400_leaves_no_file(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A multipart body cut before its closing boundary is 400 and leaves no partial file."""
    body = multipart(("file", "f", CONTENT), close=False)[:-100]
    headers = {**wire_box.auth, "Content-Type": MULTIPART_TYPE}
    async with raw_http.post(
        wire_box.files, params={"path": "/tmp/f"}, data=body, headers=headers
    ) as r:
        await data_error(r, 400)
    assert not (clocked_emulator.sandbox_root(wire_box.key) / "tmp/f").exists()
    assert list((clocked_emulator.sandbox_root(wire_box.key).parent / "staging").iterdir()) == []


async def test_upload_then_download_round_trip_odd_path(
    clocked_emulator: Emulator, raw_http: aiohttp.ClientSession, wire_box: Box
) -> None:
    """A path with spaces, #, &, ?, % and non-ASCII travels encoded in the query both ways."""
    path = "/tmp/a b#c&d?e%f-é.txt"
    async with await upload(raw_http, wire_box, path, b"odd") as response:
        assert (await response.json())[0]["path"] == path
    async with await get(raw_http, wire_box, path) as response:
        assert await response.read() == b"odd"
        assert "filename*=UTF-8''" in response.headers["Content-Disposition"]
