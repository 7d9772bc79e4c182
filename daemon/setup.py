"""The build steps pyproject.toml cannot declare: the gettext catalogues are compiled into
``.mo`` files (``turnkeeper/mo.py``, with Babel, a build requirement), so that the installed
daemon reads them with the standard library and never needs Babel; and the Foundry VTT module's
zip is made (``turnkeeper/foundry.py``), which the daemon serves, from the repository's
``docs/examples/foundry-turnkeeper`` and ``sdk/js``: a wheel is built from the repository (as
``scripts/wheels`` does), never from an sdist alone."""

from __future__ import annotations

import runpy
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
LOCALE = Path("src", "turnkeeper", "locale")


def _compile(out_dir: Path) -> None:
    # By path: importing the package would need its dependencies, which a build does not have.
    mo = runpy.run_path(str(HERE / LOCALE.parent / "mo.py"))
    mo["compile_catalogues"](HERE / LOCALE, out_dir)


def _foundry_module(package_dir: Path) -> None:
    foundry = runpy.run_path(str(HERE / LOCALE.parent / "foundry.py"))
    made = foundry["build"](foundry["Sources"].of(HERE.parent))
    (package_dir / foundry["PACKAGED"].name).write_bytes(made)


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
            _foundry_module(Path(self.build_lib, "turnkeeper"))


setup(cmdclass={"build_py": BuildPyWithCatalogues})
