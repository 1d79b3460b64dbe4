"""The Socket.IO room names, in one place: who is in each, and so who gets its events.

A socket enters them through its join events (``transport/sockets``), and every event
names the room it goes to (``rules/events.py``)."""

from __future__ import annotations


def room_room(room_id: str) -> str:
    """The sockets watching a Taskhub room: its tasks' status, its jobs, its providers."""
    return f"room:{room_id}"


def job_room(job_name: str) -> str:
    """The workers' sockets serving a job (by full name): ``task_available``."""
    return f"jobs:{job_name}"


def worker_room(worker_id: object) -> str:
    """The socket that joined a job as this worker: its ``task_cancelled``."""
    return f"worker:{worker_id}"


def provider_room(provider_id: object) -> str:
    """The sockets of a provider's worker: its read requests."""
    return f"providers:{provider_id}"
