"""The documents scenario's bystander: a client of the hub in a process of its own (one in
the benchmark's process would stall with that process's work on the big answers).

    TASKHUB_BENCH_TOKEN=… python -m benchmarks.apps.bystander SUBMIT_URL

Prints ``started``, then submits ``{}`` to ``SUBMIT_URL`` one after another until stdin
closes, and prints ``[[started, seconds], …]`` (``time.monotonic``, which every process of
the machine shares, so the scenario can sort the latencies by its own phases).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import httpx
import orjson

TOKEN_ENV = "TASKHUB_BENCH_TOKEN"


async def submit_small_tasks(url: str) -> None:
    loop = asyncio.get_running_loop()
    stop = loop.run_in_executor(None, sys.stdin.read)
    samples = []
    headers = {"Authorization": f"Bearer {os.environ[TOKEN_ENV]}"}
    async with httpx.AsyncClient(headers=headers, trust_env=False, timeout=60) as client:
        print("started", flush=True)
        while not stop.done():
            started = time.monotonic()
            response = await client.post(url, json={"payload": {}})
            samples.append((started, time.monotonic() - started))
            if response.is_error:
                raise SystemExit(f"bystander: {response.status_code} {response.text[:300]}")
    sys.stdout.write(orjson.dumps(samples).decode())


if __name__ == "__main__":
    asyncio.run(submit_small_tasks(sys.argv[1]))
