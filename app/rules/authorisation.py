"""Who may write a task: the one statement of the rule.

A superuser may do anything. Otherwise a caller acts through a role it holds towards the
task: the owner of the worker holding the task, or the user who submitted it. A PATCH
needs the worker's owner, except a cancel, which the submitter may also make. A claim
needs the claiming worker's owner.

The store builds the SQL guards of the claim and of the update from ``claim_roles`` and
``update_roles``; the services use ``check_claim`` and ``check_update`` to tell a refused
caller 403 (or 404: no such worker) once the guarded statement matched nothing.
"""

from __future__ import annotations

import enum
from uuid import UUID

from taskhub.rules.errors import Forbidden
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.rules.worker_ownership import check_worker, may_act_for


class Role(enum.Enum):
    """A caller's relation to a task (or, for a claim, to the worker that claims)."""

    WORKER_OWNER = "worker-owner"  # owns the worker that holds the task (or claims)
    SUBMITTER = "submitter"  # submitted the task


def is_unrestricted(principal: Principal) -> bool:
    """A superuser: no role needed, no guard in the statement."""
    return principal.is_superuser


def update_roles(target: TaskStatus | None) -> tuple[Role, ...]:
    """The roles, any one of which lets a caller move a task to ``target`` (None: report
    progress), in the order the guard tests them."""
    if target == TaskStatus.CANCELLED:
        return (Role.WORKER_OWNER, Role.SUBMITTER)
    return (Role.WORKER_OWNER,)


def claim_roles() -> tuple[Role, ...]:
    """The roles, any one of which lets a caller claim for a worker."""
    return (Role.WORKER_OWNER,)


def holds_role(
    principal: Principal, role: Role, *, worker_owner: UUID | None, submitted_by: UUID | None
) -> bool:
    if role is Role.WORKER_OWNER:
        return worker_owner is not None and worker_owner == principal.id
    return submitted_by is not None and submitted_by == principal.id


def may_update(
    principal: Principal,
    target: TaskStatus | None,
    *,
    worker_owner: UUID | None,
    submitted_by: UUID | None,
) -> bool:
    """``worker_owner``: the owner of the worker holding the task (None: no worker)."""
    if is_unrestricted(principal):
        return True
    facts = {"worker_owner": worker_owner, "submitted_by": submitted_by}
    return any(holds_role(principal, role, **facts) for role in update_roles(target))


def may_claim(principal: Principal, worker_owner: UUID | None) -> bool:
    """``worker_owner``: the owner of the claiming worker (None: no such worker, for
    which nobody may claim). Claiming is acting for the worker (``worker_ownership``)."""
    return worker_owner is not None and may_act_for(principal, worker_owner)


def check_update(
    principal: Principal,
    target: TaskStatus | None,
    *,
    worker_owner: UUID | None,
    submitted_by: UUID | None,
) -> None:
    """403 unless ``may_update``."""
    if not may_update(principal, target, worker_owner=worker_owner, submitted_by=submitted_by):
        raise Forbidden(
            "Only the claiming worker's owner, the submitter (to cancel) or a superuser."
        )


def check_claim(principal: Principal, worker_id: UUID, worker_owner: UUID | None) -> None:
    """404 when the worker does not exist (``worker_owner`` None), 403 unless
    ``may_claim``: the rule of acting for a worker."""
    check_worker(principal, worker_id, worker_owner)
