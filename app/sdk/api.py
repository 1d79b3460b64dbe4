"""The worker's REST calls (docs/protocol.md, "Endpoints"), typed."""

from __future__ import annotations

import uuid
from typing import Any

from taskhub.sdk.errors import ProblemError
from taskhub.sdk.extension import JobSpec
from taskhub.sdk.http import AsyncHub, segment
from taskhub.sdk.models import ClaimedTask, Heartbeat, Task
from taskhub.sdk.provider import ProviderSpec


class WorkerApi:
    def __init__(self, hub: AsyncHub, *, slots: int | None = None) -> None:
        self.hub = hub
        # The worker's concurrency, sent with its registration and heartbeats (an optional
        # field) until a hub refuses it.
        self.slots = slots

    async def create_worker(self, *, retry_for: float | None = None) -> tuple[str, float | None]:
        """The new worker's id, and the hub's heartbeat timeout when it says (Taskhub does)."""
        # Retried even after a lost answer: at worst an empty worker is left for the sweeper.
        if self.slots is None:
            response = await self.hub.request("POST", "/workers", retry_for=retry_for)
        else:
            try:
                response = await self.hub.request(
                    "POST", "/workers", json={"slots": self.slots}, retry_for=retry_for
                )
            except ProblemError as exc:
                if exc.status not in (400, 415, 422):
                    raise
                self.slots = None  # a hub that takes no body: register as before
                response = await self.hub.request("POST", "/workers", retry_for=retry_for)
        body = response.json()
        return str(body["id"]), body.get("worker_timeout_seconds")

    async def register_job(
        self, spec: JobSpec, worker_id: str, *, retry_for: float | None = None
    ) -> dict[str, Any]:
        body = {
            "category": spec.category,
            "name": spec.name,
            "schema": spec.schema,
            "worker_id": worker_id,
            **spec.policy,
        }
        response = await self.hub.request(
            "PUT", f"/rooms/{segment(spec.room)}/jobs", json=body, retry_for=retry_for
        )
        return dict(response.json())

    async def register_provider(
        self, spec: ProviderSpec, worker_id: str, *, retry_for: float | None = None
    ) -> str:
        """Register (or update) a provider served by ``worker_id``; its id."""
        response = await self.hub.request(
            "PUT",
            f"/rooms/{segment(spec.room)}/providers",
            json=spec.registration(worker_id),
            retry_for=retry_for,
        )
        return str(response.json()["id"])

    async def post_provider_result(
        self, provider_id: str, request_id: str, body: bytes, *, failed: bool = False
    ) -> None:
        """A provider's answer to the read ``request_id`` (``failed``: the body is the
        problem of a failed read). Safe to repeat: an answer stored twice is the same."""
        headers = {"X-Request-Hash": request_id}
        if failed:
            headers["X-Result-Status"] = "error"
            headers["Content-Type"] = "application/problem+json"
        await self.hub.request(
            "POST", f"/providers/{provider_id}/results", content=body, headers=headers
        )

    async def heartbeat(
        self,
        worker_id: str,
        running: list[str],
        *,
        retry_for: float | None = None,
        http_timeout: float | None = None,
    ) -> Heartbeat:
        """Keep the worker alive and the leases of the tasks it ``running`` (only those: a
        task it has not started is left to its lease)."""
        body: dict[str, Any] = {"tasks": running}
        if self.slots is not None:
            body["slots"] = self.slots
        try:
            response = await self.hub.request(
                "PATCH",
                f"/workers/{worker_id}",
                json=body,
                retry_for=retry_for,
                http_timeout=http_timeout,
            )
        except ProblemError as exc:
            if exc.status != 422 or "slots" not in body:
                raise
            self.slots = None  # a hub that refuses the field: beat as before
            return await self.heartbeat(
                worker_id, running, retry_for=retry_for, http_timeout=http_timeout
            )
        return Heartbeat.model_validate(response.json())

    async def delete_worker(self, worker_id: str, *, retry_for: float | None = None) -> None:
        await self.hub.request("DELETE", f"/workers/{worker_id}", retry_for=retry_for)

    async def claim(
        self, worker_id: str, max_tasks: int, *, start: bool = False
    ) -> list[ClaimedTask]:
        """Claim up to ``max_tasks``. The key makes the claim safe to repeat: when its
        answer is lost, the retry gets the same tasks (a hub that ignores the key claims
        others, and the first ones go back to the queue when their lease runs out).
        ``start``: ask the hub to start them too; a hub that can answers them ``running``,
        an older one ignores the field and answers them ``claimed``."""
        body: dict[str, Any] = {"worker_id": worker_id, "max_tasks": max_tasks}
        if start:
            body["start"] = True
        response = await self.hub.request(
            "POST",
            "/tasks/claim",
            json=body,
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        body = response.json()
        items = body.get("tasks")
        if items is None:  # a hub without batch claims answers with one task
            items = [body["task"]] if body.get("task") else []
        return [ClaimedTask.model_validate(item) for item in items]

    async def update_task(
        self, task: ClaimedTask, body: dict[str, Any], *, retry_for: float | None = None
    ) -> Task:
        response = await self.hub.request(
            "PATCH",
            f"/tasks/{task.id}",
            json={**body, "claim_token": task.claim_token},
            retry_for=retry_for,
        )
        return Task.model_validate(response.json())

    async def end_task(
        self,
        task: ClaimedTask,
        body: dict[str, Any],
        claim_next: dict[str, Any],
        *,
        retry_for: float | None = None,
    ) -> list[ClaimedTask] | None:
        """A terminal update that also claims the worker's next task(s) (``claim_next``):
        those tasks, or None from a hub that ignored the request (an older one)."""
        response = await self.hub.request(
            "PATCH",
            f"/tasks/{task.id}",
            json={**body, "claim_token": task.claim_token, "claim_next": claim_next},
            retry_for=retry_for,
        )
        return next_tasks(response.json())

    async def get_task(self, task_id: str) -> Task:
        response = await self.hub.request("GET", f"/tasks/{task_id}")
        return Task.model_validate(response.json())


def next_tasks(reply: dict[str, Any]) -> list[ClaimedTask] | None:
    """The tasks an end report's answer claimed (``next``); None from a hub that ignored
    ``claim_next`` (an older one)."""
    items = reply.get("next")
    return None if items is None else [ClaimedTask.model_validate(item) for item in items]
