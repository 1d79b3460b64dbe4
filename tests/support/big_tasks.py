"""Tasks whose payloads and results are big, for the tests of listings
(``app/services/task_listing.py``)."""

from typing import Any

from tests.support.api import ApiClient

BIG = 5_000  # points: about 120 kB of JSON, far past a small document's 8 KiB


def points(count: int, seed: int = 0) -> dict[str, Any]:
    """A payload of ``count`` 3-D points (about 25 bytes each as JSON)."""
    return {"points": [[seed + i, i + 0.5, -i] for i in range(count)]}


async def completed(client: ApiClient, worker_id: str, result: Any) -> dict[str, Any]:
    """The oldest pending task of the worker's jobs, taken to ``completed`` with ``result``."""
    claimed = await client.claim(worker_id)
    assert claimed is not None
    token = claimed["claim_token"]
    assert (await client.transition(claimed["id"], "running", claim_token=token)).status_code == 200
    response = await client.transition(claimed["id"], "completed", claim_token=token, result=result)
    assert response.status_code == 200, response.text[:300]
    return response.json()
