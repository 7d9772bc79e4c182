"""The packages install as the README says: one version per distribution, written once and
reported the same everywhere; the licence in every package; compatible-release dependencies;
translations read with the standard library alone; the container image's steps and the systemd
unit checked as far as this machine allows (no container engine, no systemd as PID 1)."""

from __future__ import annotations

import ast
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import tomllib
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

import turnkeeper
from daemon import CALL_TIMEOUT, Client, free_port, running
from turnkeeper import foundry, i18n

ROOT = Path(__file__).resolve().parents[1]
# Each Python distribution's folder, and the package whose `__version__` is its version.
DISTRIBUTIONS = {
    "engine": "turnkeeper_engine",
    "sdk": "turnkeeper_sdk",
    "daemon": "turnkeeper",
    "plugins/surprise": "turnkeeper_surprise",
    "plugins/auto_reactions": "turnkeeper_auto_reactions",
    "plugins/dnd3e_ready": "turnkeeper_dnd3e_ready",
    "plugins/example": "turnkeeper_example_plugin",
}
BUNDLED = {"turnkeeper-surprise", "turnkeeper-auto-reactions", "turnkeeper-dnd3e-ready"}
SDK_JS = ROOT / "sdk" / "js"
FOUNDRY = ROOT / "docs" / "examples" / "foundry-turnkeeper"
RELEASE_HOST = "turnkeeper.invalid"
"""The Foundry module's address until the project publishes it: the one thing to set then
(docs/examples/foundry-turnkeeper/README.md). `.invalid` never resolves (RFC 2606)."""
BUILD_TIMEOUT = 60.0


def _pyproject(folder: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())


def _version_in_source(folder: str, package: str) -> str:
    """``__version__`` as the build reads it: statically, from the package's ``__init__.py``."""
    tree = ast.parse((ROOT / folder / "src" / package / "__init__.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["__version__"]
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    raise AssertionError(f"no __version__ in {package}")


def _changelog_release() -> str:
    """The newest released version in CHANGELOG.md (``## [0.1.0] - 2026-12-01``)."""
    found = re.search(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert found, "CHANGELOG.md has no release heading"
    return found.group(1)


def _json(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


def test_each_distribution_writes_its_version_once_and_the_build_reads_it() -> None:
    for folder, package in DISTRIBUTIONS.items():
        project = _pyproject(folder)
        assert "version" not in project["project"], folder
        assert project["project"]["dynamic"] == ["version"], folder
        attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
        assert attr == f"{package}.__version__", folder


def test_every_reported_version_is_the_release_the_changelog_names() -> None:
    """The project releases its packages together: one version, in the changelog, in each
    distribution's ``__version__``, the JavaScript client's package, and the Foundry module."""
    release = _changelog_release()
    for folder, package in DISTRIBUTIONS.items():
        assert _version_in_source(folder, package) == release, folder
    assert turnkeeper.__version__ == release
    package = _json(SDK_JS / "package.json")
    lock = _json(SDK_JS / "package-lock.json")
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == release
    assert _json(FOUNDRY / "module.json")["version"] == release


def test_the_command_and_hello_report_the_daemons_version(tmp_path: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "turnkeeper.cli", "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    assert shown.stdout.split() == ["turnkeeper", _changelog_release()]
    with running(tmp_path) as d:
        c = Client.unix(d.socket)
        try:
            assert c.hello()["server"] == {"name": "turnkeeper", "version": _changelog_release()}
        finally:
            c.close()


def test_dependencies_are_compatible_ranges_and_plugins_take_a_compatible_sdk() -> None:
    versions = {
        _pyproject(folder)["project"]["name"]: _version_in_source(folder, package)
        for folder, package in DISTRIBUTIONS.items()
    }
    for folder in DISTRIBUTIONS:
        project = _pyproject(folder)["project"]
        for line in project["dependencies"]:
            wanted = Requirement(line)
            assert all(s.operator not in {"==", "==="} for s in wanted.specifier), line
            if wanted.name in versions:
                # Ours: a compatible-release range that admits the version released with it.
                assert [s.operator for s in wanted.specifier] == ["~="], (folder, line)
                assert wanted.specifier.contains(versions[wanted.name]), (folder, line)
        if folder.startswith("plugins/"):
            assert "turnkeeper" not in {Requirement(r).name for r in project["dependencies"]}
            assert any(Requirement(r).name == "turnkeeper-sdk" for r in project["dependencies"]), (
                folder
            )
    daemon = {Requirement(r).name for r in _pyproject("daemon")["project"]["dependencies"]}
    assert daemon >= BUNDLED, "pip install turnkeeper brings the bundled plugins"
    assert "babel" not in daemon, "Babel builds the catalogues; the daemon never needs it"


def test_every_package_carries_the_licence_and_says_so() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("MIT License")
    for folder in DISTRIBUTIONS:
        project = _pyproject(folder)["project"]
        assert project["license"] == "MIT", folder
        assert project["license-files"] == ["LICENSE"], folder
        assert (ROOT / folder / "LICENSE").read_text() == licence, folder
        assert (ROOT / folder / project["readme"]).is_file(), folder
        assert "Programming Language :: Python :: 3.11" in project["classifiers"], folder
        # PEP 639: the expression replaces the licence classifiers.
        assert not [c for c in project["classifiers"] if c.startswith("License ::")], folder
    package = _json(SDK_JS / "package.json")
    assert package["license"] == "MIT"
    assert (SDK_JS / "LICENSE").read_text() == licence
    browser = _json(ROOT / "tests" / "browser" / "package.json")
    assert browser["private"] is True
    module = _json(FOUNDRY / "module.json")
    assert (FOUNDRY / module["license"]).read_text() == licence
    assert "MIT" in (ROOT / "README.md").read_text()


def test_the_foundry_manifest_names_where_its_release_is_installed_from() -> None:
    """Foundry installs from `manifest` and fetches `download` from the manifest it finds there:
    the manifest stays at one address, each version's zip at an address of its own."""
    module = _json(FOUNDRY / "module.json")
    manifest = urllib.parse.urlsplit(module["manifest"])
    base = module["manifest"].removesuffix("/module.json")
    assert (manifest.scheme, manifest.hostname) == ("https", RELEASE_HOST)
    assert module["manifest"] == f"{base}/module.json"
    assert module["download"] == f"{base}/{module['version']}/{module['id']}.zip"
    assert urllib.parse.urlsplit(module["url"]).hostname == RELEASE_HOST


def test_the_foundry_release_zip_holds_the_module_and_the_client(tmp_path: Path) -> None:
    """``python -m turnkeeper.foundry release DIR``: the zip the daemon's wheel carries and
    serves (made by the same function), with the manifest to publish beside it."""
    built = subprocess.run(
        [sys.executable, "-m", "turnkeeper.foundry", "release", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert built.returncode == 0, f"the build failed:\n{built.stdout}\n{built.stderr}"
    manifest = _json(FOUNDRY / "module.json")
    assert _json(tmp_path / "dist" / "module.json") == manifest
    made = (tmp_path / "dist" / f"{manifest['id']}.zip").read_bytes()
    assert made == foundry.build(foundry.Sources.of(ROOT))
    with zipfile.ZipFile(io.BytesIO(made)) as archive:
        assert archive.testzip() is None
        names = set(archive.namelist())
        read = archive.read
        # Foundry unpacks the zip into Data/modules/<id>/: module.json at its top.
        assert json.loads(read("module.json")) == manifest
        # `license` and `readme` are paths in the package (Foundry also takes URLs there).
        wanted = {
            manifest["license"],
            manifest["readme"],
            *manifest["esmodules"],
            *(language["path"] for language in manifest["languages"]),
            "lib/turnkeeper/index.js",
            "lib/msgpack/index.mjs",
            "lib/msgpack/LICENSE",
        }
        assert wanted <= names, wanted - names
        assert read("LICENSE").decode() == (ROOT / "LICENSE").read_text()
        # The README is read from the installed module: a relative link must stay inside it.
        links = re.findall(r"\]\(([^)#]*)", read(manifest["readme"]).decode())
        outside = [link for link in links if "://" not in link and link not in names]
        assert outside == [], f"the README links outside the zip: {outside}"
        # The client as Foundry can load it: every file of it, its one bare import made relative.
        client = {f"lib/turnkeeper/{p.name}" for p in (SDK_JS / "src").glob("*.js")}
        assert client <= names
        assert not any(b'from "@msgpack/msgpack"' in read(name) for name in client)
        assert b'from "../msgpack/index.mjs"' in read("lib/turnkeeper/index.js")
        # @msgpack/msgpack's ES modules, the table view's copy (checked against the lockfile's).
        vendored = ROOT / "daemon" / "src" / "turnkeeper" / "web" / "vendor" / "msgpack"
        for path in vendored.rglob("*"):
            if path.is_file():
                entry = f"lib/msgpack/{path.relative_to(vendored).as_posix()}"
                assert read(entry) == path.read_bytes(), entry
        assert not [name for name in names if name.startswith(("test", "node_modules"))]


def test_a_wheel_built_from_the_sdist_carries_the_sdist_s_foundry_zip(tmp_path: Path) -> None:
    """``python -m build daemon`` (and pip, given the sdist) builds the wheel from the sdist,
    which has no repository around it: the sdist carries the Foundry module's zip and the wheel
    takes that one, never one made of whatever folders sit beside the unpacked sdist."""
    copy = tmp_path / "checkout"
    junk = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.mo", "lib", "test*")
    for part in ("daemon", "docs/examples/foundry-turnkeeper", "sdk/js/src"):
        shutil.copytree(ROOT / part, copy / part, symlinks=True, ignore=junk)
    shutil.copy(ROOT / "LICENSE", copy / "LICENSE")
    build_sdist = (
        "import sys; from setuptools import build_meta; build_meta.build_sdist(sys.argv[1])"
    )
    subprocess.run(
        [sys.executable, "-c", build_sdist, str(tmp_path / "sdist")],
        cwd=copy / "daemon",
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT,
    )
    [sdist] = (tmp_path / "sdist").glob("turnkeeper-*.tar.gz")
    # Unpacked into the copy, beside a docs/ that differs from the one it was made of.
    with tarfile.open(sdist) as archive:
        archive.extractall(copy, filter="data")
    lang = copy / "docs" / "examples" / "foundry-turnkeeper" / "lang" / "en.json"
    lang.write_text('{"not": "the sdist\'s"}\n')
    [unpacked] = copy.glob("turnkeeper-*")
    offline = ["--no-build-isolation", "--no-index", "--no-deps", "--quiet"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *offline, "-w", str(tmp_path / "w"), str(unpacked)],
        check=True,
        capture_output=True,
        timeout=BUILD_TIMEOUT,
    )
    [wheel] = (tmp_path / "w").glob("turnkeeper-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        carried = archive.read(f"turnkeeper/{foundry.PACKAGED.name}")
    assert carried == foundry.build(foundry.Sources.of(ROOT))


BLOCK_BABEL = textwrap.dedent(
    """
    import sys

    class NoBabel:
        def find_spec(self, name, path=None, target=None):
            if name == "babel" or name.startswith("babel."):
                raise ImportError(f"{name} is blocked: the daemon must not need Babel")
            return None

    sys.meta_path.insert(0, NoBabel())
    """
)
TRANSLATE = textwrap.dedent(
    """
    import json, sys
    from turnkeeper import i18n

    print(json.dumps({
        "term": i18n.term("pt-BR", "action_type", "standard"),
        "catalogue": len(i18n.catalogue("pt-BR")),
        "mo": str(i18n.LOCALE_DIR / "pt_BR" / "LC_MESSAGES" / "turnkeeper.mo"),
        "babel": sorted(m for m in sys.modules if m.split(".")[0] == "babel"),
    }))
    """
)


def _translate(python: str) -> dict[str, Any]:
    ran = subprocess.run(
        [python, "-c", BLOCK_BABEL + TRANSLATE],
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    found: dict[str, Any] = json.loads(ran.stdout)
    return found


def test_translations_are_read_without_babel() -> None:
    found = _translate(sys.executable)
    assert found["term"] == "padrão"
    assert found["catalogue"] > 100
    assert found["babel"] == []


def _unit_for(executable: Path, tmp_path: Path, unit: str | None = None) -> Path:
    text = unit or (ROOT / "deploy" / "turnkeeper.service").read_text()
    assert "ExecStart=/opt/turnkeeper/bin/turnkeeper serve" in text
    path = tmp_path / "turnkeeper.service"
    # verify checks that ExecStart's program exists: point it at an installed one.
    path.write_text(text.replace("/opt/turnkeeper/bin/turnkeeper", str(executable)))
    return path


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=unit.parent,
    )


def test_the_systemd_unit_verifies_cleanly(tmp_path: Path) -> None:
    executable = Path(sys.executable).parent / "turnkeeper"
    checked = _verify(_unit_for(executable, tmp_path))
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
    # verify exits 0 on an unknown or malformed setting too: what it prints is the verdict.
    broken = (ROOT / "deploy" / "turnkeeper.service").read_text()
    broken = broken.replace("ProtectSystem=strict", "ProtectSystem=sometimes")
    assert "protect system value" in _verify(_unit_for(executable, tmp_path, broken)).stderr


def _image_environment() -> dict[str, str]:
    """The ``ENV`` of deploy/Containerfile's final stage."""
    text = (ROOT / "deploy" / "Containerfile").read_text().replace("\\\n", " ")
    found: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            found.update(pair.split("=", 1) for pair in line[4:].split())
    return found


def test_the_image_and_the_unit_set_only_variables_the_daemon_reads() -> None:
    cli = (ROOT / "daemon" / "src" / "turnkeeper" / "cli.py").read_text()
    unit = (ROOT / "deploy" / "turnkeeper.service").read_text()
    names = set(_image_environment()) | set(re.findall(r"^Environment=(\w+)=", unit, re.M))
    assert names >= {"TURNKEEPER_DATA_DIR", "TURNKEEPER_SOCKET", "TURNKEEPER_HTTP"}
    for name in names:
        assert f'env="{name}"' in cli, name


def test_the_image_is_built_by_the_steps_the_script_tries() -> None:
    """deploy/try-image-steps stands in for the image's build: both build the wheels with
    scripts/wheels and install every built wheel, so the script tests what the image does."""
    image = (ROOT / "deploy" / "Containerfile").read_text()
    script = (ROOT / "deploy" / "try-image-steps").read_text()
    assert "RUN scripts/wheels /wheels\n" in image
    assert re.search(r"^RUN pip install [-\w ]*/wheels/\*\.whl", image, re.M)
    assert re.search(r"^scripts/wheels \"\$dir/wheels\"", script, re.M)
    assert re.search(r"/bin/pip\" install [-\w ]*\"\$dir\"/wheels/\*\.whl", script, re.M)
    assert re.search(r'^CMD \["turnkeeper", "serve"\]', image, re.M)
    assert re.search(r"^USER turnkeeper$", image, re.M)


def test_the_image_copies_every_path_the_wheels_are_built_from() -> None:
    """scripts/wheels packs its sources from the repository with tar; the image's build stage
    runs it on what its COPY lines brought in, so a path the script packs that no COPY brings
    fails only in a container build, which nothing here runs."""
    script = (ROOT / "scripts" / "wheels").read_text().replace("\\\n", " ")
    packed = re.search(r"tar --create (.*?) \| tar --extract", script, re.S)
    assert packed, "scripts/wheels no longer packs its sources with tar --create"
    paths = [word for word in packed.group(1).split() if not word.startswith("--")]
    assert "daemon" in paths
    image = (ROOT / "deploy" / "Containerfile").read_text()
    copied = [
        source
        for line in re.findall(r"^COPY (?!--from)(.+)$", image, re.M)
        for source in line.split()[:-1]
    ]
    missing = [p for p in paths if not any(p == c or p.startswith(f"{c}/") for c in copied)]
    assert missing == [], f"deploy/Containerfile does not COPY {missing}"


@pytest.mark.slow
def test_wheels_install_into_a_fresh_venv_as_documented(tmp_path: Path) -> None:
    """deploy/try-image-steps (the image's steps, offline: this environment's setuptools and
    Babel build the wheels), then what the README promises of the installed packages."""
    subprocess.run(
        [
            str(ROOT / "deploy" / "try-image-steps"),
            str(tmp_path),
            "--no-build-isolation",
            "--no-index",
        ],
        env={**os.environ, "PYTHON": sys.executable},
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert "== The combat is over ==" in (tmp_path / "demo.txt").read_text()
    venv = tmp_path / "venv" / "bin"
    python = str(venv / "python")

    listed = subprocess.run(
        [python, "-c", INSTALLED], capture_output=True, text=True, check=True, timeout=60
    )
    installed = json.loads(listed.stdout)
    ours = {name for name in installed if name.startswith("turnkeeper")}
    assert ours == {"turnkeeper", "turnkeeper-engine", "turnkeeper-sdk", *BUNDLED}
    assert "babel" not in installed
    for name in ours:
        meta = installed[name]
        assert meta["version"] == _changelog_release(), name
        assert meta["license"] == "MIT", name
        assert meta["licence_file"] == (ROOT / "LICENSE").read_text(), name
    assert {"surprise", "auto-reactions", "dnd3e-ready", "rulesets"} <= set(
        installed["turnkeeper"]["plugins"]
    )

    found = _translate(python)
    assert found["term"] == "padrão"
    assert found["catalogue"] > 100
    # The wheel's own compiled catalogue, not this checkout's.
    assert Path(found["mo"]).is_relative_to(tmp_path)
    assert Path(found["mo"]).is_file()
    assert found["babel"] == []

    # The wheel carries the Foundry module's zip: the installed daemon has no checkout to make
    # it from.
    assert list((tmp_path / "venv" / "lib").glob("*/site-packages/turnkeeper/foundry-*.zip"))
    _serve_as_the_image(venv, tmp_path)
    checked = _verify(_unit_for(venv / "turnkeeper", tmp_path))
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


INSTALLED = textwrap.dedent(
    """
    import json
    from importlib.metadata import distributions, entry_points

    found = {}
    for d in distributions():
        name = d.metadata["Name"].lower()
        licence = [f for f in d.files or () if f.parts[-2:] == ("licenses", "LICENSE")]
        found[name] = {
            "version": d.version,
            "license": d.metadata["License-Expression"],
            "licence_file": licence[0].read_text() if licence else None,
        }
    found["turnkeeper"]["plugins"] = [p.name for p in entry_points(group="turnkeeper.plugins")]
    print(json.dumps(found))
    """
)


def _serve_as_the_image(venv: Path, tmp_path: Path) -> None:
    """``turnkeeper serve`` with the image's environment (on this machine's loopback, in the
    test's directories): a TCP client says hello with a token, the table view and the Foundry
    module are served, and SIGTERM stops it cleanly."""
    tcp, http = free_port(), free_port()
    env = {
        **os.environ,
        **_image_environment(),
        "TURNKEEPER_DATA_DIR": str(tmp_path / "data"),
        "TURNKEEPER_SOCKET": str(tmp_path / "run" / "turnkeeper.sock"),
        "TURNKEEPER_TCP": f"127.0.0.1:{tcp}",
        "TURNKEEPER_HTTP": f"127.0.0.1:{http}",
    }
    added = subprocess.run(
        [str(venv / "turnkeeper"), "token", "add", "player", "--user", "alice"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=CALL_TIMEOUT,
    )
    secret = added.stdout.splitlines()[1]
    with (tmp_path / "serve.log").open("wb") as log:
        daemon = subprocess.Popen([str(venv / "turnkeeper"), "serve"], env=env, stderr=log)
    try:
        c = _connect_when_up(tcp)
        try:
            hello = c.hello(secret)
            assert hello["server"]["version"] == _changelog_release()
            assert hello["session"]["role"] == "player"
        finally:
            c.close()
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/", timeout=CALL_TIMEOUT) as page:
            assert page.status == 200
            assert b"<html" in page.read().lower()
        # Foundry installs the module from the daemon: the wheel's zip, as the checkout makes it.
        base = f"http://127.0.0.1:{http}/foundry"
        with urllib.request.urlopen(f"{base}/module.json", timeout=CALL_TIMEOUT) as answer:
            served = json.loads(answer.read())
        assert served["manifest"] == f"{base}/module.json"
        assert served["version"] == _changelog_release()
        with urllib.request.urlopen(served["download"], timeout=CALL_TIMEOUT) as answer:
            made = foundry.build(foundry.Sources.of(ROOT))
            assert answer.read() == foundry.Relocatable(made).at(f"{base}/")[0]
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=CALL_TIMEOUT) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


def _connect_when_up(port: int) -> Client:
    deadline = time.monotonic() + CALL_TIMEOUT
    while True:
        try:
            return Client.tcp(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_checkout_without_compiled_catalogues_says_how_to_compile_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(i18n, "LOCALE_DIR", tmp_path)
    i18n._translations.cache_clear()
    try:
        with pytest.raises(i18n.CatalogueMissingError, match=r"turnkeeper\.i18n compile"):
            i18n.gettext("pt-BR", "Round {n}")
        assert i18n.gettext("en", "Round {n}") == "Round {n}"
    finally:
        i18n._translations.cache_clear()
