"""Ending a helper process of the tests (a balancer, a pooler)."""

from __future__ import annotations

import signal
import subprocess


def terminate(process: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM, so it can close its connections, then SIGKILL past ``timeout``."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
