"""The build steps pyproject.toml cannot declare: the gettext catalogues are compiled into
``.mo`` files (``turnkeeper/mo.py``, with Babel, a build requirement), so that the installed
daemon reads them with the standard library and never needs Babel; and the Foundry VTT module's
zip is made (``turnkeeper/foundry.py``), which the daemon serves, from the repository's
``docs/examples/foundry-turnkeeper`` and ``sdk/js``. An sdist has no repository around it: it
carries the zip made from the checkout it was made in, and a wheel built from it takes that."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
LOCALE = Path("src", "turnkeeper", "locale")
# By path, as the catalogues' compiler: importing the package would need its dependencies.
FOUNDRY: dict[str, Any] = runpy.run_path(str(HERE / LOCALE.parent / "foundry.py"))
ZIP_NAME: str = FOUNDRY["PACKAGED"].name
"""The zip's name in the wheel's package, and at an sdist's top, beside this file."""


def _compile(out_dir: Path) -> None:
    mo = runpy.run_path(str(HERE / LOCALE.parent / "mo.py"))
    mo["compile_catalogues"](HERE / LOCALE, out_dir)


def _in_checkout() -> bool:
    """This file is the repository's ``daemon/setup.py``: not an unpacked sdist, which may sit
    beside any folder at all."""
    mine = HERE.parent / "daemon" / "setup.py"
    return mine.is_file() and mine.samefile(__file__)


def _foundry_zip() -> bytes:
    """The module's zip: made from the checkout, or the one the sdist carries."""
    if not _in_checkout():
        prebuilt = HERE / ZIP_NAME
        if not prebuilt.is_file():
            raise SystemExit(f"{HERE} is neither the repository's daemon/ nor an sdist of it")
        return prebuilt.read_bytes()
    made: bytes = FOUNDRY["build"](FOUNDRY["Sources"].of(HERE.parent))
    return made


class BuildPyWithCatalogues(build_py):
    """``build_py`` that also compiles the catalogues: into the wheel's copy of the package, or,
    for an editable install (which runs the sources in place), beside the ``.po`` files. It puts
    the Foundry module's zip into the wheel; an editable install makes it from the checkout when
    asked (``turnkeeper.foundry.Release``), so that it never serves a stale one."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            _compile(HERE / LOCALE)
        else:
            _compile(Path(self.build_lib, "turnkeeper", "locale"))
            Path(self.build_lib, "turnkeeper", ZIP_NAME).write_bytes(_foundry_zip())


class SdistWithFoundryModule(sdist):
    """``sdist`` that carries the Foundry module's zip, which a wheel built from it needs."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        Path(base_dir, ZIP_NAME).write_bytes(_foundry_zip())


setup(cmdclass={"build_py": BuildPyWithCatalogues, "sdist": SdistWithFoundryModule})
