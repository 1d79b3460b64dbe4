"""Virtual environments of their own for the other systems a benchmark runs (installed
from the package index at pinned versions, kept in a cache directory outside the
checkout, never in Taskhub's environment): made once, reused while their requirements
stay the same, and asked what they hold."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_ROOT = Path.home() / ".cache" / "taskhub-bench" / "peers"
MARKER = "bench-requirements.json"
INSTALL_TIMEOUT_SECONDS = 600.0


class VenvError(RuntimeError):
    """A virtual environment could not be made or installed."""


async def _run(*argv: str, seconds: float = INSTALL_TIMEOUT_SECONDS) -> str:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        async with asyncio.timeout(seconds):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise VenvError(f"{' '.join(argv)} took over {seconds}s") from None
    text = output.decode(errors="replace")
    if process.returncode != 0:
        raise VenvError(f"{' '.join(argv)} exited with {process.returncode}:\n{text[-2000:]}")
    return text


async def ensure_venv(directory: Path, requirements: Sequence[str]) -> Path:
    """The interpreter of a venv at ``directory`` (on this Python) holding ``requirements``:
    the one there if it was made for exactly these, else a new one installed by pip."""
    python = directory / "bin" / "python"
    wanted = json.dumps(sorted(requirements))
    if await asyncio.to_thread(_holds, directory, wanted):
        return python
    await asyncio.to_thread(_clear, directory)
    await _run(sys.executable, "-m", "venv", str(directory))
    await _run(
        str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements
    )
    await asyncio.to_thread((directory / MARKER).write_text, wanted)
    return python


def _holds(directory: Path, wanted: str) -> bool:
    """Whether the venv at ``directory`` was made for exactly the requirements ``wanted``."""
    marker = directory / MARKER
    python = directory / "bin" / "python"
    return python.exists() and marker.exists() and marker.read_text() == wanted


def _clear(directory: Path) -> None:
    if directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)


async def installed(python: Path) -> dict[str, str]:
    """Every distribution the venv of ``python`` holds, by name: its version."""
    code = (
        "import importlib.metadata as m, json\n"
        "print(json.dumps({d.metadata['Name'].lower(): d.version for d in m.distributions()}))"
    )
    versions: dict[str, str] = json.loads(await _run(str(python), "-c", code, seconds=60.0))
    return dict(sorted(versions.items()))
