"""The job-name cache of the hot paths: names come from the database once, and the cache
stays bounded however many jobs a long-lived process sees."""

from __future__ import annotations

from uuid import UUID

import pytest

from taskhub.services.jobs import JobNames


@pytest.fixture
def small_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(JobNames, "LIMIT", 3)
    monkeypatch.setattr(JobNames, "_names", {})


async def test_names_stay_right_and_the_cache_bounded(small_cache, alice, app) -> None:
    registered = [await alice.register(name=f"Job{i}") for i in range(5)]
    jobs = {UUID(job["id"]): job["full_name"] for job in registered}
    first = next(iter(jobs))
    async with app.hub.db.read() as conn:
        for round_ in range(2):
            for job_id, name in jobs.items():
                names = await JobNames.resolve(conn, {job_id, first})
                assert names == {job_id: name, first: jobs[first]}, round_
                assert len(JobNames._names) <= 3
