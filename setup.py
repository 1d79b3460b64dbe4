"""The build's one step beyond pyproject.toml: the page's browser libraries must be there.

They come from npm: ``npm ci`` copies them into ``static/vendor/`` (package.json's
postinstall), and a build refuses to go on without them, so that a wheel never ships a page
that cannot load. An sdist carries them, so building a wheel from it needs no npm.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent
# What the page imports (its import map), where the package sees it (app/static is static/).
VENDORED = (
    "app/static/vendor/oauth4webapi/index.js",
    "app/static/vendor/socket.io/socket.io.esm.min.js",
    "app/static/vendor/uplot/uPlot.esm.js",
    "app/static/vendor/uplot/uPlot.min.css",
)


class BuildWithPage(build_py):
    def run(self) -> None:
        # An editable install serves static/ as it is; ``./dev`` runs ``npm ci`` for it.
        missing = [] if self.editable_mode else [n for n in VENDORED if not (ROOT / n).is_file()]
        if missing:
            raise SystemExit(
                f"taskhub build: {', '.join(missing)} missing; run `npm ci` in the checkout "
                "first (it copies the page's browser libraries into static/vendor/)"
            )
        super().run()


setup(cmdclass={"build_py": BuildWithPage})
