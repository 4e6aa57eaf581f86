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


def test_damped_by_interval_and_evidence() -> None:
    """No change before `evidence` completions, nor within `min_interval` of the last."""
    c = ConcurrencyController(evidence=8, evidence_bytes=1 << 40, min_interval=0.5)
    assert feed(c, 0.0, 7, 0.1) == []  # 7 completions: not enough evidence
    assert [e.concurrency for e in feed(c, 0.0, 1, 0.1)] == [8]
    assert feed(c, 0.3, 20, 0.1) == []  # plenty of evidence, but 0.3 s after the change
    assert c.limit == 8
    assert [e.concurrency for e in feed(c, 0.6, 1, 0.1)] == [16]
    # Enough bytes count as evidence too: two 16 MiB transfers make 32 MiB > 20 MiB.
    d = ConcurrencyController(evidence=8, min_interval=0.5)
    assert [e.concurrency for e in feed(d, 0.0, 2, 1.0, size=16 * MiB)] == [8]


@pytest.mark.parametrize(
    ("limit", "slowdown", "expected", "reason"),
    [
        # 32 in flight, each taking 2x the model: ~16 queued, beta 9.6 -> shrink by 6
        (32, 2.0, 26, "queueing"),
        # 8 in flight at 4x: 6 queued, beta 3 -> shrink by 3
        (8, 4.0, 5, "queueing"),
        # 16 at 10x: 14.4 queued -> at most half
        (16, 10.0, 8, "queueing"),
        # 8 at 1.2x: 1.3 queued, between alpha (1) and beta (3): no change
        (8, 1.2, 8, None),
    ],
)
def test_shrinks_on_queueing(
    limit: int, slowdown: float, expected: int, reason: str | None
) -> None:
    """Transfers slower than the model by a factor `r` say `c (1 - 1/r)` are queued: more
    than beta shrinks back toward beta, at most halving."""
    c = ConcurrencyController(limit=limit, maximum=64)
    c.completed(0.0, MiB, 0.1)  # the model: 0.1 s a MiB
    events = feed(c, 1.0, 8, 0.1 * slowdown)
    assert c.limit == expected
    assert [e.reason for e in events] == ([] if reason is None else [reason])


def test_shrinks_on_429_and_503_and_grows_one_at_a_time_after() -> None:
    """A 429/503 shrinks by a quarter at the next allowed change; growth is then by one."""
    c = ConcurrencyController(limit=32, maximum=64)
    c.completed(0.0, MiB, 0.1)
    event = c.congested(1.0, "503")
    assert event == PaceEvent(SHRINK, 1.0, 24, reason="503")
    assert c.congested(1.2, "429") is None  # within the interval: waits for the next
    assert [e.concurrency for e in feed(c, 1.6, 1, 0.1)] == [18]  # the 429's shrink
    assert [e.concurrency for e in feed(c, 2.2, 8, 0.1)] == [19]
    assert [e.concurrency for e in feed(c, 2.8, 8, 0.1)] == [20]


def test_stays_within_bounds() -> None:
    """Never below `minimum` nor above `maximum`; a change that moves nothing is no event."""
    c = ConcurrencyController(limit=1, minimum=1, maximum=2)
    assert c.congested(0.0, "429") is None
    assert c.limit == 1
    feed(c, 1.0, 8, 0.1)
    assert c.limit == 2
    assert feed(c, 2.0, 8, 0.1) == []
    assert c.limit == 2


def test_background_shrinks_on_round_trip_inflation_and_grows_back_slowly() -> None:
    """Background mode: round trips 60 ms past their minimum (target 50) shrink by one per
    interval before any loss; back near the minimum it grows by one, never doubling."""
    c = ConcurrencyController(limit=8, maximum=64, background=True, target_delay=0.05)
    for now, rtt in [(0.0, 0.040), (0.0, 0.041), (0.0, 0.042)]:
        assert c.round_trip(now, rtt) is None or c.limit == 8
    limits = []
    for step in range(1, 5):
        for _ in range(4):
            c.round_trip(step * 1.0, 0.100)
        limits.append(c.limit)
    assert limits == [7, 6, 5, 4]
    assert c.inflation == pytest.approx(0.06)
    for _ in range(4):
        c.round_trip(5.0, 0.041)
    events = feed(c, 5.0, 8, 0.1) + feed(c, 6.0, 8, 0.1)
    assert [(e.kind, e.concurrency) for e in events] == [(GROW, 5), (GROW, 6)]
    # Between half the target and the target: hold.
    for _ in range(4):
        c.round_trip(7.0, 0.075)
    assert feed(c, 7.0, 8, 0.1) == []
    assert c.limit == 6


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
