"""``taskhub serve``'s process plumbing: the metrics directory of several workers."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from taskhub import serving


def _exited_pid() -> int:
    """The pid of a process that has come and gone."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _metrics_dir(parent: Path, pid: int) -> Path:
    path = parent / f"{serving.METRICS_DIR_PREFIX}{pid}-abc123"
    path.mkdir()
    (path / "counter_1.db").write_bytes(b"\0" * 16)
    return path


def test_directories_of_serve_processes_that_are_gone_are_removed(tmp_path: Path) -> None:
    orphaned = _metrics_dir(tmp_path, _exited_pid())
    live = _metrics_dir(tmp_path, os.getpid())
    unrelated = tmp_path / "taskhub-metrics-notapid-x"
    unrelated.mkdir()

    removed = serving.remove_orphaned_metrics_directories(tmp_path)

    assert removed == [orphaned]
    assert not orphaned.exists()
    assert live.exists() and unrelated.exists()


def test_several_workers_get_a_directory_named_after_serve_and_removed_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv(serving.MULTIPROC_ENV, raising=False)
    left_by_a_killed_serve = _metrics_dir(tmp_path, _exited_pid())

    with serving.metrics_directory(2) as path:
        assert path is not None and path.parent == tmp_path
        assert path.name.startswith(f"{serving.METRICS_DIR_PREFIX}{os.getpid()}-")
        assert os.environ[serving.MULTIPROC_ENV] == str(path)
        assert not left_by_a_killed_serve.exists()

    assert not path.exists()
    assert serving.MULTIPROC_ENV not in os.environ


def test_one_process_keeps_its_metrics_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(serving.MULTIPROC_ENV, raising=False)
    with serving.metrics_directory(1) as path:
        assert path is None


@pytest.mark.parametrize("freeze", [True, False])
async def test_a_served_app_freezes_its_start_up_objects_out_of_the_collector_s_way(
    settings, tokens, freeze: bool
) -> None:
    """``taskhub serve`` only: a process that starts and stops many apps must not."""
    from taskhub.main import create_app

    gc.unfreeze()
    app = create_app(settings, freeze_start_up=freeze)
    try:
        async with app.lifespan_context():
            assert (gc.get_freeze_count() > 0) is freeze
    finally:
        gc.unfreeze()  # (this test process starts many more)
