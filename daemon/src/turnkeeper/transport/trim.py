"""Memory that closed connections freed, given back to the system.

A connection's buffers (its msgpack decoder, 41 KiB, and that decoder's 64 KiB buffer) are
under glibc's mmap threshold, so they come from its heap, and glibc returns heap memory to the
system only from the top, which the combats' long-lived values soon sit above: a hundred
connections closed would stay in the daemon's resident memory for good, free but held. glibc's
``malloc_trim`` gives back every free page wherever it is. It walks the whole heap (a few
milliseconds on the event loop at tens of megabytes), so it runs once a burst of closes is over
(``TRIM_DELAY``), never per command. Elsewhere than glibc there is nothing to call.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from functools import cache

TRIM_DELAY = 1.0
"""Seconds after a connection closes before the freed memory is given back: the closes of that
while share one trim, so a daemon whose clients come and go trims at most once a second."""


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up at the first close, not when the daemon starts:
    importing ctypes took a start ~6 ms of CPU on a 2-core EPYC (``bench/bench_startup.py``).
    It is found among the symbols the process has loaded (``CDLL(None)``, libc's among them),
    not by ``ctypes.util.find_library``, which runs ``ldconfig -p`` in a subprocess. Whatever
    stops the look-up means nothing to call: it runs in a connection's ``connection_lost``, where
    an exception would be logged at every close."""
    try:
        import ctypes

        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    # Not glibc (musl, macOS: no such symbol; Windows: no CDLL(None)), or no ctypes at all.
    except (ImportError, OSError, AttributeError, TypeError):
        return None
    return trim


_due: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
"""Loops with a trim already scheduled (the daemon has one; tests run many in turn)."""


def after_close(loop: asyncio.AbstractEventLoop) -> None:
    """A connection served on ``loop`` closed: give back what it freed, ``TRIM_DELAY`` from now
    unless a trim is already due then."""
    if loop in _due or loop.is_closed() or _malloc_trim() is None:
        return
    _due.add(loop)
    loop.call_later(TRIM_DELAY, _trim, loop)


def _trim(loop: asyncio.AbstractEventLoop) -> None:
    _due.discard(loop)
    trim = _malloc_trim()
    assert trim is not None
    trim(0)
