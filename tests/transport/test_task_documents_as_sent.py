"""A task's payload and result reach the submitter and the worker as they were sent: the
same key order, the same numbers (``1e23`` a float, ``-0.0`` with its sign), on SQLite and
PostgreSQL alike (where ``jsonb`` would sort the keys and make ``1e23`` an integer)."""

from typing import Any

from tests.support.api import JOB, ApiClient

AS_SENT = {"b": 1, "a": 2, "n": 1e23, "z": -0.0}


def spelled(document: dict[str, Any]) -> list[tuple[str, str]]:
    """Each key, in order, with its value as Python writes it (``1e+23``, ``-0.0``)."""
    return [(key, repr(value)) for key, value in document.items()]


async def test_a_payload_reaches_the_submitter_and_the_worker_as_sent(
    alice: ApiClient, job: dict[str, Any]
) -> None:
    submitted = await alice.submit(JOB, payload=AS_SENT)
    read = await alice.task(submitted["id"])
    claimed = await alice.claim(job["worker_id"])
    assert claimed is not None and claimed["id"] == submitted["id"]
    for task in (submitted, read, claimed):
        assert spelled(task["payload"]) == spelled(AS_SENT)


async def test_a_result_reaches_the_submitter_as_the_worker_sent_it(
    alice: ApiClient, job: dict[str, Any]
) -> None:
    submitted = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    assert (await alice.transition(submitted["id"], "running")).status_code == 200
    completed = await alice.transition(submitted["id"], "completed", result=AS_SENT)
    assert completed.status_code == 200, completed.text
    read = await alice.task(submitted["id"])
    for task in (completed.json(), read):
        assert spelled(task["result"]) == spelled(AS_SENT)
