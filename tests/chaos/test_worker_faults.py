"""Workers fail under load: the taskiq worker SIGKILLed during ``@internal`` tasks, SDK
workers SIGKILLed mid-task (max_attempts 1 and 3), one SDK worker stopped past its timeout
whose late result the fence refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scenarios.chaos import PrivatePostgres
from tests.chaos.conftest import chaos

pytestmark = pytest.mark.timeout(300)


def test_taskiq_worker_sigkilled(cluster: PrivatePostgres, tmp_path: Path) -> None:
    result = chaos("taskiq-sigkill", "postgresql", cluster, tmp_path)
    assert result["internal_completed"] >= 1, result


def test_workers_sigkilled_without_retries(cluster: PrivatePostgres, tmp_path: Path) -> None:
    """The tasks the killed workers ran fail (one attempt only); none is lost."""
    result = chaos("worker-sigkill-1", "sqlite", cluster, tmp_path)
    assert result["killed_mid_task"] >= 1, result
    assert result["failed"] >= 1, result
    assert result["re_executed"] == 0, result


def test_workers_sigkilled_with_retries(cluster: PrivatePostgres, tmp_path: Path) -> None:
    """The tasks the killed workers ran are run again elsewhere and complete."""
    result = chaos("worker-sigkill-3", "postgresql", cluster, tmp_path)
    assert result["killed_mid_task"] >= 1, result
    assert result["re_executed"] >= 1, result
    assert result["failed"] == 0, result


def test_stopped_worker_late_result_is_fenced(cluster: PrivatePostgres, tmp_path: Path) -> None:
    """The stopped execution's task is run again; its late result, sent by the worker when
    it wakes (unless the SDK already dropped it) and by the harness with the stale claim
    token, is refused with 409 every time."""
    result = chaos("worker-sigstop", "sqlite", cluster, tmp_path)
    assert result["stopped_mid_task"], result
    assert set(result["late_patch"]) == {"409"}, result
    assert result["re_executed"] >= 1, result
    assert set(result["end_outcomes"]) <= {"accepted", "refused-409"}, result
