"""The Foundry VTT module (``docs/examples/foundry-turnkeeper``) as Foundry installs it: one zip
of its files with the JavaScript client inside, made here and nowhere else.

The daemon serves that zip and its manifest (``transport/foundry.py``), so it needs the zip
where Node.js and npm may be missing, at build time and at run time: the zip is made in Python,
from the module's folder, the client's sources (``sdk/js/src``) and the copy of
``@msgpack/msgpack`` the table view already ships (``web/vendor/msgpack``, checked byte for byte
against the version the client's lockfile pins). ``daemon/setup.py`` runs this file by path
while building a wheel, which then carries the zip (an sdist carries the zip made from its
checkout, for the wheel built from it); an editable install has none and makes it
from the checkout, again whenever a source changes. It imports only the standard library, since
the build loads it before anything is installed.

    python -m turnkeeper.foundry lib [DIR]          # DIR/lib/: link DIR into Foundry's modules
    python -m turnkeeper.foundry release OUT_DIR    # OUT_DIR/<id>.zip and OUT_DIR/module.json
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "module.json"
SHIPPED = (MANIFEST, "LICENSE", "README.md", "scripts", "lang")
"""What of the module's folder the zip holds, besides ``lib/``: what Foundry loads (module.json
names the scripts and languages) and the licence. Not the tests, nor the folder's own lib/."""
BARE = b'from "@msgpack/msgpack"'
LOCAL = b'from "../msgpack/index.mjs"'
"""Foundry loads a module's scripts as they are, with no bundler and no import map, so the
client's one bare import becomes the relative path of the copy in ``lib/msgpack/``."""
EPOCH = (1980, 1, 1, 0, 0, 0)
"""Every entry's time: the zip format's earliest, so that the same files make the same bytes."""
PACKAGED = Path(__file__).resolve().parent / "foundry-turnkeeper.zip"
"""Where a wheel carries the zip (``daemon/setup.py`` writes it there)."""
CHECKOUT = Path(__file__).resolve().parents[3]
"""The repository's root, when this file runs from a checkout (an editable install)."""
LIB = ("lib/turnkeeper", "lib/msgpack")
"""The folders of ``lib/`` the zip fills, and all that ``lib`` replaces in a module's folder:
anything else there (another library the folder's owner put beside them) is left alone."""


class BuildError(Exception):
    """The sources cannot make the module: the message says what is wrong."""


@dataclass(frozen=True)
class Sources:
    """Where the zip's files come from."""

    module: Path
    client: Path
    msgpack: Path

    @classmethod
    def of(cls, root: Path) -> Sources:
        """The sources in a checkout (or a build's copy of one) rooted at ``root``."""
        return cls(
            module=root / "docs" / "examples" / "foundry-turnkeeper",
            client=root / "sdk" / "js" / "src",
            msgpack=root / "daemon" / "src" / "turnkeeper" / "web" / "vendor" / "msgpack",
        )

    def inputs(self) -> list[tuple[str, Path]]:
        """Each entry of the zip, in order, and the file it is made of."""
        found: list[tuple[str, Path]] = []
        for entry in SHIPPED:
            path = self.module / entry
            files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
            found += [(p.relative_to(self.module).as_posix(), p) for p in files]
        modules = sorted(p for p in self.msgpack.rglob("*.mjs"))
        found += [(f"lib/msgpack/{p.relative_to(self.msgpack).as_posix()}", p) for p in modules]
        found.append(("lib/msgpack/LICENSE", self.msgpack / "LICENSE"))
        found += [(f"lib/turnkeeper/{p.name}", p) for p in sorted(self.client.glob("*.js"))]
        return found

    def state(self) -> tuple[tuple[str, int, int], ...]:
        """What the sources are now (names, times, sizes): when it changes, the zip is stale."""
        try:
            return tuple(
                (str(path), (s := path.stat()).st_mtime_ns, s.st_size) for _, path in self.inputs()
            )
        except OSError as e:
            raise BuildError(f"the Foundry module's sources are not all there: {e}") from e


def build(sources: Sources) -> bytes:
    """The zip Foundry installs, deflated; the same sources make the same bytes."""
    try:
        files = [(entry, path.read_bytes()) for entry, path in sources.inputs()]
        manifest = json.loads((sources.module / MANIFEST).read_bytes())
    except (OSError, ValueError) as e:
        raise BuildError(f"the Foundry module's sources are not all there: {e}") from e
    # Foundry downloads the zip from `download`: the name the URL ends with is the one made here.
    name = f"{manifest['id']}.zip"
    if not str(manifest.get("download", "")).endswith(f"/{name}"):
        raise BuildError(f"module.json's download must end with /{name}")
    out = io.BytesIO()
    rewritten = 0
    with zipfile.ZipFile(out, "w") as archive:
        for entry, data in files:
            if entry.startswith("lib/turnkeeper/"):
                rewritten += BARE in data
                data = data.replace(BARE, LOCAL)
            archive.writestr(_entry(entry), data)
    if not rewritten:
        raise BuildError(f"no file of {sources.client} imports @msgpack/msgpack: not the client?")
    return out.getvalue()


def manifest_of(release: bytes) -> dict[str, Any]:
    """The module.json a zip holds."""
    with zipfile.ZipFile(io.BytesIO(release)) as archive:
        found: dict[str, Any] = json.loads(archive.read(MANIFEST))
    return found


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=EPOCH)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return info


class Relocatable:
    """A zip whose module.json can point at another address cheaply: Foundry checks for
    updates at the ``manifest`` of the copy it installed, so the zip a daemon serves must name
    the address it was fetched from, and a client may name a new one with every request.
    Deflating the whole zip again takes milliseconds; appending one module.json to the rest,
    deflated once here, takes a fraction of one."""

    def __init__(self, release: bytes) -> None:
        rest = io.BytesIO()
        with zipfile.ZipFile(io.BytesIO(release)) as source, zipfile.ZipFile(rest, "w") as out:
            self.manifest: dict[str, Any] = json.loads(source.read(MANIFEST))
            for info in source.infolist():
                if info.filename != MANIFEST:
                    out.writestr(info, source.read(info))
        self._rest = rest.getvalue()

    def at(self, base: str) -> tuple[bytes, bytes]:
        """The zip with ``manifest`` and ``download`` under ``base`` (a URL ending in ``/``),
        and that module.json."""
        manifest = dict(
            self.manifest,
            manifest=base + MANIFEST,
            download=f"{base}{self.manifest['id']}.zip",
        )
        data = (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode()
        out = io.BytesIO(self._rest)
        with zipfile.ZipFile(out, "a") as archive:
            archive.writestr(_entry(MANIFEST), data)
        return out.getvalue(), data


class Release:
    """The zip this daemon serves: the wheel's, or else one made from the checkout and made
    again when its sources change (an editable install runs the sources in place, so a copy
    made once would go stale)."""

    def __init__(self, packaged: Path = PACKAGED, checkout: Path = CHECKOUT) -> None:
        self._packaged = packaged
        self._wheel: bytes | None = None
        self._sources = Sources.of(checkout)
        self._state: tuple[tuple[str, int, int], ...] | None = None
        self._made = b""

    def current(self) -> bytes | None:
        """The zip, or None when this install has neither a packaged zip nor a checkout."""
        if self._wheel is None and self._packaged.is_file():
            # An installed package does not change under a running daemon: read once.
            self._wheel = self._packaged.read_bytes()
        if self._wheel is not None:
            return self._wheel
        if not self._sources.module.is_dir():
            return None
        state = self._sources.state()
        if state != self._state:
            self._made, self._state = build(self._sources), state
        return self._made


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m turnkeeper.foundry``: the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m turnkeeper.foundry",
        description="Build the Foundry VTT module from this checkout.",
    )
    steps = parser.add_subparsers(dest="step", required=True)
    lib = steps.add_parser("lib", help="put the JavaScript client into DIR/lib/")
    lib.add_argument("dir", nargs="?", type=Path, default=Sources.of(CHECKOUT).module)
    release = steps.add_parser("release", help="write OUT_DIR/<id>.zip and OUT_DIR/module.json")
    release.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        made = build(Sources.of(CHECKOUT))
    except BuildError as e:
        print(f"turnkeeper.foundry: {e}", file=sys.stderr)
        return 1
    manifest = manifest_of(made)
    if args.step == "lib":
        return _lib(made, manifest["id"], args.dir)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{manifest['id']}.zip").write_bytes(made)
    (args.out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{args.out_dir}: {manifest['id']}.zip, module.json")
    return 0


def _lib(made: bytes, module_id: str, folder: Path) -> int:
    """Replace ``folder``'s copy of the client with the zip's, once ``folder`` is this module's
    own (its module.json has the module's id): a mistyped folder loses nothing."""
    try:
        found = json.loads((folder / MANIFEST).read_bytes()).get("id")
    except (OSError, ValueError, AttributeError):
        found = None
    if found != module_id:
        print(
            f"turnkeeper.foundry: {folder} is not the {module_id} module's folder "
            f"(no module.json with id {module_id!r} there): nothing changed",
            file=sys.stderr,
        )
        return 1
    for each in LIB:
        shutil.rmtree(folder / each, ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(made)) as archive:
        wanted = tuple(f"{each}/" for each in LIB)
        archive.extractall(folder, [n for n in archive.namelist() if n.startswith(wanted)])
    print(f"{folder / 'lib'} holds the client of {Sources.of(CHECKOUT).client}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
