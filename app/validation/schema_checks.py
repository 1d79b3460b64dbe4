"""Where a job's schema is checked at registration (``payloads.check_schema``): on the
event loop when it is small, else on a thread of its own, one schema at a time.

The check takes about half a millisecond a subschema (a millisecond for the smallest, the
metaschema's own work; seconds for a 256 KiB schema) and holds the GIL throughout, so
checks on several threads at once run no faster than one after another, and each takes the
GIL from the event loop in turn: six 250 kB schemas registered at once, on the default
executor's threads, held a small submit meanwhile for 240 ms at the median and up to
1.6 s. On one thread, the event loop has a single contender, which hands the GIL back
within a millisecond (``gil_sharing``). Registrations are never refused for waiting: a
worker that registers its jobs at start-up (zndraw-joblib's ``JobManager`` among them)
does not expect a 503 there; a registration waits for the checks before it instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

from taskhub.validation.gil_sharing import shared
from taskhub.validation.payloads import check_schema

# A schema this small (as compact JSON) is checked on the event loop: a few milliseconds,
# less than the hand-over to the thread and back costs the requests around it.
INLINE_SCHEMA_BYTES = 512

_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="taskhub-schemas")


async def check_schema_aside(schema: dict[str, Any], size: int) -> None:
    """``check_schema`` of a schema of ``size`` bytes as compact JSON: inline if small,
    else on the schema thread (waiting for the checks before it)."""
    if size <= INLINE_SCHEMA_BYTES:
        check_schema(schema)
        return
    await asyncio.get_running_loop().run_in_executor(_THREAD, shared, check_schema, schema)
