"""Type-check the package as it is installed: ``taskhub`` is ``app/`` (and
``taskhub.internal_jobs`` is ``internal_jobs/``), a mapping mypy cannot follow through the
editable install, so this lays out a tree of links named as the package is and runs mypy
on it with the settings of pyproject.toml."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="taskhub-typecheck-") as scratch:
        package = Path(scratch) / "taskhub"
        package.mkdir()
        for entry in (ROOT / "app").iterdir():
            if entry.name not in {"migrations", "static", "__pycache__"}:
                (package / entry.name).symlink_to(entry)
        (package / "internal_jobs").symlink_to(ROOT / "internal_jobs")
        mypy = shutil.which("mypy", path=str(Path(sys.executable).parent)) or "mypy"
        config = ["--config-file", str(ROOT / "pyproject.toml")]
        command = [mypy, *config, "--cache-dir", str(ROOT / ".mypy_cache"), "-p", "taskhub"]
        env = {**os.environ, "MYPYPATH": scratch}
        return subprocess.run(command, cwd=scratch, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
