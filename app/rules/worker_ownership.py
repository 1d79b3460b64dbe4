"""Who may act for a worker: its owner, or a superuser."""

from __future__ import annotations

from uuid import UUID

from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.records import Principal


def may_act_for(principal: Principal, owner_id: UUID) -> bool:
    """Whether ``principal`` may act for a worker of user ``owner_id``."""
    return owner_id == principal.id or principal.is_superuser


def check_owner(principal: Principal, owner_id: UUID) -> None:
    """403 unless ``may_act_for``."""
    if not may_act_for(principal, owner_id):
        raise Forbidden("This worker belongs to another user.")


def check_worker(principal: Principal, worker_id: UUID, owner_id: UUID | None) -> None:
    """404 when the worker does not exist (``owner_id`` None), 403 when it is not the
    principal's to act for."""
    if owner_id is None:
        raise WorkerNotFound(f"Worker {worker_id} not found.")
    check_owner(principal, owner_id)
