"""The package as a user installs it: a wheel and an sdist built from the checkout, the hub
from a fresh venv with the server extra, a worker from a venv of the base install alone,
every process run outside the checkout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from taskhub import __version__
from tests.support.databases import create_postgres_database, drop_postgres_database
from tests.support.server import HOST, REPO_ROOT, free_port, run_async
from tests.support.waiting import eventually_sync

# Import names of the server extra's distributions that a worker must never need.
SERVER_MODULES = (
    "sqlalchemy",
    "asyncpg",
    "aiosqlite",
    "uvicorn",
    "taskiq",
    "alembic",
    "redis",
    "jwt",
)
EXTENSION = """
from taskhub.sdk import Extension, TaskContext


class Shout(Extension):
    category = "modifiers"
    text: str = ""

    def run(self, ctx: TaskContext) -> dict:
        return {"shouted": self.text.upper(), "task_id": ctx.task_id}
"""
SUBMIT = """
import sys
from shout import Shout
from taskhub.sdk import Client

url, token = sys.argv[1], sys.argv[2]
print(Client(url, token).submit(Shout(text="hello"), room="lab").result(timeout=60)["shouted"])
"""


@dataclass(frozen=True)
class Venv:
    root: Path

    def bin(self, name: str) -> str:
        return str(self.root / "bin" / name)

    def run(self, *args: str, cwd: Path, timeout: float = 600, **kw: object) -> str:
        result = subprocess.run(
            args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, **kw
        )
        assert result.returncode == 0, f"{args} exited {result.returncode}:\n{result.stderr}"
        return result.stdout

    def found_modules(self, names: tuple[str, ...], cwd: Path) -> set[str]:
        """Which of the top-level modules ``names`` this venv can import (one process)."""
        code = (
            "import importlib.util, sys\n"
            "for name in sys.argv[1:]:\n"
            "    if importlib.util.find_spec(name) is not None: print(name)"
        )
        return set(self.run(self.bin("python"), "-c", code, *names, cwd=cwd).split())


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    server: Venv  # the wheel with the server extra
    base: Venv  # the wheel alone: the worker SDK


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without inherited ``TASKHUB_*`` settings or a virtualenv's."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TASKHUB_", "PYTHON", "VIRTUAL_ENV"))
    }
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def make_venv(root: Path, requirement: str, cwd: Path) -> Venv:
    """A fresh venv with ``requirement`` installed by pip as a user would, less two costs
    that prove nothing about the package: pip itself is not installed into the venv (this
    interpreter's pip installs into it, ``--python``), and installed modules are not
    compiled ahead (``--no-compile``: those imported compile when first imported)."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120
    )
    venv = Venv(root)
    venv.run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        venv.bin("python"),
        "install",
        "--quiet",
        "--no-compile",
        requirement,
        cwd=cwd,
    )
    return venv


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """``python -m build`` of the checkout (an sdist, then a wheel from that sdist), and the
    two installs of the wheel."""
    outside = tmp_path_factory.mktemp("packaging")
    dist = outside / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO_ROOT)],
        cwd=outside,
        env=clean_env(),
        capture_output=True,
        check=True,
        timeout=600,
    )
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    with ThreadPoolExecutor(2) as pool:  # two pips: mostly waiting on files and the index
        server = pool.submit(make_venv, outside / "server-venv", f"{wheel}[server]", outside)
        base = pool.submit(make_venv, outside / "base-venv", str(wheel), outside)
        return Built(wheel, sdist, server.result(), base.result())


@pytest.fixture
def empty_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "elsewhere"
    directory.mkdir()
    return directory


class Serve:
    """``taskhub serve`` of the server venv, in a folder of its own."""

    def __init__(self, venv: Venv, cwd: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.log = cwd / "serve.log"
        self.process = subprocess.Popen(
            [venv.bin("taskhub"), "serve", "--host", HOST, "--port", str(self.port)],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.url = f"http://{HOST}:{self.port}"

    def wait_ready(self, timeout: float = 120) -> None:

        def healthy() -> bool:
            assert self.process.poll() is None, f"serve exited:\n{self.log.read_text()}"
            try:
                return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        eventually_sync(healthy, timeout, lambda: f"serve to answer:\n{self.log.read_text()}", 0.1)

    def admin_token(self) -> str:
        match = re.search(r"admin token \(shown once\): (\S+)", self.log.read_text())
        assert match, self.log.read_text()
        return match.group(1)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


@pytest.fixture
def serving(built: Built, empty_dir: Path) -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.stop()


def assert_page_served(url: str) -> None:
    page = httpx.get(f"{url}/", timeout=10)
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    client = re.search(r'"socket\.io-client": "([^"]+)"', page.text)
    assert client, "the page's import map names the socket.io client"
    script = httpx.get(f"{url}{client.group(1)}", timeout=10)
    assert script.status_code == 200
    assert "javascript" in script.headers["content-type"]
    assert len(script.content) > 10_000
    charts = re.search(r'"uplot": "([^"]+)"', page.text)
    assert charts, "the page's import map names uPlot"
    chart_script = httpx.get(f"{url}{charts.group(1)}", timeout=10)
    assert chart_script.status_code == 200
    assert "javascript" in chart_script.headers["content-type"]
    assert httpx.get(f"{url}/vendor/uplot/uPlot.min.css", timeout=10).status_code == 200
    assert httpx.get(f"{url}/static/app.js", timeout=10).status_code == 200


def wait_for_job(url: str, token: str, name: str, worker: subprocess.Popen[bytes]) -> None:
    """Until the worker has registered job ``name`` (room ``lab``)."""
    headers = {"Authorization": f"Bearer {token}"}

    def registered() -> bool:
        assert worker.poll() is None, "the worker exited"
        jobs = httpx.get(f"{url}/v1/joblib/rooms/lab/jobs", headers=headers, timeout=10)
        return name in jobs.text

    eventually_sync(registered, 60, f"{name} registered", 0.1)


def test_the_distributions_carry_one_package_with_its_migrations_and_page(built: Built) -> None:
    names = zipfile.ZipFile(built.wheel).namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"taskhub"}
    for inside in (
        "taskhub/migrations/env.py",
        "taskhub/migrations/script.py.mako",
        "taskhub/migrations/versions/0001_initial_schema.py",
        "taskhub/static/index.html",
        "taskhub/static/vendor/socket.io/socket.io.esm.min.js",
        "taskhub/static/vendor/uplot/uPlot.esm.js",
        "taskhub/static/vendor/uplot/uPlot.min.css",
        "taskhub/static/vendor/oauth4webapi/index.js",
        "taskhub/internal_jobs/broker.py",
        "taskhub/py.typed",
    ):
        assert inside in names
    assert built.wheel.name == f"taskhub-{__version__}-py3-none-any.whl"
    with tarfile.open(built.sdist) as sdist:
        assert f"taskhub-{__version__}/app/static/vendor/socket.io/socket.io.esm.min.js" in (
            sdist.getnames()
        )


def test_the_base_install_is_the_sdk_without_the_hubs_dependencies(
    built: Built, empty_dir: Path
) -> None:
    assert built.base.found_modules((*SERVER_MODULES, "taskhub"), empty_dir) == {"taskhub"}
    assert built.server.found_modules(SERVER_MODULES, empty_dir) == set(SERVER_MODULES)
    assert built.base.run(built.base.bin("python"), "-c", "import taskhub.sdk", cwd=empty_dir) == ""
    assert built.base.run(built.base.bin("taskhub"), "--version", cwd=empty_dir).strip() == (
        f"taskhub {__version__}"
    )


@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["users", "list"]])
def test_the_hubs_commands_without_the_server_extra_say_what_to_install(
    built: Built, empty_dir: Path, command: list[str]
) -> None:
    result = subprocess.run(
        [built.base.bin("taskhub"), *command],
        cwd=empty_dir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "pip install 'taskhub[server]'" in lines[0]


def test_the_hub_serves_from_an_empty_folder_on_sqlite_and_a_slim_worker_runs_its_tasks(
    built: Built, empty_dir: Path, serving: list[Serve], tmp_path: Path
) -> None:
    serve = Serve(built.server, empty_dir, clean_env())
    serving.append(serve)
    serve.wait_ready()
    assert (empty_dir / "taskhub.db").is_file()  # the embedded default, migrated at start
    health = httpx.get(f"{serve.url}/healthz", timeout=10).json()
    assert health["version"] == __version__
    assert_page_served(serve.url)

    worker_dir = tmp_path / "worker"
    worker_dir.mkdir()
    (worker_dir / "shout.py").write_text(EXTENSION)
    (worker_dir / "submit.py").write_text(SUBMIT)
    env = clean_env(TASKHUB_URL=serve.url, TASKHUB_TOKEN=serve.admin_token())
    worker = subprocess.Popen(
        [built.base.bin("taskhub"), "worker", "shout:Shout", "--room", "lab"],
        cwd=worker_dir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(worker_dir / "worker.log").open("wb"),
    )
    try:
        wait_for_job(serve.url, serve.admin_token(), "lab:modifiers:Shout", worker)
        shouted = built.base.run(
            built.base.bin("python"),
            "submit.py",
            serve.url,
            serve.admin_token(),
            cwd=worker_dir,
            env=env,
            timeout=120,
        )
    finally:
        worker.terminate()
        worker.wait(30)
    assert shouted.strip() == "HELLO", (worker_dir / "worker.log").read_text()


def test_the_hub_migrates_and_serves_postgresql_from_an_empty_folder(
    built: Built, empty_dir: Path, serving: list[Serve]
) -> None:
    # A new, empty database: the installed wheel's ``taskhub migrate`` builds its schema.
    url = run_async(create_postgres_database("taskhub_packaging"))
    try:
        env = clean_env(TASKHUB_DATABASE_URL=url)
        out = built.server.run(built.server.bin("taskhub"), "migrate", cwd=empty_dir, env=env)
        assert out.startswith("Database is at revision ")
        serve = Serve(built.server, empty_dir, env)
        serving.append(serve)
        serve.wait_ready()
        assert httpx.get(f"{serve.url}/readyz", timeout=10).json()["version"] == __version__
        assert_page_served(serve.url)
        serving.remove(serve)
        serve.stop()
    finally:
        run_async(drop_postgres_database(url))
    assert not (empty_dir / "taskhub.db").exists()


def test_the_package_list_holds_every_folder_of_the_code() -> None:
    """pyproject.toml names the packages one by one (setuptools maps ``app/`` to
    ``taskhub``): a new folder of code must be named there too, or the wheel lacks it."""
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {"app": "taskhub", "internal_jobs": "taskhub.internal_jobs"}
    found = set()
    for folder, package in folders.items():
        for init in (REPO_ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(REPO_ROOT / folder)
            found.add(".".join([package, *relative.parts]))
    data = {"taskhub.migrations", "taskhub.migrations.versions"}
    data |= {"taskhub.static", "taskhub.static.vendor"}
    assert listed == found | data
