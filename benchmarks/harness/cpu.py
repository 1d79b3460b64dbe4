"""CPU readings of processes (Linux ``/proc``; None elsewhere): the client's own, a
server's, and a server that works in child processes (PostgreSQL's postmaster and its
backends); and a process's resident memory."""

from __future__ import annotations

import os
import resource
from pathlib import Path

CPU_KEYS = ("client_cpu_s", "server_cpu_s", "database_cpu_s")


def proc_stat(pid: int) -> tuple[str, list[str]] | None:
    """A process's command name and the fields after it in ``/proc/<pid>/stat`` (state,
    ppid, …; utime and stime at 11 and 12, reaped children's at 13 and 14); None if gone
    or not Linux."""
    try:
        head, tail = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)
    except (OSError, ValueError):
        return None
    return head.partition("(")[2], tail.split()


def _ticks(fields: list[str], *indexes: int) -> float:
    return sum(int(fields[i]) for i in indexes) / os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process so far (Linux ``/proc``; None elsewhere)."""
    stat = None if pid is None else proc_stat(pid)
    return None if stat is None else _ticks(stat[1], 11, 12)


def server_cpu_seconds(pid: int | None) -> float | None:
    """CPU time so far of a server that works in child processes (PostgreSQL's postmaster):
    its own, its ended children's (once reaped) and its running children's. A child reaped
    while ``/proc`` is read would be counted in neither; the server's reaped-children time
    then changes across the read, which is done again."""
    if pid is None:
        return None
    stat = proc_stat(pid)
    while stat is not None:
        running = 0.0
        for entry in Path("/proc").iterdir():
            child = proc_stat(int(entry.name)) if entry.name.isdigit() else None
            if child is not None and child[1][1] == str(pid):
                running += _ticks(child[1], 11, 12)
        after = proc_stat(pid)
        if after is not None and after[1][13:15] == stat[1][13:15]:
            return _ticks(after[1], 11, 12, 13, 14) + running
        stat = after
    return None


def cpu_seconds(server_pid: int | None, database_pid: int | None) -> tuple[float | None, ...]:
    """CPU time so far of this (client) process, of a server process and of its database
    server (PostgreSQL: the postmaster and its backends; SQLite runs inside the server
    process), in the order of ``CPU_KEYS``."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (
        usage.ru_utime + usage.ru_stime,
        process_cpu_seconds(server_pid),
        server_cpu_seconds(database_pid),
    )


def cpu_used(
    before: tuple[float | None, ...], after: tuple[float | None, ...]
) -> dict[str, float | None]:
    """CPU seconds the client, the server and the database spent between two readings
    (None where a process could not be read)."""
    return {
        key: None if start is None or end is None else round(end - start, 2)
        for key, start, end in zip(CPU_KEYS, before, after, strict=True)
    }


def process_tree_cpu_seconds(pid: int | None) -> float | None:
    """CPU time so far of a process, of its children it has reaped and of its live
    descendants (a worker that runs its jobs in child processes); None if it is gone."""
    stat = None if pid is None else proc_stat(pid)
    if stat is None:
        return None
    children: dict[str, list[tuple[int, list[str]]]] = {}
    for entry in Path("/proc").iterdir():
        child = proc_stat(int(entry.name)) if entry.name.isdigit() else None
        if child is not None:
            children.setdefault(child[1][1], []).append((int(entry.name), child[1]))
    total, pending = _ticks(stat[1], 11, 12, 13, 14), [pid]
    while pending:
        for child_pid, fields in children.get(str(pending.pop()), []):
            total += _ticks(fields, 11, 12, 13, 14)
            pending.append(child_pid)
    return total


def rss_kib(pid: int) -> int:
    """The process's resident set (``VmRSS`` of ``/proc/<pid>/status``) in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def machine_busy_seconds() -> float | None:
    """CPU time every core of the machine has spent busy so far (``/proc/stat``: user,
    nice, system, irq, softirq and steal; not idle or iowait); None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
