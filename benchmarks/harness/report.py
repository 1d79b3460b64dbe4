"""The report of a run: percentiles, one JSON line on stdout per result as soon as it is
measured, progress and markdown tables on stderr."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

Results = list[dict[str, Any]]


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


def latency_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """Sample count and p50/p90/p99/max in milliseconds of latencies given in seconds."""
    return {
        "samples": len(seconds),
        "p50_ms": ms(percentile(seconds, 50)),
        "p90_ms": ms(percentile(seconds, 90)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds, default=None)),
    }


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def emit(result: dict[str, Any]) -> dict[str, Any]:
    """Print one result as a JSON line on stdout at once (long runs show progress); returns
    it."""
    print(json.dumps(result), flush=True)
    return result


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], left: int = 1) -> str:
    """A markdown table: the first ``left`` columns left-aligned, the others right-aligned;
    None shows as n/a."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(["---"] * left + ["---:"] * (len(headers) - left)) + "|",
    ]
    lines += ["| " + " | ".join("n/a" if v is None else str(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
