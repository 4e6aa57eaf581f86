"""Case results: rows of figures, targets met or missed, printed as a table or as JSON."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO


@dataclass
class Column:
    """One column of a case's table: the row key, its header and its number format."""

    key: str
    header: str
    fmt: str = "{:.2f}"


@dataclass
class Target:
    """One of the issue's targets, with the measured value."""

    what: str
    value: float
    bound: str
    met: bool


def target(what: str, value: float, bound: str) -> Target:
    """A Target whose `met` is computed from `bound` ("<= 1.1", ">= 0.95", "< 32"...)."""
    op, _, number = bound.partition(" ")
    limit = float(number)
    met = {
        ">=": value >= limit,
        "<=": value <= limit,
        "<": value < limit,
        ">": value > limit,
        "==": value == limit,
    }[op]
    return Target(what, value, bound, met)


@dataclass
class CaseResult:
    """What one case measured."""

    name: str
    title: str
    server: str
    columns: list[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (NaN becomes null)."""
        data = asdict(self)
        del data["columns"]
        cleaned: dict[str, Any] = _clean(data)
        return cleaned


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else round(value, 6)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _cell(value: Any, fmt: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, str):
        return value
    return fmt.format(value)


def print_case(case: CaseResult, out: TextIO) -> None:
    """Print one case as an aligned table, then its targets and notes."""
    print(f"\n## {case.title}", file=out)
    print(f"server: {case.server}", file=out)
    if case.config:
        print("config: " + ", ".join(f"{k}={v}" for k, v in case.config.items()), file=out)
    headers = ["contender", *(c.header for c in case.columns)]
    body = [
        [str(row["contender"]), *(_cell(row.get(c.key), c.fmt) for c in case.columns)]
        for row in case.rows
    ]
    widths = [max(len(line[i]) for line in [headers, *body]) for i in range(len(headers))]
    print(_line(headers, widths), file=out)
    print(_line(["-" * w for w in widths], widths), file=out)
    for line in body:
        print(_line(line, widths), file=out)
    for target in case.targets:
        verdict = "met" if target.met else "MISSED"
        print(
            f"  target {verdict:>6}: {target.what} = {target.value:.3g} ({target.bound})", file=out
        )
    for note in case.notes:
        print(f"  note: {note}", file=out)


def _line(cells: list[str], widths: list[int]) -> str:
    first = cells[0].ljust(widths[0])
    rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
    return "  ".join([first, *rest]).rstrip()
