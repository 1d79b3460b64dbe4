"""The throughput benchmark's ``postgres-floor`` target: a migrated PostgreSQL database with
``task`` stripped to what the task cycle's statements need to run, to measure what the
schema's rules cost. It must strip exactly that, and the hub must still run the cycle on it."""

from __future__ import annotations

import json
from pathlib import Path

import asyncpg

from benchmarks.harness.targets import FLOOR_KEEPS, TargetOptions, fresh_database, strip_to_floor
from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL


async def task_schema(database_url: str) -> dict[str, set[str]]:
    conn = await asyncpg.connect(database_url.replace("+asyncpg", ""), timeout=10)
    try:
        indexes = await conn.fetch("SELECT indexname FROM pg_indexes WHERE tablename = 'task'")
        triggers = await conn.fetch(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'task'::regclass AND NOT tgisinternal"
        )
        keys = await conn.fetch(
            "SELECT conname FROM pg_constraint WHERE conrelid = 'task'::regclass AND contype = 'f'"
        )
    finally:
        await conn.close()
    return {
        "indexes": {row[0] for row in indexes},
        "triggers": {row[0] for row in triggers},
        "foreign_keys": {row[0] for row in keys},
    }


async def test_the_floor_keeps_only_the_primary_key_and_the_claim_queue(tmp_path: Path) -> None:
    options = TargetOptions(tmp_path, "warning", False, POSTGRES_URL)
    async with fresh_database("postgres", options) as url:
        migrated = await task_schema(url)
        dropped = await strip_to_floor(url)
        stripped = await task_schema(url)
    assert set(FLOOR_KEEPS) < migrated["indexes"]
    assert migrated["triggers"] and migrated["foreign_keys"]
    assert stripped == {"indexes": set(FLOOR_KEEPS), "triggers": set(), "foreign_keys": set()}
    assert set(dropped) == (
        (migrated["indexes"] - set(FLOOR_KEEPS)) | migrated["triggers"] | migrated["foreign_keys"]
    )


def test_a_throughput_run_on_the_floor_completes_every_task() -> None:
    argv = ["--targets", "postgres-floor", "--tasks", "30", "--workers", "2"]
    argv += ["--pg-admin-url", POSTGRES_URL, "--server-log-level", "warning"]
    done = run_benchmark("throughput", *argv)
    [result] = [json.loads(line) for line in done.stdout.splitlines()]
    assert result["target"] == "postgres-floor" and result["error"] is None
    assert result["completed"] == 30
