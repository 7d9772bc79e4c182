"""Compiles the gettext catalogues (``locale/<ll_CC>/LC_MESSAGES/*.po``) into the ``.mo`` files
the daemon reads at run time with the standard library's ``gettext``.

Babel is needed only here, to build: ``daemon/setup.py`` runs this while building a wheel (Babel
is a build requirement), and ``python -m turnkeeper.i18n compile`` in a checkout. It imports
nothing of Turnkeeper, so the build loads it by path, before anything is installed.
"""

from __future__ import annotations

import io
import os
from pathlib import Path


def compile_catalogues(locale_dir: Path, out_dir: Path) -> list[Path]:
    """Compile every ``.po`` under ``locale_dir`` into a ``.mo`` at the same place under
    ``out_dir`` (the same folder, or a build's copy of the package); fuzzy and untranslated
    messages are left out, so they are shown in English. Returns the ``.mo`` files written."""
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    written: list[Path] = []
    for po in sorted(locale_dir.glob("*/LC_MESSAGES/*.po")):
        relative = po.relative_to(locale_dir)
        with po.open("rb") as f:
            catalog = read_po(f, locale=relative.parts[0], domain=po.stem)
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        target = (out_dir / relative).with_suffix(".mo")
        target.parent.mkdir(parents=True, exist_ok=True)
        # Replaced whole: a daemon or test reading the catalogue meanwhile sees the old or the
        # new file, never half of one.
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        partial.write_bytes(compiled.getvalue())
        partial.replace(target)
        written.append(target)
    return written
