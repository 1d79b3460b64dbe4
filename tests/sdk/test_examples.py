"""The examples in ``examples/`` keep working."""

from __future__ import annotations

from examples.countdown import Countdown
from examples.rotate import Rotate
from taskhub.sdk import Client, Worker
from tests.sdk.conftest import Hub


def test_example_extensions_run(sqlite_hub: Hub, room: str) -> None:
    hub = sqlite_hub
    with (
        Worker(hub.url, hub.user_token, [Rotate, Countdown], room=room, concurrency=2),
        Client(hub.url, hub.user_token) as client,
    ):
        rotate = client.submit(Rotate(angle=90, points=[(1, 0, 0)]), room=room)
        countdown = client.submit(Countdown(seconds=1), room=room)
        assert rotate.result(timeout=10) == {"points": [[0.0, 1.0, 0.0]]}
        assert countdown.result(timeout=10) == {"stopped_at": 0}
    assert rotate.task.progress == 1.0
    assert rotate.task.progress_message == "1/1 points"
