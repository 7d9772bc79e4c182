"""Directories and files only the daemon's own user may touch: the data directory (every combat's
log, the remembered results, the tokens) and the Unix socket's directory.

A directory the daemon creates (with any missing parents) is created 0700. One that already
exists must be a directory owned by this user (a symlink to one is followed only if this user
owns the link too). If group or others may write in it, start-up is refused and it is left as
it is, since someone else may already have put or swapped a file there. If they may only read
or search it, it is tightened to 0700 (and the log says so) when it holds nothing but the
daemon's own files, as a directory an older daemon made does; one that holds other files was
chosen by the operator for more than Turnkeeper (``--data-dir .``, ``--socket ~/tk.sock``) and
is refused rather than chmodded under them. A file of the daemon's found looser than 0600 is
tightened, and the log says so.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path

import structlog

from turnkeeper_engine.errors import Arg, TemplatedError

PRIVATE_DIR = 0o700
"""Mode of a directory only its owner may list, enter or change."""

PRIVATE_FILE = 0o600
"""Mode of a file only its owner may read or write."""

MAX_PID_BYTES = 32
"""Most of a lock file read back for a refusal's message: a pid and its newline."""

log = structlog.get_logger("turnkeeper.private")


class LockHeldError(BlockingIOError):
    """Another process holds the lock; ``holder`` is the pid it wrote ("unknown" for the instant
    between its lock and its write)."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is locked by pid {holder}")
        self.holder = holder


class UnsafePathError(TemplatedError):
    """A directory other users could tamper with, refused; the message names it and says what
    to do (a template, as every error's)."""

    def __init__(self, template: str, **args: Arg) -> None:
        super().__init__(template, args)


def private_directory(path: Path, what: str, ours: Callable[[str], bool]) -> None:
    """Create ``path`` 0700 (and its missing parents) if it is missing; else check that no other
    user may change it, and tighten it to 0700 if others may read it and it holds only the
    daemon's files (``ours`` tells them by name). Raises ``UnsafePathError`` naming the
    directory and what is wrong. ``what`` says what it is for ("data directory"), in the log."""
    missing: list[Path] = []
    top = path
    while not os.path.lexists(top):
        missing.append(top)
        top = top.parent
    for directory in reversed(missing):
        directory.mkdir(mode=PRIVATE_DIR)
        # mkdir's mode is filtered by the umask, which may leave it looser or tighter.
        os.chmod(directory, PRIVATE_DIR)
    if missing:
        return
    uid = os.getuid()
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) and info.st_uid == uid:
        info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid:
        raise UnsafePathError(
            "{path} is not a directory owned by this user (uid {uid})", path=str(path), uid=uid
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafePathError(
            "{path} has mode {mode}: other users may write in it; check what it holds, then"
            " chmod go-w it, or choose another directory",
            path=str(path),
            mode=f"{mode:04o}",
        )
    # Only the group's and others' permissions: setgid or sticky bits let nobody read it.
    if not mode & 0o077:
        return
    if not all(ours(name) for name in os.listdir(path)):
        raise UnsafePathError(
            "{path} has mode {mode}: other users may read it, and it holds files that are not"
            " Turnkeeper's; give Turnkeeper a directory of its own, or chmod go-rwx it",
            path=str(path),
            mode=f"{mode:04o}",
        )
    os.chmod(path, mode & ~0o077)
    log.warning("permissions_tightened", path=str(path), what=what, was=f"{mode:04o}")


def private_file(path: Path, what: str, *, create: bool) -> None:
    """Tighten ``path`` to 0600 (saying so in the log) if it exists with a looser mode; with
    ``create``, create it empty with mode 0600 if it is missing (else a missing file is left so).

    SQLite gives a database's ``-wal`` and ``-shm`` files the mode of the database file, so
    creating that one 0600 before SQLite opens it makes all three private."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, PRIVATE_FILE)
    except FileNotFoundError:
        if create:
            raise
        return
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & ~PRIVATE_FILE:
            os.fchmod(fd, PRIVATE_FILE)
            log.warning("permissions_tightened", path=str(path), what=what, was=f"{mode:04o}")
    finally:
        os.close(fd)


def exclusive_lock(path: Path) -> int:
    """Lock ``path`` (created 0600 if missing) for this process alone and write its pid in it.

    Returns the file descriptor: the lock lasts until it is closed, or the process ends however
    it ends (``flock``), so a killed daemon leaves nothing to clean up. Raises ``LockHeldError``
    naming the holder's pid if another process has it, ``OSError`` if it cannot be taken.
    """
    private_file(path, "lock file", create=True)
    fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, MAX_PID_BYTES, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LockHeldError(path, holder) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_FILE",
    "LockHeldError",
    "UnsafePathError",
    "exclusive_lock",
    "private_directory",
    "private_file",
]
