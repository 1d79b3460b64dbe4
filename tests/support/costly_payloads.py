"""A payload whose validation is costly but legitimate (lists of 3-D points), for the tests
of where payloads are validated (``app/validation/payload_checks.py``)."""

from taskhub.validation.payload_checks import PayloadChecks
from tests.support.waiting import eventually

POINT = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
POINTS_SCHEMA = {"type": "object", "properties": {"points": {"type": "array", "items": POINT}}}
# About 0.3 s of CPU here (140 kB of JSON): far past the event loop's few milliseconds, and
# far within the 2 s deadline on a slow machine.
COSTLY = {"points": [[1.5, 2.5, 3.5]] * 10_000}


async def until_checks_waiting(checks: PayloadChecks, count: int) -> None:
    """Until ``count`` costly checks are under way or queued in ``checks`` (polled often:
    each takes only about 0.3 s, and the test must act while they do)."""
    await eventually(
        lambda: checks.waiting == count, 30, f"{count} payload checks waiting", interval=0.005
    )
