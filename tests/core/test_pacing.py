"""The pacing rules, table-driven on a fake clock: a host's pause, the found concurrency."""

from __future__ import annotations

import pytest

from sandboxkit._core.pacing import GROW, SHRINK, ConcurrencyController, HostPause, PaceEvent

MiB = 1 << 20


@pytest.mark.parametrize(
    ("throttles", "expected_lengths", "until", "pauses", "paused"),
    [
        # (now, retry_after) -> the length said (None: no new pause begun)
        ([(0.0, 1.0)], [1.0], 1.0, 1, 1.0),
        # a second 429 during the pause extends it, without a second pause
        ([(0.0, 1.0), (0.5, 1.0)], [1.0, None], 1.5, 1, 1.5),
        # a shorter Retry-After inside the pause changes nothing
        ([(0.0, 2.0), (0.5, 0.1)], [2.0, None], 2.0, 1, 2.0),
        # Retry-After past the cap is capped
        ([(0.0, 100.0)], [60.0], 60.0, 1, 60.0),
        # Retry-After: 0 pauses nothing
        ([(0.0, 0.0)], [None], 0.0, 0, 0.0),
        # bare 429s: backoff from `first`, doubling on each one
        ([(0.0, None), (1.0, None), (3.0, None)], [0.5, 1.0, 2.0], 5.0, 3, 3.5),
        # after the pause ends, another 429 is a new pause
        ([(0.0, 1.0), (2.0, 1.0)], [1.0, 1.0], 3.0, 2, 2.0),
    ],
)
def test_host_pause(
    throttles: list[tuple[float, float | None]],
    expected_lengths: list[float | None],
    until: float,
    pauses: int,
    paused: float,
) -> None:
    """A 429 pauses the host for Retry-After (capped) or a doubling backoff; a 429 during a
    pause extends it and is no new pause."""
    pause = HostPause()
    said = [pause.throttled(now, after, first=0.5, cap=60.0) for now, after in throttles]
    assert said == expected_lengths
    assert (pause.until, pause.pauses, pause.paused) == (until, pauses, paused)


def test_host_pause_backoff_decays_on_success() -> None:
    """Successes halve the backoff a bare 429 grows from; `remaining` counts down to 0."""
    pause = HostPause()
    for now in (0.0, 1.0, 3.0):
        pause.throttled(now, None, first=0.5, cap=60.0)
    assert pause.backoff == 2.0
    pause.succeeded()
    pause.succeeded()
    assert pause.backoff == 0.5
    assert pause.throttled(10.0, None, first=0.5, cap=60.0) == 1.0
    assert (pause.remaining(10.25), pause.remaining(11.0), pause.remaining(12.0)) == (0.75, 0, 0)


def test_host_pause_off_without_first_or_cap() -> None:
    """A policy that does not honour Retry-After (cap 0, first 0) never pauses."""
    pause = HostPause()
    assert pause.throttled(0.0, 5.0, first=0.0, cap=0.0) is None
    assert pause.throttled(0.0, None, first=0.0, cap=0.0) is None
    assert pause.pauses == 0


def feed(
    c: ConcurrencyController, now: float, count: int, seconds: float, size: int = MiB
) -> list[PaceEvent]:
    """`count` completions of `size` bytes taking `seconds` each, all at `now`."""
    return [e for _ in range(count) if (e := c.completed(now, size, seconds)) is not None]


def test_grows_by_doubling_while_transfers_take_what_the_model_predicts() -> None:
    """Transfers as fast as the fastest seen: 4 -> 8 -> 16 -> 32 -> 64, capped at `maximum`."""
    c = ConcurrencyController(maximum=50)
    limits = []
    for step in range(6):
        events = feed(c, 1.0 * step, 8, 0.1)
        limits.append(c.limit)
        assert all(e.kind == GROW and e.reason == "room" for e in events)
    assert limits == [8, 16, 32, 50, 50, 50]


def test_damped_by_evidence_begun_since_the_change_and_by_interval() -> None:
    """No change before a wave of completions (`limit` of them, at most `evidence`) begun
    since the last change; a change other than doubling also waits `min_interval`."""
    c = ConcurrencyController(limit=4, evidence=8, evidence_bytes=1 << 40, min_interval=0.5)
    assert feed(c, 0.0, 3, 0.1) == []  # 3 completions at 4: not a wave yet
    assert [e.concurrency for e in feed(c, 0.0, 1, 0.1)] == [8]
    # Begun at -0.1, before the change at 0.0: they tell of the level before, and count
    # for nothing however many.
    assert feed(c, 0.3, 20, 0.4) == []
    assert c.limit == 8
    assert [e.concurrency for e in feed(c, 0.3, 8, 0.1)] == [16]  # doubling: no interval
    # After a shrink, growth is by one and waits the interval.
    assert c.congested(1.0, "503") == PaceEvent(SHRINK, 1.0, 8, reason="503")
    assert feed(c, 1.2, 8, 0.1) == []  # a wave, but 0.2 s after the change
    assert [e.concurrency for e in feed(c, 1.6, 1, 0.1)] == [9]
    # Enough bytes count as evidence too: two 16 MiB transfers make 32 MiB > 20 MiB.
    d = ConcurrencyController(limit=4, evidence=8)
    assert [e.concurrency for e in feed(d, 0.0, 2, 1.0, size=16 * MiB)] == [8]


def test_a_change_tells_the_rate_of_the_transfers_that_ended_since_the_last() -> None:
    """The bytes the transfers counted for a change moved, over the time from the first of
    them began to the change; none ended since the last change: 0."""
    c = ConcurrencyController(limit=4, evidence=4)
    events = feed(c, 0.5, 3, 0.5) + feed(c, 0.5, 1, 0.25)  # begun at 0.0 and 0.25
    assert [(e.kind, e.concurrency, e.rate) for e in events] == [(GROW, 8, 8 * MiB)]
    shrink = c.congested(1.1, "429")
    assert shrink is not None and (shrink.concurrency, shrink.rate) == (4, 0.0)


@pytest.mark.parametrize(
    ("limit", "slowdown", "expected", "reason"),
    [
        # 32 in flight, each taking 4x the model: 8 move, 24 queued, more than 16 (half):
        # back to 16 queued
        (32, 4.0, 24, "queueing"),
        # 32 at 2x: 16 queued, not more than half: hold
        (32, 2.0, 32, None),
        # 8 at 4x: 2 move, 6 queued, more than 4: back to 4 queued
        (8, 4.0, 6, "queueing"),
        # 16 at 10x: 14.4 queued, 6.4 too many: by 6
        (16, 10.0, 10, "queueing"),
        # 64 at 20x: 60.8 queued, 28.8 too many
        (64, 20.0, 36, "queueing"),
        # 8 at 1.2x: 1.3 queued, between max(1, c/10) and max(3, c/2): hold
        (8, 1.2, 8, None),
    ],
)
def test_shrinks_on_queueing(
    limit: int, slowdown: float, expected: int, reason: str | None
) -> None:
    """Transfers slower than the model by a factor `r` say `c - c/r` are queued: more than
    half the concurrency (at least 3) shrinks back to that many."""
    c = ConcurrencyController(limit=limit, maximum=64)
    c.completed(0.0, MiB, 0.1)  # the model: 0.1 s a MiB
    events = feed(c, 1.0, 8, 0.1 * slowdown)
    assert c.limit == expected
    assert [e.reason for e in events] == ([] if reason is None else [reason])


def test_a_growth_that_paid_goes_on_despite_queueing() -> None:
    """From 8 to 16 the transfers moving rose from 8 to 10.7 (more than 10%): 16 grows on
    though 5 are queued; from 16 to 32 they held at 10.7: 32 stays, its queue of 21 kept
    (nothing lost), and grows no more; when they then fall to 8.9, it shrinks."""
    c = ConcurrencyController(limit=8, maximum=64)
    assert [e.concurrency for e in feed(c, 0.0, 8, 0.1)] == [16]
    assert [e.concurrency for e in feed(c, 1.0, 8, 0.15)] == [32]
    assert feed(c, 2.0, 8, 0.3) == []
    assert feed(c, 3.0, 8, 0.3) == []
    assert c.limit == 32
    assert [(e.concurrency, e.reason) for e in feed(c, 4.0, 8, 0.36)] == [(25, "queueing")]


def test_background_shrinks_a_queue_even_when_throughput_held() -> None:
    """The same run in background mode: 32's queue of 21 shrinks back to 16 queued."""
    c = ConcurrencyController(limit=8, maximum=64, background=True)
    c.round_trip(0.0, 0.040)
    feed(c, 0.0, 8, 0.1)
    c.limit = 32
    c._moving = {16: 32 / 3}
    assert [(e.concurrency, e.reason) for e in feed(c, 2.0, 8, 0.3)] == [(27, "queueing")]


def test_a_growth_that_lost_throughput_shrinks() -> None:
    """A server past its capacity: at 16, 16 move; at 20 each takes 1.5625x as long, so
    12.8 move. Only 7.2 are queued (under half), but 20 moves less than 16 did: shrink."""
    c = ConcurrencyController(limit=16, maximum=20)
    assert [e.concurrency for e in feed(c, 0.0, 8, 0.1)] == [20]
    assert [(e.concurrency, e.reason) for e in feed(c, 1.0, 8, 0.15625)] == [(19, "queueing")]


def test_shrinks_by_half_on_429_and_503_and_grows_one_at_a_time_after() -> None:
    """A 429/503 halves at once, another within the interval at the next allowed change;
    growth is then by one."""
    c = ConcurrencyController(limit=32, maximum=64)
    c.completed(0.0, MiB, 0.1)
    assert c.congested(1.0, "503") == PaceEvent(SHRINK, 1.0, 16, reason="503", rate=MiB / 1.1)
    assert c.congested(1.2, "429") is None  # within the interval: waits for the next
    assert [e.concurrency for e in feed(c, 1.6, 1, 0.1)] == [8]  # the 429's shrink
    assert [e.concurrency for e in feed(c, 2.2, 8, 0.1)] == [9]
    assert [e.concurrency for e in feed(c, 2.8, 8, 0.1)] == [10]


def test_stays_within_bounds() -> None:
    """Never below `minimum` nor above `maximum`; a change that moves nothing is no event."""
    c = ConcurrencyController(limit=1, minimum=1, maximum=2)
    assert c.congested(0.0, "429") is None
    assert c.limit == 1
    feed(c, 1.0, 8, 0.1)
    assert c.limit == 2
    assert feed(c, 2.0, 8, 0.1) == []
    assert c.limit == 2


def rtts(c: ConcurrencyController, now: float, seconds: float) -> list[PaceEvent]:
    """Eight round trips of `seconds` at `now` (fills the recent window)."""
    return [e for _ in range(8) if (e := c.round_trip(now, seconds)) is not None]


def test_background_backs_off_on_round_trip_inflation_and_grows_back_slowly() -> None:
    """Background mode: round trips 15 ms past their 40 ms minimum (the target: a quarter
    of it, 10 ms) shrink by one, 60 ms past it by half, before any loss; back near the
    minimum it grows by one, and after a growth that inflated them waits twice as long."""
    c = ConcurrencyController(limit=4, maximum=64, background=True)
    assert rtts(c, 0.0, 0.040) == []
    assert c.target == pytest.approx(0.010)
    assert [(e.kind, e.concurrency, e.reason) for e in rtts(c, 1.0, 0.055)] == [
        (SHRINK, 3, "latency")
    ]
    assert [e.concurrency for e in rtts(c, 2.0, 0.100)] == [2]  # 3 less half of it
    # Quiet again (within the interval: the window's older, inflated ones move nothing)...
    assert rtts(c, 2.2, 0.041) == []
    # ...and transfers tell of room: one more.
    assert [(e.kind, e.concurrency) for e in feed(c, 3.0, 2, 0.1)] == [(GROW, 3)]
    assert [e.concurrency for e in rtts(c, 3.6, 0.100)] == [2]  # the growth inflated them
    assert rtts(c, 3.8, 0.041) == []
    assert feed(c, 4.2, 2, 0.1) == []  # 0.6 s since: it now waits 1 s
    assert [e.concurrency for e in feed(c, 4.7, 1, 0.1)] == [3]


def test_background_target_stays_within_5_and_25_ms() -> None:
    """The target is a quarter of the baseline, but never under 5 ms nor over 25 ms."""
    for base, target in [(0.001, 0.005), (0.040, 0.010), (0.400, 0.025)]:
        c = ConcurrencyController(background=True)
        c.round_trip(0.0, base)
        assert c.target == pytest.approx(target)


def test_foreground_ignores_round_trips() -> None:
    """Without background mode the round trip alone changes nothing."""
    c = ConcurrencyController(limit=8)
    c.round_trip(0.0, 0.040)
    assert [c.round_trip(float(t), 0.5) for t in range(1, 5)] == [None] * 4
    assert c.limit == 8


def test_the_model_forgets_old_minima() -> None:
    """The fastest time of a size class is kept for `history` periods, then dropped."""
    c = ConcurrencyController(period=60.0, history=2)
    c.completed(0.0, MiB, 0.1)
    c.completed(70.0, MiB, 0.3)
    assert c.predicted(MiB) == 0.1
    c.completed(130.0, MiB, 0.4)
    assert c.predicted(MiB) == 0.3
    assert c.predicted(10) is None
