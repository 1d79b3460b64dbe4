"""The SDK's worker reports its runs' ends over its Socket.IO link (``task_update``,
docs/protocol.md "Task updates over Socket.IO") rather than by ``PATCH``: every end
report of a listening worker goes that way, a result too large for the link goes by
``PATCH``, and a worker told not to, or facing a hub without the event, reports by
``PATCH`` alone, with the same outcomes."""

from __future__ import annotations

from taskhub.sdk import Client, Worker
from tests.sdk.conftest import Hub
from tests.sdk.extensions import Echo
from tests.sdk.test_worker_shortcuts import counter, older_hub  # noqa: F401  (a fixture)
from tests.support.waiting import eventually_sync

WAIT = 10.0
BIG_TEXT = "x" * (70 * 1024)  # a result past the link's 64 KiB


def socket_updates(hub: Hub) -> float:
    return counter(hub, "taskhub_socket_task_updates_total")


def serve(hub: Hub, room: str, texts: list[str], *, socket_updates: bool = True) -> list[str]:
    """Serve one Echo task per text with a listening worker; the ids of the completed tasks
    (each result checked)."""
    with (
        Worker(
            hub.url, hub.user_token, [Echo], room=room, concurrency=4, socket_updates=socket_updates
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        eventually_sync(lambda: worker.listening, WAIT, "the worker to listen")
        handles = [client.submit(Echo(text=text), room=room) for text in texts]
        assert [h.result(timeout=WAIT)["echo"] for h in handles] == texts
    return [handle.id for handle in handles]


def test_a_listening_worker_reports_every_end_over_the_socket(hub: Hub, room: str) -> None:
    before = socket_updates(hub)
    ids = serve(hub, room, [str(i) for i in range(12)])
    assert socket_updates(hub) - before == len(ids)
    for task_id in ids:
        assert hub.task(task_id)["status"] == "completed"


def test_a_result_too_large_for_the_link_goes_by_patch(sqlite_hub: Hub, room: str) -> None:
    before = socket_updates(sqlite_hub)
    [big, _small] = serve(sqlite_hub, room, [BIG_TEXT, "small"])
    assert socket_updates(sqlite_hub) - before == 1  # the small one's
    assert sqlite_hub.task(big)["result"]["echo"] == BIG_TEXT


def test_a_worker_without_socket_updates_reports_by_patch(sqlite_hub: Hub, room: str) -> None:
    before = socket_updates(sqlite_hub)
    serve(sqlite_hub, room, [str(i) for i in range(6)], socket_updates=False)
    assert socket_updates(sqlite_hub) == before


def test_a_worker_reports_by_patch_to_a_hub_without_the_event(
    older_hub: Hub,  # noqa: F811
    room: str,
) -> None:
    """The hub answers ``task_update`` 404 (as an older one answers an unknown event): the
    first report goes again by PATCH, and every later one by PATCH at once."""
    serve(older_hub, room, [str(i) for i in range(6)])
    assert socket_updates(older_hub) == 0
