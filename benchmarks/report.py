"""What every benchmark script shares: percentiles, JSON lines on stdout, progress and
markdown tables on stderr, and the client-side process set-up."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import math
import os
import resource
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Results = list[dict[str, Any]]


def fail_fast_sniffio_import() -> None:
    """httpcore runs ``import sniffio`` on every request; without sniffio installed each attempt
    searches ``sys.path`` again, a quarter of this client's CPU. Make the import fail at once
    (the same outcome, for every target alike)."""
    if importlib.util.find_spec("sniffio") is None:
        sys.modules["sniffio"] = None  # type: ignore[assignment]


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft limit on open files to at least ``needed`` (capped by the
    hard limit); servers started afterwards inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        soft = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft


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


def cancel_on_termination() -> None:
    """Turn SIGTERM and SIGHUP into cancellation, so that servers are stopped and the
    PostgreSQL database dropped on the way out (asyncio.run already does so for SIGINT)."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, task.cancel)


def run_main(
    work: Callable[[Results], Awaitable[None]],
    render: Callable[[Results], str],
    json_out: Path | None = None,
) -> int:
    """A benchmark script's body: run ``work`` (it appends its results, each already emitted),
    then write ``json_out`` if asked and the tables on stderr, also after an interruption.
    Exit status: 130 if interrupted, 1 if any result has an error, else 0."""
    fail_fast_sniffio_import()
    results: Results = []

    async def guarded() -> None:
        cancel_on_termination()
        await work(results)

    code = 0
    try:
        asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: servers stopped")
        code = 130
    if json_out is not None:
        json_out.write_text("".join(json.dumps(result) + "\n" for result in results))
    log("\n" + render(results))
    return code or (1 if any(result.get("error") for result in results) else 0)


def csv_ints(text: str) -> list[int]:
    """``argparse`` type for a comma-separated list of positive integers."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,4,16")
    return values


def csv_choices(text: str, allowed: Iterable[str], what: str) -> list[str]:
    """A comma-separated list of names, each one of ``allowed``."""
    allowed = list(allowed)
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(names) - set(allowed))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {allowed}")
    return names
