"""Taskhub's Prometheus metrics and the hooks that update them.

The metrics live in prometheus-client's default registry, so they work in its multiprocess
mode too (``PROMETHEUS_MULTIPROC_DIR``): counters and histograms are summed across
processes, the gauges count what is live (``livesum``). ``taskhub_queue_depth`` is not
here: it is read from the database at scrape time (``taskhub.observability.scrape``).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics, multiprocess

from taskhub.rules.events import Event, TaskStatusChanged
from taskhub.rules.fair_share import SubmitterClass
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import RETRY_TRANSITIONS, TRANSITIONS, TaskStatus

NO_STATUS = "none"  # the ``from_status`` of a newly submitted task
disable_created_metrics()  # no ``*_created`` series: half the exposition, no use here

TASK_TRANSITIONS = Counter(
    "taskhub_task_transitions",
    "Task status changes published after their commit, by status before and after.",
    ["from_status", "to_status"],
)
CLAIM_SECONDS = Histogram(
    "taskhub_claim_seconds",
    "Duration of the claim service call; outcome claimed (at least one task) or empty.",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
TASK_WAIT_SECONDS = Histogram(
    "taskhub_task_wait_seconds",
    "How long claimed tasks waited since their submit, by their job's claim order (fifo, or "
    "fair: round-robin over submitters or rooms) and their submitter's class in a fair job "
    "(occasional, or backlogged: its own tasks were queued already; unclassed in fifo).",
    ["claim_order", "submitter"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
WORKER_SHORTCUTS = Counter(
    "taskhub_worker_shortcuts",
    "Tasks handed out by the optional worker shortcuts (docs/protocol.md): claim_start (a "
    "claim that also started them), claim_next (claimed by a terminal PATCH) or push (claimed "
    "and started for an idle worker and sent over its socket).",
    ["kind"],
)
SOCKET_TASK_UPDATES = Counter(
    "taskhub_socket_task_updates",
    "Task updates applied from the Socket.IO event task_update (docs/protocol.md), the "
    "socket's stand-in for PATCH /tasks/{id}.",
)
LONG_POLL_SECONDS = Histogram(
    "taskhub_long_poll_seconds",
    "How long long-polls (GET /tasks/{id} with Prefer: wait) waited; outcome woken (the "
    "task ended), timeout, shutdown (released by a graceful shutdown), abandoned (the "
    "client hung up), or revoked (its token was revoked meanwhile: answered 401).",
    ["outcome"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0),
)
LONG_POLL_WAITERS = Gauge(
    "taskhub_long_poll_waiters",
    "Long-polls waiting right now.",
    multiprocess_mode="livesum",
)
CONNECTED_SOCKETS = Gauge(
    "taskhub_connected_sockets",
    "Authenticated Socket.IO connections right now.",
    multiprocess_mode="livesum",
)
OUTBOX_DROPPED = Counter(
    "taskhub_realtime_dropped",
    "Real-time messages (Socket.IO events, wake-ups) dropped because too many were waiting "
    "for Redis.",
    ["outbox"],
)
OUTBOXES = ("socket-events", "wake-ups")  # the names of the outboxes in taskhub.realtime
LONG_POLL_OUTCOMES = ("woken", "timeout", "shutdown", "abandoned", "revoked")
COSTLY_PAYLOADS = Counter(
    "taskhub_costly_payloads",
    "Submitted payloads too costly to validate on the event loop, by outcome: validated (on "
    "the payload thread, valid or refused with 422) or busy (refused with 503 "
    "validation-busy: too many waiting, or too many of one user's).",
    ["outcome"],
)
COSTLY_PAYLOADS_WAITING = Gauge(
    "taskhub_costly_payloads_waiting",
    "Costly payloads waiting for the payload thread or being validated on it right now.",
    multiprocess_mode="livesum",
)
SWEEPER_RUNS = Counter(
    "taskhub_sweeper_runs",
    "Sweeper cycles this process ran (it held the cluster-wide sweeper lease).",
)
SWEEPER_CLEANED = Counter(
    "taskhub_sweeper_cleaned",
    "What sweeper cycles cleaned, by kind (a count field of the sweep report).",
    ["kind"],
)
TASK_LOG_LINES = Counter(
    "taskhub_task_log_lines",
    "Task log lines workers sent, by outcome: accepted (stored) or dropped (over a task's "
    "rate; lines trimmed later to a task's bound are not counted here).",
    ["outcome"],
)

# Every series that can exist starts at zero, so rate() and alerts see it before it moves.
for _source, _targets in [*TRANSITIONS.items(), *RETRY_TRANSITIONS.items()]:
    for _target in _targets:
        TASK_TRANSITIONS.labels(_source.value, _target.value)
TASK_TRANSITIONS.labels(NO_STATUS, TaskStatus.PENDING.value)
_CLAIM_SECONDS_BY_OUTCOME = {
    outcome: CLAIM_SECONDS.labels(outcome) for outcome in ("claimed", "empty")
}
_TASK_WAIT = {
    (order, submitter): TASK_WAIT_SECONDS.labels(order, submitter.value)
    for order in ("fifo", "fair")
    for submitter in SubmitterClass
}
for _kind in ("claim_start", "claim_next", "push"):
    WORKER_SHORTCUTS.labels(_kind)
for _outcome in LONG_POLL_OUTCOMES:
    LONG_POLL_SECONDS.labels(_outcome)
for _outbox in OUTBOXES:
    OUTBOX_DROPPED.labels(_outbox)
_LOG_LINES_ACCEPTED = TASK_LOG_LINES.labels("accepted")
_LOG_LINES_DROPPED = TASK_LOG_LINES.labels("dropped")
_COSTLY_VALIDATED = COSTLY_PAYLOADS.labels("validated")
_COSTLY_BUSY = COSTLY_PAYLOADS.labels("busy")


def multiprocess_mode() -> bool:
    """Whether prometheus-client keeps values in files shared by several processes."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


def process_exiting() -> None:
    """Drop this process's live gauges from the shared files (multiprocess mode)."""
    if multiprocess_mode():
        multiprocess.mark_process_dead(os.getpid())


def record_transitions(events: Iterable[Event]) -> None:
    """Count the status changes among committed events; a progress report (same status
    before and after) is not a transition. A claim-and-start (pending straight to running)
    counts as the claim and the start it stands for."""
    for event in events:
        if not isinstance(event, TaskStatusChanged):
            continue
        previous, current = event.previous, event.task.status
        if previous == current:
            continue
        if previous == TaskStatus.PENDING and current == TaskStatus.RUNNING:
            _transition_counter(previous, TaskStatus.CLAIMED).inc()
            previous = TaskStatus.CLAIMED
        _transition_counter(previous, current).inc()


def task_waits(records: Iterable[TaskRecord], now: datetime) -> None:
    """Observe how long each claimed task waited (``TASK_WAIT_SECONDS``)."""
    for record in records:
        order = "fifo" if record.share_key is None else "fair"
        submitter = SubmitterClass.of(record.share_key, record.share_backlogged)
        _TASK_WAIT[order, submitter].observe((now - record.created_at).total_seconds())


def worker_shortcut(kind: str, tasks: int) -> None:
    """Count ``tasks`` handed out by a worker shortcut (``claim_start``, ``claim_next``,
    ``push``)."""
    if tasks:
        WORKER_SHORTCUTS.labels(kind).inc(tasks)


@functools.cache
def _transition_counter(previous: str | None, current: str) -> Any:
    """The counter of one transition (looking a labelled child up costs more than the
    increment itself)."""
    source = NO_STATUS if previous is None else TaskStatus(previous).value
    return TASK_TRANSITIONS.labels(source, TaskStatus(current).value)


def declare_sweep_kinds(report_type: type) -> None:
    """Start a ``taskhub_sweeper_cleaned_total`` series at zero for every count field of
    the sweep report (before the first sweep, and on replicas that do not sweep)."""
    for item in dataclasses.fields(report_type):
        if item.type in (int, "int"):
            SWEEPER_CLEANED.labels(item.name)


def record_sweep(report: object) -> None:
    """Count one sweeper cycle that ran and every integer field of its report
    (``workers_removed``, ``leases_expired``, … — new fields are picked up as kinds)."""
    SWEEPER_RUNS.inc()
    if not dataclasses.is_dataclass(report):
        return
    for item in dataclasses.fields(report):
        value = getattr(report, item.name)
        if isinstance(value, int) and not isinstance(value, bool):
            SWEEPER_CLEANED.labels(item.name).inc(value)


class Outcome:
    """What a timed operation ended with; left ``None`` when it raised (not observed)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: str | None = None


@contextmanager
def claim_latency() -> Iterator[Outcome]:
    """Time a claim; set ``outcome.value`` to ``claimed`` or ``empty``."""
    outcome = Outcome()
    started = time.perf_counter()
    yield outcome
    if outcome.value is not None:
        _CLAIM_SECONDS_BY_OUTCOME[outcome.value].observe(time.perf_counter() - started)


@contextmanager
def long_poll() -> Iterator[Outcome]:
    """A long-poll waiting: counted as a waiter while inside, then its wait is observed
    under ``outcome.value`` (one of ``LONG_POLL_OUTCOMES``)."""
    outcome = Outcome()
    started = time.perf_counter()
    LONG_POLL_WAITERS.inc()
    try:
        yield outcome
    finally:
        LONG_POLL_WAITERS.dec()
        if outcome.value is not None:
            LONG_POLL_SECONDS.labels(outcome.value).observe(time.perf_counter() - started)


def socket_task_update() -> None:
    SOCKET_TASK_UPDATES.inc()


def socket_connected() -> None:
    CONNECTED_SOCKETS.inc()


def socket_disconnected() -> None:
    CONNECTED_SOCKETS.dec()


def outbox_dropped(name: str) -> None:
    OUTBOX_DROPPED.labels(name).inc()


def task_log_lines(accepted: int, dropped: int) -> None:
    """Count one log POST's lines: stored, and dropped over the task's rate."""
    if accepted:
        _LOG_LINES_ACCEPTED.inc(accepted)
    if dropped:
        _LOG_LINES_DROPPED.inc(dropped)


class PayloadThreadMetrics:
    """The payload thread's metrics (``taskhub.validation.payload_checks.ThreadObserver``)."""

    def queued(self) -> None:
        COSTLY_PAYLOADS_WAITING.inc()

    def finished(self) -> None:
        COSTLY_PAYLOADS_WAITING.dec()
        _COSTLY_VALIDATED.inc()

    def refused(self) -> None:
        _COSTLY_BUSY.inc()


# --- Authentication (docs/operations.md, "Tokens") -----------------------------------------

AUTH_MISSES = Counter(
    "taskhub_auth_misses",
    "Bearer tokens (HTTP requests, Socket.IO connects) that authenticated nobody: wrong, "
    "revoked or unknown, by source: database (a read found no such token) or cache "
    "(remembered as wrong for TASKHUB_AUTH_MISS_CACHE_SECONDS: no read).",
    ["source"],
)
AUTH_MISS_SOURCES = ("database", "cache")
for _source_name in AUTH_MISS_SOURCES:
    AUTH_MISSES.labels(_source_name)


def auth_miss(source: str) -> None:
    """A token that authenticated nobody, answered from ``source``."""
    AUTH_MISSES.labels(source).inc()


# --- Socket admission (docs/operations.md, "Connections before sign-in") -------------------

SOCKET_SESSIONS_PENDING = Gauge(
    "taskhub_socket_sessions_pending_sign_in",
    "Engine.IO sessions open right now that have not completed an authenticated Socket.IO "
    "CONNECT (closed after TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS).",
    multiprocess_mode="livesum",
)
SOCKET_SESSIONS_UNAUTHENTICATED_CLOSED = Counter(
    "taskhub_socket_sessions_unauthenticated_closed",
    "Engine.IO sessions the hub closed because no authenticated Socket.IO CONNECT came "
    "within TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS.",
)
SOCKET_SESSIONS_REFUSED = Counter(
    "taskhub_socket_sessions_refused",
    "Socket connections refused for a limit, by reason: too-many-connections (the client "
    "address has TASKHUB_MAX_UNAUTHENTICATED_PER_ADDRESS sessions before sign-in: HTTP 429 "
    "at the Engine.IO handshake) or too-many-sockets (the user has TASKHUB_USER_MAX_SOCKETS "
    "sockets: refused at CONNECT).",
    ["reason"],
)
SOCKET_REFUSAL_REASONS = ("too-many-connections", "too-many-sockets")
SOCKET_BINARY_REFUSED = Counter(
    "taskhub_socket_binary_refused",
    "Binary Socket.IO data dropped unread (the protocol has none), by part: packet (a "
    "BINARY_EVENT or BINARY_ACK header; an event with an ack id is answered 422) or "
    "attachment (a binary frame).",
    ["part"],
)
for _reason in SOCKET_REFUSAL_REASONS:
    SOCKET_SESSIONS_REFUSED.labels(_reason)
_BINARY_PACKETS = SOCKET_BINARY_REFUSED.labels("packet")
_BINARY_ATTACHMENTS = SOCKET_BINARY_REFUSED.labels("attachment")


def socket_session_pending() -> None:
    SOCKET_SESSIONS_PENDING.inc()


def socket_session_settled() -> None:
    """A session before sign-in signed in, closed, or was closed for its timeout."""
    SOCKET_SESSIONS_PENDING.dec()


def socket_session_timed_out() -> None:
    SOCKET_SESSIONS_UNAUTHENTICATED_CLOSED.inc()


def socket_session_refused(reason: str) -> None:
    """A connection refused for ``reason`` (one of ``SOCKET_REFUSAL_REASONS``)."""
    SOCKET_SESSIONS_REFUSED.labels(reason).inc()


def socket_binary_packet() -> None:
    _BINARY_PACKETS.inc()


def socket_binary_attachment() -> None:
    _BINARY_ATTACHMENTS.inc()


# --- Per-user limits (docs/operations.md, "Per-user limits") -------------------------------

USER_LIMIT_REFUSALS = Counter(
    "taskhub_user_limit_refusals",
    "Submits refused at a per-user limit: submit_rate (429 submit-rate-exceeded), "
    "pending_tasks (429 too-many-pending-tasks), stored_bytes (429 storage-quota-exceeded), "
    "costly_validations (503 validation-busy: a costly job's unfinished tasks).",
    ["limit"],
)
USER_LIMITS = {
    "submit-rate-exceeded": "submit_rate",
    "too-many-pending-tasks": "pending_tasks",
    "storage-quota-exceeded": "stored_bytes",
    "validation-busy": "costly_validations",
}
for _limit_name in USER_LIMITS.values():
    USER_LIMIT_REFUSALS.labels(_limit_name)


def user_limit_refused(slug: str) -> None:
    """A submit refused at the per-user limit whose problem is ``slug``."""
    USER_LIMIT_REFUSALS.labels(USER_LIMITS[slug]).inc()


# --- Providers (docs/protocol.md, "Providers") ---------------------------------------------

PROVIDER_READS = Counter(
    "taskhub_provider_reads",
    "Reads of providers, by outcome: cached (answered from the cache at once), answered (the "
    "provider's answer came while the read waited), failed (a failed read's problem "
    "replayed), timeout (504), abandoned (the client went while it waited).",
    ["outcome"],
)
PROVIDER_READ_OUTCOMES = ("cached", "answered", "failed", "timeout", "abandoned")
PROVIDER_REQUESTS = Counter(
    "taskhub_provider_requests",
    "Reads sent to a provider (provider_request, or an @internal provider's executor): one "
    "per distinct read per in-flight lock, however many read it.",
)
PROVIDER_RESULT_BYTES = Counter(
    "taskhub_provider_result_bytes",
    "Bytes of providers' answers stored (posted results and @internal answers).",
)
for _outcome in PROVIDER_READ_OUTCOMES:
    PROVIDER_READS.labels(_outcome)


def provider_read(outcome: str) -> None:
    PROVIDER_READS.labels(outcome).inc()


def provider_request() -> None:
    PROVIDER_REQUESTS.inc()


def provider_result(size: int) -> None:
    PROVIDER_RESULT_BYTES.inc(size)
