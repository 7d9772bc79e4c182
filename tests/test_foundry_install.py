"""A Foundry user installs the module from the daemon: Install Module takes
``http://HOST:PORT/foundry/module.json``, whose ``download`` names the zip on the same daemon.

A real daemon subprocess and real HTTP requests. This checkout's daemon is an editable install,
so it makes the zip from the checkout (``turnkeeper.foundry.Release``); the wheel's own zip is
checked in test_packaging.py, where the built wheels are installed and served.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from daemon import CALL_TIMEOUT, Daemon, running
from turnkeeper import foundry
from turnkeeper.transport.foundry import RELOCATED

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "docs" / "examples" / "foundry-turnkeeper"
CHECKOUT_MANIFEST: dict[str, Any] = json.loads((MODULE / "module.json").read_text("utf-8"))
ZIP = f"/foundry/{CHECKOUT_MANIFEST['id']}.zip"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``--ws`` alone: a Foundry user needs the WebSocket, not the table view, and installs from
    the same listener."""
    with running(tmp_path_factory.mktemp("foundry"), ws=True) as d:
        yield d


def _http(
    port: int, path: str, host: bytes | None, method: bytes = b"GET"
) -> tuple[int, dict[bytes, bytes], bytes]:
    """The status, headers and body the listener answers to a request with exactly this Host
    header (none if None), sent as it is: http.client would refuse some of the hostile ones."""
    head = b"%s %s HTTP/1.1\r\n" % (method, path.encode())
    if host is not None:
        head += b"Host: " + host + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=CALL_TIMEOUT) as s:
        s.sendall(head + b"Connection: close\r\n\r\n")
        answer = b""
        # The listener closes the connection after its answer: read to the end.
        while chunk := s.recv(65536):
            answer += chunk
    top, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = top.split(b"\r\n")
    headers = dict(line.lower().split(b": ", 1) for line in lines)
    return int(status.split()[1]), headers, body


def _manifest(port: int, host: bytes | None) -> dict[str, Any]:
    status, headers, body = _http(port, "/foundry/module.json", host)
    assert (status, headers[b"content-type"]) == (200, b"application/json")
    found: dict[str, Any] = json.loads(body)
    return found


def _installed(port: int, host: bytes | None) -> dict[str, Any]:
    """The module.json inside the zip, fetched with this Host header."""
    status, headers, body = _http(port, ZIP, host)
    assert (status, headers[b"content-type"]) == (200, b"application/zip")
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        assert archive.testzip() is None
        found: dict[str, Any] = json.loads(archive.read("module.json"))
    return found


def test_the_manifest_points_back_at_the_daemon_and_the_zip_installs(daemon: Daemon) -> None:
    port = daemon.ws_port
    base = f"http://127.0.0.1:{port}/foundry"
    with urllib.request.urlopen(f"{base}/module.json", timeout=CALL_TIMEOUT) as answer:
        assert answer.headers["content-type"] == "application/json"
        served = json.loads(answer.read())
    # Foundry reads the manifest at `manifest` for updates and fetches the zip from `download`.
    assert served["manifest"] == f"{base}/module.json"
    assert served["download"] == f"{base}/{CHECKOUT_MANIFEST['id']}.zip"
    rest = {k: v for k, v in served.items() if k not in ("manifest", "download")}
    assert rest == {k: v for k, v in CHECKOUT_MANIFEST.items() if k not in ("manifest", "download")}

    with urllib.request.urlopen(served["download"], timeout=CALL_TIMEOUT) as answer:
        assert answer.headers["content-type"] == "application/zip"
        data = answer.read()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        names = set(archive.namelist())
        installed = json.loads(archive.read("module.json"))
        licence = archive.read("LICENSE").decode()
    # The installed copy's module.json is the manifest it was installed from: Foundry looks for
    # updates at the installed copy's `manifest`, which must be the daemon's, never the
    # placeholder release host.
    assert installed == served
    assert licence == (ROOT / "LICENSE").read_text()
    assert {
        "module.json",
        "LICENSE",
        *served["esmodules"],
        *(language["path"] for language in served["languages"]),
        "lib/turnkeeper/index.js",
        "lib/msgpack/index.mjs",
    } <= names
    assert {n.split("/")[0] for n in names} == {
        "module.json",
        "LICENSE",
        "README.md",
        "scripts",
        "lang",
        "lib",
    }


@pytest.mark.parametrize(
    "host",
    [
        b'evil.example/foundry/module.json", "esmodules": ["https://evil.example/x.js"], "x": "',
        b"evil.example/x.zip?",
        b"evil.example:80@127.0.0.1",
        b"user@evil.example",
        b"evil.example:7617:1",
        b"evil.example:99999",
        b"evil example",
        b"[::1",
        b"[evil.example]:80",
        b"-evil.example",
        b"\xc3\xa9vil.example",
        b"",
    ],
)
def test_a_hostile_host_header_is_never_reflected(daemon: Daemon, host: bytes) -> None:
    """Only a plain ``host[:port]`` names the address; anything else gives the listener's own,
    in the manifest and in the zip's module.json alike."""
    manifest = _manifest(daemon.ws_port, host)
    assert manifest["manifest"] == f"http://127.0.0.1:{daemon.ws_port}/foundry/module.json"
    assert manifest["download"] == f"http://127.0.0.1:{daemon.ws_port}{ZIP}"
    assert manifest["esmodules"] == CHECKOUT_MANIFEST["esmodules"]
    assert b"evil" not in json.dumps(manifest).encode()
    assert _installed(daemon.ws_port, host) == manifest


@pytest.mark.parametrize(
    "host",
    [b"turnkeeper.lan:7617", b"gm-laptop", b"192.168.1.20:7617", b"[::1]:7617", b"[fe80::1]"],
)
def test_a_plain_host_header_names_the_address_foundry_reached(daemon: Daemon, host: bytes) -> None:
    manifest = _manifest(daemon.ws_port, host)
    assert manifest["manifest"] == f"http://{host.decode()}/foundry/module.json"
    assert manifest["download"] == f"http://{host.decode()}{ZIP}"
    assert _installed(daemon.ws_port, host) == manifest


def test_each_address_s_zip_names_that_address(daemon: Daemon) -> None:
    """More addresses than the daemon keeps zips for, each asked twice: every zip names the
    address it was fetched from, whichever copies were dropped in between."""
    hosts = [b"host%d.lan:7617" % n for n in range(RELOCATED + 3)]
    for host in hosts + hosts[::-1]:
        assert _installed(daemon.ws_port, host)["manifest"] == (
            f"http://{host.decode()}/foundry/module.json"
        )


def test_without_a_host_header_the_listener_names_itself(daemon: Daemon) -> None:
    # HTTP/1.1 needs a Host: HTTP/1.0 is how a client leaves it out.
    head = b"GET /foundry/module.json HTTP/1.0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", daemon.ws_port), timeout=CALL_TIMEOUT) as s:
        s.sendall(head)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200")
    manifest = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert manifest["manifest"] == f"http://127.0.0.1:{daemon.ws_port}/foundry/module.json"


def test_head_answers_the_headers_of_get_without_the_body(daemon: Daemon) -> None:
    host = b"127.0.0.1:%d" % daemon.ws_port
    for path in ("/foundry/module.json", ZIP):
        status, headers, body = _http(daemon.ws_port, path, host)
        head_status, head_headers, head_body = _http(daemon.ws_port, path, host, b"HEAD")
        assert (status, head_status) == (200, 200)
        assert body
        assert head_headers[b"content-length"] == b"%d" % len(body)
        assert head_headers[b"content-type"] == headers[b"content-type"]
        assert head_body == b""


@pytest.mark.parametrize(
    "path",
    [
        "/foundry/",
        "/foundry/module",
        "/foundry/lib/turnkeeper/index.js",
        "/foundry/../module.json",
        "/foundry/other-module.zip",
        "/foundry/module.json/",
    ],
)
def test_any_other_foundry_path_is_not_found(daemon: Daemon, path: str) -> None:
    status, _, _ = _http(daemon.ws_port, path, b"127.0.0.1:%d" % daemon.ws_port)
    assert status == 404


def test_the_table_view_s_listener_serves_the_module_too(tmp_path: Path) -> None:
    with running(tmp_path, http=True) as d:
        host = b"127.0.0.1:%d" % d.ws_port
        assert _manifest(d.ws_port, host)["id"] == CHECKOUT_MANIFEST["id"]
        assert _http(d.ws_port, ZIP, host)[0] == 200
        assert _http(d.ws_port, "/", host)[0] == 200


def _checkout_copy(tmp_path: Path) -> Path:
    """The zip's sources, in a checkout's layout, to change without touching this one."""
    sources = foundry.Sources.of(ROOT)
    copy = foundry.Sources.of(tmp_path)
    shutil.copytree(sources.module, copy.module, ignore=shutil.ignore_patterns("lib", "test*"))
    shutil.copytree(sources.client, copy.client)
    shutil.copytree(sources.msgpack, copy.msgpack)
    return tmp_path


def test_a_checkout_s_zip_follows_its_sources(tmp_path: Path) -> None:
    """An editable install has no packaged zip: it makes one from the checkout, and makes it
    again once a source changes or a file is added, never serving a stale copy."""
    root = _checkout_copy(tmp_path)
    release = foundry.Release(packaged=tmp_path / "none.zip", checkout=root)
    first = release.current()
    assert first is not None
    assert release.current() is first
    module = foundry.Sources.of(root).module
    (module / "lang" / "en.json").write_text('{"changed": true}\n')
    second = release.current()
    assert second is not None
    assert second != first
    with zipfile.ZipFile(io.BytesIO(second)) as archive:
        assert json.loads(archive.read("lang/en.json")) == {"changed": True}
    (module / "scripts" / "extra.js").write_text("export {};\n")
    third = release.current()
    assert third is not None
    assert "scripts/extra.js" in zipfile.ZipFile(io.BytesIO(third)).namelist()


def test_a_packaged_zip_is_served_as_it_is(tmp_path: Path) -> None:
    packaged = tmp_path / "foundry-turnkeeper.zip"
    packaged.write_bytes(foundry.build(foundry.Sources.of(ROOT)))
    release = foundry.Release(packaged=packaged, checkout=tmp_path / "no-checkout")
    assert release.current() == packaged.read_bytes()
    assert foundry.Release(packaged=tmp_path / "none", checkout=tmp_path).current() is None


def test_the_same_sources_make_the_same_bytes(tmp_path: Path) -> None:
    """Whenever and from whichever copy they are built: the files' times and the clock are not
    in the zip (the zip format keeps times to 2 s, so two builds in a row would not tell)."""
    sources = foundry.Sources.of(_checkout_copy(tmp_path))
    made = []
    for when in (315_532_800, 1_700_000_000):  # 1980-01-01, 2023-11-14
        for _, path in sources.inputs():
            os.utime(path, (when, when))
        made.append(foundry.build(sources))
    assert made[0] == made[1] == foundry.build(foundry.Sources.of(ROOT))
    with zipfile.ZipFile(io.BytesIO(made[0])) as archive:
        assert {info.date_time for info in archive.infolist()} == {foundry.EPOCH}


def test_sources_that_cannot_make_the_module_say_why(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path)
    sources = foundry.Sources.of(root)
    manifest = json.loads((sources.module / "module.json").read_text("utf-8"))
    manifest["download"] = "https://turnkeeper.invalid/other.zip"
    (sources.module / "module.json").write_text(json.dumps(manifest))
    with pytest.raises(
        foundry.BuildError, match=r"download must end with /foundry-turnkeeper\.zip"
    ):
        foundry.build(sources)
    (sources.module / "LICENSE").unlink()
    with pytest.raises(foundry.BuildError, match="LICENSE"):
        foundry.build(sources)


def test_lib_replaces_only_the_client_in_the_module_s_own_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m turnkeeper.foundry lib DIR`` refuses a folder that is not the module's, and in
    the module's own replaces lib/turnkeeper and lib/msgpack, nothing else of lib/."""
    stranger = tmp_path / "project"
    (stranger / "lib").mkdir(parents=True)
    (stranger / "lib" / "precious.txt").write_text("keep me")
    other = tmp_path / "other-module"
    (other / "lib" / "turnkeeper").mkdir(parents=True)
    (other / "lib" / "turnkeeper" / "theirs.js").write_text("keep me")
    (other / "module.json").write_text(json.dumps({"id": "other-module"}))
    for folder in (stranger, other, tmp_path / "missing"):
        assert foundry.main(["lib", str(folder)]) == 1
        assert "nothing changed" in capsys.readouterr().err
    assert (stranger / "lib" / "precious.txt").read_text() == "keep me"
    assert (other / "lib" / "turnkeeper" / "theirs.js").read_text() == "keep me"

    module = tmp_path / "modules" / CHECKOUT_MANIFEST["id"]
    module.mkdir(parents=True)
    shutil.copy(MODULE / "module.json", module / "module.json")
    (module / "lib" / "turnkeeper").mkdir(parents=True)
    (module / "lib" / "turnkeeper" / "stale.js").write_text("from an older client")
    (module / "lib" / "mine").mkdir()
    (module / "lib" / "mine" / "helper.js").write_text("keep me")
    assert foundry.main(["lib", str(module)]) == 0
    assert not (module / "lib" / "turnkeeper" / "stale.js").exists()
    assert (module / "lib" / "turnkeeper" / "index.js").is_file()
    assert (module / "lib" / "msgpack" / "index.mjs").is_file()
    assert (module / "lib" / "mine" / "helper.js").read_text() == "keep me"
