"""The Foundry VTT module, installable from the daemon's HTTP listener: Foundry's Install Module
takes ``http://HOST:PORT/foundry/module.json``, reads ``download`` there and fetches the zip.

The manifest is the zip's own ``module.json`` with ``manifest`` and ``download`` pointing back at
the address the request reached, so that the project needs no public host: a Foundry server that
reaches the daemon installs from it, and finds updates there. The zip served holds that same
``module.json``: Foundry reads ``manifest`` from the copy it installed when it looks for updates.
"""

from __future__ import annotations

import ipaddress
import re
from functools import cache, lru_cache

import structlog

from .. import foundry
from .channel import Channel

log = structlog.get_logger("turnkeeper.foundry")

PREFIX = "/foundry/"
RELOCATED = 8
"""How many addresses' copies of the zip are kept: a daemon is reached by one or two (its name,
its IP address); a client cycling Host headers costs a rebuild of one small zip per request,
never memory; the copy is cheap (``foundry.Relocatable``)."""
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST = re.compile(
    rf"(?:{_LABEL}(?:\.{_LABEL})*|\[(?P<ip6>[0-9A-Fa-f:.]+)\])(?::(?P<port>[0-9]{{1,5}}))?"
)
"""``host[:port]`` and nothing else: a DNS name or IPv4 address, or an IPv6 one in brackets."""


@cache
def _release() -> foundry.Release:
    return foundry.Release()


@lru_cache(maxsize=1)
def _relocatable(release: bytes) -> foundry.Relocatable:
    # An editable install makes a new zip when its sources change: the latest one only.
    return foundry.Relocatable(release)


@lru_cache(maxsize=RELOCATED)
def _relocated(release: bytes, base: str) -> tuple[bytes, bytes]:
    """The zip pointing at ``base``, and its module.json, which is the manifest served."""
    return _relocatable(release).at(base)


def answer(path: str, host: bytes | None, channel: Channel) -> tuple[bytes, str] | None:
    """The body and type of ``GET PREFIX...``: the manifest, pointing at ``host`` (the request's
    Host header) or, when that is not a plain ``host[:port]``, at the address the connection
    reached; the zip, whose module.json is that manifest; None for any other name, or when this
    install has no module."""
    try:
        release = _release().current()
    except foundry.BuildError as e:
        log.error("foundry_module_unbuildable", error=str(e))
        return None
    if release is None:
        return None
    name = path.removeprefix(PREFIX)
    if name not in (foundry.MANIFEST, f"{_relocatable(release).manifest['id']}.zip"):
        return None
    assert channel.transport is not None
    local = channel.transport.get_extra_info("sockname")
    base = f"http://{_authority(host, (local[0], local[1]))}{PREFIX}"
    made, manifest = _relocated(release, base)
    if name == foundry.MANIFEST:
        return manifest, "application/json"
    return made, "application/zip"


def _authority(host: bytes | None, local: tuple[str, int]) -> str:
    """``host`` if it is a valid ``host[:port]``, else the listener's own address: a Host header
    is the client's to write, and nothing else of it may reach the manifest."""
    text = host.decode("ascii", "replace") if host else ""
    found = _HOST.fullmatch(text)
    if found is not None and int(found["port"] or 80) <= 65535:
        try:
            if found["ip6"] is not None:
                ipaddress.IPv6Address(found["ip6"])
            return text
        except ValueError:
            pass
    address, port = local
    # A link-local IPv6 address carries its zone after "%", which a URL writes "%25".
    return f"[{address.replace('%', '%25')}]:{port}" if ":" in address else f"{address}:{port}"
