"""Budgets' arithmetic: token buckets on a fake clock, the grain of a draw, rclone's
`--bwlimit`, and the `Budgets` option's checks. Table-driven, no event loop."""

from __future__ import annotations

import pickle

import pytest

import sandboxkit
from sandboxkit._core.budgets import (
    GRAIN_MAX,
    GRAIN_MIN,
    SWEEP_FLOOR,
    TokenBucket,
    describe_rate,
    grain_for,
    next_sweep,
    parse_bwlimit,
)

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40


@pytest.mark.parametrize(
    ("steps", "waits"),
    [
        # (time, amount) draws from a 100/s bucket of capacity 10, full at t=0.
        ([(0, 10)], [0.0]),  # the burst goes at once
        ([(0, 10), (0, 10)], [0.0, 0.1]),  # then 10 more take 0.1 s
        ([(0, 10), (0, 10), (0, 10)], [0.0, 0.1, 0.2]),  # reserved in order: FIFO
        ([(0, 30), (0, 1)], [0.2, 0.21]),  # a large draw's debt delays the next
        ([(0, 10), (1.0, 10)], [0.0, 0.0]),  # an idle second refills (to capacity only)
        ([(0, 10), (1.0, 20)], [0.0, 0.1]),  # saved tokens never exceed the capacity
        ([(0, 20), (0.05, 5)], [0.1, 0.1]),  # a debt is paid off as time passes
        ([(0, 5), (0.02, 5)], [0.0, 0.0]),  # 5 left + 2 refilled cover the next 5
    ],
)
def test_a_bucket_reserves_draws_in_order_at_its_rate(
    steps: list[tuple[float, int]], waits: list[float]
) -> None:
    """Each draw is told how long to wait; the waits space draws at exactly the rate."""
    bucket = TokenBucket(rate=100.0, capacity=10.0, now=0.0)
    assert [bucket.take(amount, now) for now, amount in steps] == pytest.approx(waits)


@pytest.mark.parametrize(
    ("steps", "at", "full"),
    [
        # (time, amount) draws from a 100/s bucket of capacity 10, full at t=0.
        ([], 0.0, True),  # a fresh bucket is full
        ([(0, 10)], 0.0, False),  # its burst drawn
        ([(0, 10)], 0.09, False),  # 9 of 10 refilled
        ([(0, 10)], 0.1, True),  # all refilled: the same as a fresh bucket
        ([(0, 30)], 0.2, False),  # in debt until 0.2, and empty then (its drawer goes on)
        ([(0, 30)], 0.29, False),
        ([(0, 30)], 0.3, True),
        ([(0, 1), (1.0, 1)], 1.0, False),  # a draw just now, after an idle second
        ([(0, 10)], -5.0, False),  # a clock read before the last draw adds nothing
    ],
)
def test_a_bucket_is_full_once_every_draw_has_refilled(
    steps: list[tuple[float, int]], at: float, full: bool
) -> None:
    """`full` (which lets a throttle drop the bucket) is true only with no debt and nothing
    drawn left to refill."""
    bucket = TokenBucket(rate=100.0, capacity=10.0, now=0.0)
    for now, amount in steps:
        bucket.take(amount, now)
    assert bucket.full(at) is full


@pytest.mark.parametrize(
    ("kept", "next_at"),
    [
        (0, SWEEP_FLOOR),
        (SWEEP_FLOOR // 2, SWEEP_FLOOR),
        (SWEEP_FLOOR // 2 + 1, SWEEP_FLOOR + 2),  # twice the busy ones, once past the floor
        (SWEEP_FLOOR, 2 * SWEEP_FLOOR),
        (50_000, 100_000),
    ],
)
def test_the_next_sweep_comes_after_as_many_new_hosts_as_were_kept(kept: int, next_at: int) -> None:
    """A sweep that could drop little is not repeated on the next new host."""
    assert next_sweep(kept) == next_at


@pytest.mark.parametrize(
    ("rate", "capacity", "then"),
    [
        (1.0, 10.0, 10.0),  # lowered: the debt of 90 under 100/s is forgiven, 10 wait 10 s
        (1000.0, 10.0, 0.01),  # raised: 10 tokens at 1000/s
        (100.0, 50.0, 0.1),  # the same rate: the debt is forgiven all the same
    ],
)
def test_a_retuned_bucket_forgives_the_old_debt(rate: float, capacity: float, then: float) -> None:
    """A new rate starts from an empty bucket, not from the debt the old rate ran up."""
    bucket = TokenBucket(rate=100.0, capacity=10.0, now=0.0)
    assert bucket.take(100, 0.0) == pytest.approx(0.9)
    bucket.retune(rate, capacity, 0.0)
    assert bucket.tokens == 0.0
    assert bucket.take(10, 0.0) == pytest.approx(then)


def test_a_retuned_bucket_keeps_saved_tokens_up_to_its_capacity() -> None:
    """Tokens saved under the old rate stay, cut to the new capacity."""
    bucket = TokenBucket(rate=100.0, capacity=10.0, now=0.0)
    bucket.retune(100.0, 4.0, 5.0)
    assert bucket.tokens == 4.0 and bucket.stamp == 5.0


def test_a_bucket_holds_its_rate_over_many_small_draws() -> None:
    """10 s of 64 drawers taking grains in turn moves the rate's bytes, within one grain."""
    rate = 10 * MiB
    grain = grain_for(rate)
    bucket = TokenBucket(float(rate), float(grain), 0.0)
    ready = [0.0] * 64  # when each drawer may draw again
    moved = 0
    while True:
        drawer = min(range(64), key=ready.__getitem__)
        now = ready[drawer]
        if now >= 10.0:
            break
        ready[drawer] = now + bucket.take(grain, now)
        moved += grain
    assert abs(moved - 10 * rate) <= 64 * grain + grain


@pytest.mark.parametrize(
    ("rate", "grain"),
    [
        (1, GRAIN_MIN),
        (100 * KiB, 12800),  # 1/8 s of the budget
        (1 * MiB, 128 * KiB),
        (2 * MiB, GRAIN_MAX),
        (10 * GiB, GRAIN_MAX),  # never more than s3transfer's 256 KB a draw
    ],
)
def test_a_draw_is_at_most_an_eighth_of_a_second_of_the_budget(rate: int, grain: int) -> None:
    """The grain: 1/8 s of the rate, within 4 KiB..256 KiB."""
    assert grain_for(rate) == grain


@pytest.mark.parametrize(
    ("spec", "limits"),
    [
        ("10M", (10 * MiB, 10 * MiB)),
        ("10M:100M", (10 * MiB, 100 * MiB)),
        ("10M:100k", (10 * MiB, 100 * KiB)),
        ("10M:off", (10 * MiB, None)),
        ("off:1G", (None, GiB)),
        ("off", (None, None)),
        ("OFF", (None, None)),
        ("0", (None, None)),  # rclone: 0 is no limit
        ("512", (512 * KiB, 512 * KiB)),  # a bare number is KiB/s
        ("100B", (100, 100)),
        ("100b", (100, 100)),
        ("1.5M", (3 * MiB // 2, 3 * MiB // 2)),
        ("10Mi", (10 * MiB, 10 * MiB)),
        ("10MiB", (10 * MiB, 10 * MiB)),
        ("10mib", (10 * MiB, 10 * MiB)),
        ("2T", (2 * TiB, 2 * TiB)),
        ("1P", (1 << 50, 1 << 50)),
        (" 10M ", (10 * MiB, 10 * MiB)),
    ],
)
def test_bwlimit_reads_as_rclone_does(spec: str, limits: tuple[int | None, int | None]) -> None:
    """`--bwlimit` gives (upload, download) in bytes/s, binary units, KiB for a bare number."""
    assert parse_bwlimit(spec) == limits


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "give a bandwidth"),
        ("fast", "is not a bandwidth"),
        ("-5M", "is not a bandwidth"),
        ("10X", "is not a bandwidth"),
        ("10MB/s", "is not a bandwidth"),
        ("10Bi", "is not a bandwidth"),
        ("1:2:3", "more than two parts"),
        ("08:00,512k 12:00,10M", "timetables are not supported"),
        ("Mon-08:00,512k", "timetables are not supported"),
        ("10M :1M", "timetables are not supported"),
        ("0.5B", "less than 1 byte/s"),
        ("10M:x", "--bwlimit DOWN"),
        ("x:10M", "--bwlimit UP"),
    ],
)
def test_a_bad_bwlimit_is_refused_saying_why(spec: str, says: str) -> None:
    """A value rclone would refuse (or a timetable) raises ValidationError naming it."""
    with pytest.raises(sandboxkit.ValidationError, match=says):
        parse_bwlimit(spec)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"download_bytes_per_second": 0}, "download_bytes_per_second=0"),
        ({"upload_bytes_per_second": -1}, "upload_bytes_per_second=-1"),
        ({"upload_bytes_per_second": "10M"}, "must be a number >= 1"),
        ({"download_bytes_per_second": float("inf")}, "must be a number >= 1"),
        ({"download_bytes_per_second": True}, "must be a number >= 1"),
        ({"requests_per_second": 0}, "must be a positive number"),
        ({"request_burst": 0}, "request_burst=0"),
        ({"request_burst": 1.5}, "request_burst=1.5"),
        ({"per_host": 5}, "per_host=5"),
        ({"per_host": sandboxkit.Budgets(per_host=sandboxkit.Budgets())}, "of their own"),
    ],
)
def test_bad_budgets_are_refused(options: dict[str, object], says: str) -> None:
    """Each field is checked when the value is made, the message naming it."""
    with pytest.raises(sandboxkit.ValidationError, match=says):
        sandboxkit.Budgets(**options)  # type: ignore[arg-type]


def test_budgets_from_bwlimit_keep_the_other_fields_and_pickle() -> None:
    """`from_bwlimit` is UP:DOWN; other fields pass through; the value pickles (Dask)."""
    budgets = sandboxkit.Budgets.from_bwlimit("1M:4M", requests_per_second=5, request_burst=3)
    assert budgets.upload_bytes_per_second == MiB
    assert budgets.download_bytes_per_second == 4 * MiB
    assert pickle.loads(pickle.dumps(budgets)) == budgets
    assert not budgets.unlimited and sandboxkit.Budgets().unlimited


@pytest.mark.parametrize(
    ("budgets", "text"),
    [
        (sandboxkit.Budgets(), "download off, upload off, requests off"),
        (
            sandboxkit.Budgets(download_bytes_per_second=10 * MiB, requests_per_second=20),
            "download 10 MiB/s, upload off, requests 20/s burst 1",
        ),
        (
            sandboxkit.Budgets(
                upload_bytes_per_second=1536,
                per_host=sandboxkit.Budgets(download_bytes_per_second=GiB),
            ),
            "download off, upload 1.5 KiB/s, requests off; per host: download 1 GiB/s, "
            "upload off, requests off",
        ),
    ],
)
def test_budgets_describe_themselves_for_people(budgets: sandboxkit.Budgets, text: str) -> None:
    """`describe()` is what the DEBUG line and the batch summary show."""
    assert budgets.describe() == text
    assert describe_rate(500) == "500 B/s"
