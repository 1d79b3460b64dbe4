"""The bounds of task logs, as pure rules: what one POST may carry, how a message or a
logger name is cut to fit, how many lines a task keeps, and the per-task rate (a token
bucket: ``lines_per_second`` refilled continuously, up to as many held at once)."""

from __future__ import annotations

from dataclasses import dataclass

LEVELS = ("debug", "info", "warning", "error", "critical")
MAX_LINES_PER_POST = 500
TRUNCATED_MARKER = " … [truncated]"


@dataclass(frozen=True, slots=True)
class LogLimits:
    """What the hub keeps of a task's log. ``max_message_bytes``: a message longer (in
    UTF-8) is cut and ends with ``TRUNCATED_MARKER``; ``max_lines_per_task``: older lines
    go once a task holds more; ``lines_per_second``: a task's lines beyond this rate are
    dropped (counted)."""

    max_message_bytes: int = 64 * 1024
    max_logger_chars: int = 128
    max_lines_per_task: int = 5000
    lines_per_second: float = 1000.0


DEFAULT_LOG_LIMITS = LogLimits()


def fit_message(message: str, max_bytes: int) -> str:
    """``message`` if it fits in ``max_bytes`` of UTF-8, else its head (whole characters)
    and ``TRUNCATED_MARKER``, together within ``max_bytes``."""
    encoded = message.encode("utf-8", "surrogatepass")
    if len(encoded) <= max_bytes:
        return message
    room = max(max_bytes - len(TRUNCATED_MARKER.encode("utf-8")), 0)
    return encoded[:room].decode("utf-8", "ignore") + TRUNCATED_MARKER


def fit_logger(name: str | None, max_chars: int) -> str | None:
    """A logger name cut to the column's width (an empty name is no name)."""
    return name[:max_chars] if name else None


@dataclass(frozen=True, slots=True)
class RateBucket:
    """A task's rate state: ``tokens`` (lines it may still send now) as of ``updated``
    (seconds, monotonic), and ``owed``: lines dropped while nothing was kept, to be marked
    on the next line kept."""

    tokens: float
    updated: float
    owed: int = 0


def take(
    bucket: RateBucket | None, wanted: int, now: float, limits: LogLimits
) -> tuple[int, RateBucket]:
    """How many of ``wanted`` lines the rate admits now, and the bucket after. A task's
    first lines find the bucket full."""
    rate = limits.lines_per_second
    if bucket is None:
        tokens = rate
        owed = 0
    else:
        tokens = min(rate, bucket.tokens + max(now - bucket.updated, 0.0) * rate)
        owed = bucket.owed
    granted = min(wanted, int(tokens))
    return granted, RateBucket(tokens - granted, now, owed)
