"""Budgets' arithmetic: token buckets, the grain a transfer draws, and rclone's `--bwlimit`.

Pure: no await, no I/O; time is an argument. `_http/throttle.py` does the waiting.

A bucket holds tokens (bytes, or requests) that refill at `rate` per second up to `capacity`.
A draw takes its tokens at once and may leave the bucket in debt; the drawer then waits until
the debt is paid (`-tokens / rate`). Draws are so reserved in the order they come, many
drawers share the rate exactly, and no drawer waits for a wake-up to learn it may go. When the
rate changes, debt is forgiven: a drawer that reserved under the old rate draws again under
the new one, so a lowered limit is not held up by a debt the old limit ran up, and a raised
one is not held back by waits the old one computed.

A full bucket (`TokenBucket.full`) is the same as a fresh one: it holds no debt, so no drawer
is waiting on it (a drawer's wait ends when the debt it left is paid, and a full bucket has
refilled past that). A throttle may so drop full per-host buckets and make them anew when
their host draws again; `next_sweep` says when it looks for them.
"""

from __future__ import annotations

import math
import re

from ..errors import ValidationError

__all__ = [
    "GRAIN_MAX",
    "GRAIN_MIN",
    "SWEEP_FLOOR",
    "TokenBucket",
    "byte_capacity",
    "describe_rate",
    "grain_for",
    "next_sweep",
    "parse_bwlimit",
    "parse_rate",
]

# The most bytes one draw takes: s3transfer reads 256 KB at a time from its bandwidth
# bucket. Smaller grains at low rates keep a draw to 1/8 s of the budget, so a transfer
# moves smoothly rather than in bursts a quarter of a MiB apart.
GRAIN_MAX = 256 << 10
GRAIN_MIN = 4 << 10
_GRAINS_PER_SECOND = 8


def grain_for(rate: float) -> int:
    """The most bytes one draw takes from a bucket refilled at `rate` bytes per second."""
    return max(GRAIN_MIN, min(GRAIN_MAX, int(rate / _GRAINS_PER_SECOND)))


def byte_capacity(rate: float) -> float:
    """A byte bucket's capacity: one grain. An idle transfer saves up no more than that, so
    no burst after a pause exceeds one draw (over 10 s at 10 MiB/s, a 0.25% overshoot)."""
    return float(grain_for(rate))


class TokenBucket:
    """Tokens refilled at `rate` per second up to `capacity`; draws may run into debt.

    Mutable, and owned by one event loop's throttle: nothing here is thread-safe.
    """

    __slots__ = ("capacity", "rate", "stamp", "tokens")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity  # a fresh bucket is full: the first draws (a burst) go at once
        self.stamp = now

    def __repr__(self) -> str:
        return f"TokenBucket(rate={self.rate}, capacity={self.capacity}, tokens={self.tokens})"

    def _refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def full(self, now: float) -> bool:
        """Whether the bucket holds all it may at `now` (no debt, nothing drawn that has not
        refilled): then it is the same as a fresh bucket, and may be dropped."""
        return self.tokens + max(now - self.stamp, 0.0) * self.rate >= self.capacity

    def take(self, amount: float, now: float) -> float:
        """Take `amount` tokens now; the seconds the drawer must wait before going on (0: at
        once). The debt this leaves delays later draws, not this one's tokens again."""
        self._refill(now)
        self.tokens -= amount
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def retune(self, rate: float, capacity: float, now: float) -> None:
        """A new rate and capacity from `now` on. Debt is forgiven (its drawers draw again);
        saved tokens are kept up to the new capacity."""
        self._refill(now)
        self.rate = rate
        self.capacity = capacity
        self.tokens = min(max(self.tokens, 0.0), capacity)


# The per-host buckets a throttle holds before it first sweeps out the full ones: a batch over
# fewer hosts never sweeps, and one over 100,000 keeps a few thousand, not 100,000.
SWEEP_FLOOR = 1024


def next_sweep(kept: int) -> int:
    """How many per-host buckets a throttle may hold before it next sweeps out the full ones,
    after a sweep that kept `kept` (those still in use). Twice as many: the next sweep comes
    only after as many new hosts as this one kept, so a sweep's cost is paid by the draws that
    made the buckets it looks at, even when every host is busy and nothing can be dropped."""
    return max(SWEEP_FLOOR, 2 * kept)


_UNITS = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
# rclone's SizeSuffix: a number (fractions allowed), then an optional unit letter, which may
# be followed by `i` or `iB` (`10M`, `10Mi`, `10MiB`, any case); a bare number is KiB.
_RATE = re.compile(r"(?P<number>\d+(?:\.\d*)?|\.\d+)(?:(?P<unit>[bkmgtp])(?:i|ib)?)?", re.I)


def parse_rate(text: str, what: str = "--bwlimit") -> int | None:
    """One rclone bandwidth: bytes per second, or None for `off` (or 0, as in rclone).

    Units are binary multiples (`K` = 1024 bytes/s); a bare number is KiB/s, `B` bytes/s.

    Raises:
        ValidationError: not a rate rclone would take (negative, no number, another unit).
    """
    value = text.strip()
    if value.lower() == "off":
        return None
    match = _RATE.fullmatch(value)
    if match is None or ((match["unit"] or "k").lower() == "b" and "i" in value.lower()):
        raise ValidationError(
            f"{what}: {text!r} is not a bandwidth: give a number of KiB/s, or one with a "
            "suffix B, K, M, G, T or P (binary multiples: 10M is 10 MiB/s), or off"
        )
    rate = float(match["number"]) * _UNITS[(match["unit"] or "k").lower()]
    if not math.isfinite(rate):
        raise ValidationError(f"{what}: {text!r} is too large")
    if rate == 0:
        return None  # rclone: 0 is no limit
    if rate < 1:
        raise ValidationError(f"{what}: {text!r} is less than 1 byte/s")
    return int(rate)


def parse_bwlimit(text: str) -> tuple[int | None, int | None]:
    """rclone's `--bwlimit`: `RATE` for both directions, or `UP:DOWN`; (upload, download)
    in bytes per second, None where there is no limit (`off`).

    Raises:
        ValidationError: a bad rate, more than two parts, or an rclone timetable (which
            sandboxkit does not take: change a limit while a job runs with
            `Client.set_budgets`).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("--bwlimit: give a bandwidth such as 10M, UP:DOWN (10M:100M) or off")
    if "," in text or len(text.split()) > 1:
        raise ValidationError(
            f"--bwlimit: {text!r}: rclone's timetables are not supported; give one bandwidth "
            "(10M) or UP:DOWN (10M:100M)"
        )
    parts = text.split(":")
    if len(parts) == 1:
        both = parse_rate(parts[0])
        return both, both
    if len(parts) == 2:
        return parse_rate(parts[0], "--bwlimit UP"), parse_rate(parts[1], "--bwlimit DOWN")
    raise ValidationError(f"--bwlimit: {text!r} has more than two parts (UP:DOWN)")


def describe_rate(rate: float | None, unit: str = "B/s") -> str:
    """A rate for people: `10 MiB/s`, `1.5 KiB/s`, `off`."""
    if rate is None:
        return "off"
    if unit != "B/s":
        return f"{rate:g}{unit}"
    for name, size in (("GiB/s", 1 << 30), ("MiB/s", 1 << 20), ("KiB/s", 1 << 10)):
        if rate >= size:
            return f"{rate / size:.4g} {name}"
    return f"{rate:.4g} B/s"
