"""The throwaway PostgreSQL cluster that ``./dev test``, the chaos scenario and the callgrind
count share (``benchmarks/harness/postgres_cluster.py``): loaded by its path with the
standard library alone (as ``dev.d/services.py`` loads it before anything is installed),
started with its settings, restarted on its own port, and gone without a trace after."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

import asyncpg

from benchmarks.harness.postgres_cluster import throwaway_cluster

MODULE = Path(__file__).resolve().parents[2] / "benchmarks" / "harness" / "postgres_cluster.py"


def test_the_module_loads_with_the_standard_library_alone() -> None:
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('cluster', {str(MODULE)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['cluster'] = module\n"
        "spec.loader.exec_module(module)\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('benchmarks', 'taskhub')]\n"
        "print(module.PostgresCluster.__name__)\n"
    )
    # -S: no site-packages (nothing installed), -I: not even this checkout on the path.
    done = subprocess.run(
        [sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "PostgresCluster"


async def show(url: str, setting: str) -> str:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        return str(await conn.fetchval(f"SHOW {setting}"))
    finally:
        await conn.close()


def test_a_cluster_restarts_on_its_port_and_leaves_nothing_behind() -> None:
    # Its own directory in /tmp: under root the server's user must reach it.
    root = Path(tempfile.mkdtemp(prefix="taskhub-cluster-test-"))
    with throwaway_cluster(root, settings={"max_connections": "23"}) as cluster:
        port, first = cluster.port, cluster.process
        assert asyncio.run(show(cluster.url(), "max_connections")) == "23"
        cluster.create_database("made")
        cluster.restart("immediate")  # as the chaos scenario's fault does
        assert cluster.port == port and cluster.process is not first
        assert asyncio.run(show(cluster.url("made"), "max_connections")) == "23"
    assert first is not None and first.poll() is not None
    assert cluster.process is not None and cluster.process.poll() is not None
    assert not root.exists()
