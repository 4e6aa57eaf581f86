"""The fault plan: scripted and seeded-random faults per route.

A fault replaces or damages one answer. It is decided after the request is authenticated
and recorded, so the journal always shows the request a fault hit.
"""

from __future__ import annotations

import random as _random
from collections import Counter, deque
from collections.abc import Iterable, Mapping

import attrs

from ._routes import ROUTE_NAMES, check_routes

__all__ = ["Fault", "FaultPlan"]

_KINDS = ("status", "delay", "cut", "cut_before_headers", "garbage")


@attrs.frozen(slots=True)
class Fault:
    """One injected fault; build it with the class methods, not the constructor.

    Example:
        >>> Fault.status(429, retry_after="0").label
        '429'
    """

    kind: str = attrs.field(validator=attrs.validators.in_(_KINDS))
    http_status: int | None = None
    retry_after: str | None = None
    body: bytes | None = None
    content_type: str | None = None
    seconds: float = 0.0
    after_bytes: int | None = None
    # Random cuts know the body length only when answering, so they carry a fraction of it.
    fraction: float | None = None

    @classmethod
    def status(
        cls, status: int, *, retry_after: str | None = None, body: bytes | None = None
    ) -> Fault:
        """Answer ``status`` with the surface's error body (or ``body`` verbatim).

        Args:
            status: the HTTP status, e.g. 429, 502 or 503.
            retry_after: value of a ``Retry-After`` header to add, if any.
            body: raw bytes to send instead of the surface's error body.
        """
        if not 400 <= status <= 599:
            raise ValueError("a status fault needs a 4xx or 5xx status")
        return cls("status", http_status=status, retry_after=retry_after, body=body)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Wait ``seconds`` (real time), then answer normally."""
        if seconds < 0:
            raise ValueError("delay must be >= 0")
        return cls("delay", seconds=float(seconds))

    @classmethod
    def cut(cls, after_bytes: int = 0) -> Fault:
        """Answer normally but close the connection after ``after_bytes`` bytes of the body.

        The headers (with the full ``Content-Length``) go out first. A body no longer than
        ``after_bytes`` is sent whole: nothing is cut.
        """
        if after_bytes < 0:
            raise ValueError("after_bytes must be >= 0")
        return cls("cut", after_bytes=after_bytes)

    @classmethod
    def cut_before_headers(cls) -> Fault:
        """Read the request, then close the connection without any response."""
        return cls("cut_before_headers")

    @classmethod
    def garbage(
        cls,
        status: int = 200,
        body: bytes = b"{not json",
        content_type: str = "application/json",
    ) -> Fault:
        """Send an arbitrary raw answer (malformed JSON, wrong shape, empty body...)."""
        return cls("garbage", http_status=status, body=body, content_type=content_type)

    @property
    def label(self) -> str:
        """The key this fault is counted under in :attr:`FaultPlan.injected`."""
        if self.kind == "status":
            return str(self.http_status)
        return self.kind

    def cut_offset(self, body_length: int) -> int | None:
        """Where to cut a body of ``body_length`` bytes; None when it goes out whole."""
        if self.kind != "cut":
            return None
        if self.fraction is not None:
            return int(self.fraction * body_length)
        assert self.after_bytes is not None
        return self.after_bytes if self.after_bytes < body_length else None


@attrs.frozen(slots=True)
class _RandomRule:
    rates: tuple[tuple[str, float], ...]
    routes: frozenset[str] | None


def _check_rates(rates: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    checked: list[tuple[str, float]] = []
    for name, rate in rates.items():
        if not (name.isdigit() or name in ("cut", "cut_before_headers")):
            raise ValueError(f"unknown random fault {name!r}: a status like '429', or 'cut'")
        if name.isdigit():
            Fault.status(int(name))  # validates the range
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"rate of {name!r} must be within [0, 1]")
        checked.append((name, float(rate)))
    if sum(rate for _, rate in checked) > 1.0 + 1e-9:
        raise ValueError("fault rates add up to more than 1")
    return tuple(checked)


class FaultPlan:
    """Which answers get a fault: scripted per route first, then seeded-random ones.

    Routes are named as the SDK names the operation they serve (``"files.download"``,
    ``"builds.list"``: the name in its logs and errors); an unknown name raises
    ``ValueError`` at once, listing the known ones.

    Args:
        routes: the route names that may be given; default every route of a stock
            :class:`Emulator` (``Emulator.route_names``).

    Attributes:
        injected: how many faults of each kind were actually injected, e.g.
            ``Counter({"429": 3, "cut": 1})``.
    """

    def __init__(self, routes: Iterable[str] = ROUTE_NAMES) -> None:
        self._routes = frozenset(routes)
        self._scripts: dict[str, deque[Fault]] = {}
        self._rule: _RandomRule | None = None
        self._rng = _random.Random(0)
        self.injected: Counter[str] = Counter()

    def script(self, route: str, *faults: Fault) -> None:
        """Give the next answers of ``route`` these faults, in order; later ones are normal.

        Calling it again for the same route appends to what is still pending.

        Raises:
            ValueError: ``route`` is not a route name.
        """
        check_routes([route], self._routes)
        self._scripts.setdefault(route, deque()).extend(faults)

    def random(
        self,
        *,
        seed: int,
        rates: Mapping[str, float],
        routes: Iterable[str] | None = None,
    ) -> None:
        """Inject faults at random with a seeded generator (same seed, same sequence).

        Args:
            seed: the seed of the plan's own generator.
            rates: probability per fault: HTTP statuses as strings (``"429"`` carries
                ``Retry-After: 0``), ``"cut"`` (offset drawn within the body by the same
                generator) and ``"cut_before_headers"``. One draw per request decides.
            routes: the route names affected; None means every route.

        Raises:
            ValueError: an unknown fault or route name, or rates out of range.
        """
        checked = _check_rates(rates)
        chosen = None if routes is None else frozenset(check_routes(routes, self._routes))
        self._rule = _RandomRule(checked, chosen)
        self._rng = _random.Random(seed)

    @property
    def routes(self) -> frozenset[str]:
        """The route names this plan accepts."""
        return self._routes

    def clear(self) -> None:
        """Drop every scripted and random fault and reset :attr:`injected`."""
        self._scripts.clear()
        self._rule = None
        self.injected.clear()

    def pending(self, route: str) -> int:
        """How many scripted faults are still waiting for ``route``.

        Raises:
            ValueError: ``route`` is not a route name.
        """
        check_routes([route], self._routes)
        return len(self._scripts.get(route, ()))

    def take(self, route: str | None) -> Fault | None:
        """The fault for the next answer of ``route``, counted as injected; None if none."""
        if route is None:
            return None
        fault = self._next_scripted(route) or self._next_random(route)
        if fault is not None:
            self.injected[fault.label] += 1
        return fault

    def _next_scripted(self, route: str) -> Fault | None:
        queue = self._scripts.get(route)
        if not queue:
            return None
        fault = queue.popleft()
        if not queue:
            del self._scripts[route]
        return fault

    def _next_random(self, route: str) -> Fault | None:
        rule = self._rule
        if rule is None or (rule.routes is not None and route not in rule.routes):
            return None
        draw = self._rng.random()
        threshold = 0.0
        for name, rate in rule.rates:
            threshold += rate
            if draw < threshold:
                return self._make(name)
        return None

    def _make(self, name: str) -> Fault:
        if name == "cut":
            return Fault("cut", fraction=self._rng.random())
        if name == "cut_before_headers":
            return Fault.cut_before_headers()
        status = int(name)
        return Fault.status(status, retry_after="0" if status == 429 else None)
