"""The one build step pyproject.toml cannot declare: the gettext catalogues are compiled into
``.mo`` files (``turnkeeper/mo.py``, with Babel, a build requirement), so that the installed
daemon reads them with the standard library and never needs Babel."""

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


class BuildPyWithCatalogues(build_py):
    """``build_py`` that also compiles the catalogues: into the wheel's copy of the package, or,
    for an editable install (which runs the sources in place), beside the ``.po`` files."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            _compile(HERE / LOCALE)
        else:
            _compile(Path(self.build_lib, "turnkeeper", "locale"))


setup(cmdclass={"build_py": BuildPyWithCatalogues})
