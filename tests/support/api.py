"""A small REST client for tests: one per user, speaking the REST API of docs/protocol.md."""

from __future__ import annotations

from typing import Any

import httpx

PREFIX = "/v1/joblib"
SCHEMA = {"type": "object", "properties": {"angle": {"type": "number"}}}
# The job ``ApiClient.register()`` registers when told nothing else (the ``job`` fixture's).
JOB = "room1:modifiers:Rotate"


class ApiClient:
    def __init__(self, http: httpx.AsyncClient, token: str | None) -> None:
        self.http = http
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {**self.headers, **kwargs.pop("headers", {})}
        return await self.http.request(method, PREFIX + path, headers=headers, **kwargs)

    async def get(self, path: str, **kw: Any) -> httpx.Response:
        return await self.request("GET", path, **kw)

    async def post(self, path: str, **kw: Any) -> httpx.Response:
        return await self.request("POST", path, **kw)

    async def put(self, path: str, **kw: Any) -> httpx.Response:
        return await self.request("PUT", path, **kw)

    async def patch(self, path: str, **kw: Any) -> httpx.Response:
        return await self.request("PATCH", path, **kw)

    async def delete(self, path: str, **kw: Any) -> httpx.Response:
        return await self.request("DELETE", path, **kw)

    # Conveniences for the common flows; each asserts the success status it expects.

    async def register(
        self,
        room: str = "room1",
        name: str = "Rotate",
        category: str = "modifiers",
        schema: dict[str, Any] | None = None,
        worker_id: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "category": category,
            "name": name,
            "schema": SCHEMA if schema is None else schema,
            **extra,
        }
        if worker_id:
            body["worker_id"] = worker_id
        response = await self.put(f"/rooms/{room}/jobs", json=body)
        assert response.status_code in (200, 201), response.text
        return response.json()

    async def submit(
        self, job: str, room: str = "room1", payload: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        response = await self.post(
            f"/rooms/{room}/tasks/{job}", json={"payload": payload or {}, **extra}
        )
        assert response.status_code == 202, response.text
        return response.json()

    async def claim(self, worker_id: str, **extra: Any) -> dict[str, Any] | None:
        response = await self.post("/tasks/claim", json={"worker_id": worker_id, **extra})
        assert response.status_code == 200, response.text
        return response.json()["task"]

    async def transition(self, task_id: str, status: str, **extra: Any) -> httpx.Response:
        return await self.patch(f"/tasks/{task_id}", json={"status": status, **extra})

    async def room_jobs(self, room: str = "room1") -> list[dict[str, Any]]:
        """The live jobs registered in ``room`` itself (not the @global/@internal ones)."""
        response = await self.get(f"/rooms/{room}/jobs", params={"limit": 500})
        assert response.status_code == 200, response.text
        return [j for j in response.json()["items"] if j["full_name"].startswith(f"{room}:")]

    async def task(self, task_id: str) -> dict[str, Any]:
        response = await self.get(f"/tasks/{task_id}")
        assert response.status_code == 200, response.text
        return response.json()


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem of the given type."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"/v1/problems/{slug}", body
    assert body["status"] == status
    assert isinstance(body["title"], str) and body["title"]
    assert isinstance(body["detail"], str)
    assert "Traceback" not in response.text
    return body
