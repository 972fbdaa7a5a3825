"""Durable file primitives: every write that the store acknowledges goes through here.

Appends are write + flush + fsync; replacements are temp file + fsync + rename + directory
fsync. OSError is turned into StoreIOError naming the file, so a full disk gives a clear message.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from .errors import StoreIOError

FILE_MODE = 0o600
DIR_MODE = 0o700


def _io_error(exc: OSError, path: os.PathLike | str) -> StoreIOError:
    reason = "disk full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    return StoreIOError(reason, path=str(path))


def fsync_dir(directory: os.PathLike | str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise _io_error(exc, directory) from exc


def atomic_replace(path: os.PathLike | str, data: bytes) -> None:
    """Replace `path` with `data` so that readers see the old or the new file, never a mix."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise _io_error(exc, path) from exc
    fsync_dir(path.parent)


def _write_all(fd: int, data: bytes | memoryview, offset: int | None = None) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view) if offset is None else os.pwrite(fd, view, offset)
        if offset is not None:
            offset += n
        view = view[n:]


def pwrite_all(fd: int, data: bytes, offset: int, path: os.PathLike | str) -> None:
    try:
        _write_all(fd, data, offset)
    except OSError as exc:
        raise _io_error(exc, path) from exc


def fsync_fd(fd: int, path: os.PathLike | str) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _io_error(exc, path) from exc


def open_for_append(path: os.PathLike | str, create: bool = False) -> int:
    """Open a store file read-write without following symlinks (a planted link is refused)."""
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        return os.open(path, flags, FILE_MODE)
    except OSError as exc:
        raise _io_error(exc, path) from exc


def truncate(fd: int, length: int, path: os.PathLike | str) -> None:
    try:
        os.ftruncate(fd, length)
    except OSError as exc:
        raise _io_error(exc, path) from exc


def read_bytes(path: os.PathLike | str) -> bytes:
    """The whole file; an OSError (a directory, no permission) is a StoreIOError naming it."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _io_error(exc, path) from None


def open_for_read(path: os.PathLike | str) -> int:
    """Open a store file read-only without following symlinks."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _io_error(exc, path) from exc


def file_sizes(directory: os.PathLike | str) -> dict[str, int]:
    """Name -> size of every regular file in `directory`. A file that vanishes between the
    listing and its stat (a writer's temp file, renamed by a concurrent commit) is left out."""
    sizes = {}
    with os.scandir(directory) as it:
        for entry in it:
            try:
                if entry.is_file(follow_symlinks=False):
                    sizes[entry.name] = entry.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                continue
    return sizes
