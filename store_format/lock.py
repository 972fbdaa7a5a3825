"""The single-writer lock: flock(LOCK_EX) on `<store>/LOCK` (docs/FORMAT.md section 8).

Only writers lock; readers never block. flock is tied to the open file description, so the lock
is released by the kernel when the holder exits, even after kill -9: there is no stale lock file
to clean up. A writer must re-read the manifest after acquiring the lock.
"""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from pathlib import Path

from .errors import LockTimeout, StoreIOError, StoreNotFound, UnsafeStore
from .fileio import FILE_MODE

LOCK_NAME = "LOCK"
POLL_SECONDS = 0.05


class WriterLock:
    """Context manager holding the store's writer lock.

    Parameters
    ----------
    store_dir
        The store directory (must exist).
    timeout_seconds
        How long to wait for another writer; 0 tries once.
    poll_seconds
        Sleep between attempts. flock has no timed wait, so we poll with LOCK_NB.

    Attributes
    ----------
    waited_seconds : float
        How long acquiring took (also set on the LockTimeout raised when it fails).

    Notes
    -----
    Two WriterLocks on the same store in one process exclude each other too (separate open
    file descriptions), so do not nest them.
    """

    def __init__(self, store_dir: str | os.PathLike, timeout_seconds: float,
                 poll_seconds: float = POLL_SECONDS):
        self.path = Path(store_dir) / LOCK_NAME
        self.timeout_seconds = max(0.0, float(timeout_seconds))
        self.poll_seconds = poll_seconds
        self.waited_seconds = 0.0
        self._fd: int | None = None

    def acquire(self) -> WriterLock:
        if self._fd is not None:
            raise RuntimeError("WriterLock is already held")
        fd = self._open()
        start = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                except OSError as exc:
                    raise StoreIOError(f"flock failed: {exc.strerror}", str(self.path)) from None
                waited = time.monotonic() - start
                if waited >= self.timeout_seconds:
                    self.waited_seconds = waited
                    raise self._timeout(fd, waited)
                time.sleep(min(self.poll_seconds, self.timeout_seconds - waited))
        except BaseException:
            os.close(fd)
            raise
        self.waited_seconds = time.monotonic() - start
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> WriterLock:
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()

    def _open(self) -> int:
        if not self.path.parent.is_dir():
            raise StoreNotFound("no store directory here", str(self.path.parent))
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            if os.path.islink(self.path):
                raise UnsafeStore("LOCK is a symlink; refusing to follow it", str(self.path)) from None
            err = StoreIOError(exc.strerror or str(exc), str(self.path))
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                # the LOCK file itself may be what is read-only (the directory writable)
                what = ("its LOCK file (chmod u+w LOCK)"
                        if exc.errno != errno.EROFS and os.path.exists(self.path)
                        and os.access(self.path.parent, os.W_OK) else "its directory")
                err.hint = (f"the store is read-only here: writing needs write access to "
                            f"{what}; recall, inspect and --dry-run only read")
            raise err from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UnsafeStore("LOCK is not a regular file", str(self.path))
        return fd

    def _timeout(self, fd: int, waited: float) -> LockTimeout:
        holder = _holder_description(fd)
        exc = LockTimeout(
            f"another synapse writer{holder} holds the store lock; waited {waited:.1f} s "
            f"(lock timeout {self.timeout_seconds:g} s). Wait for that command to finish, "
            f"or retry with a longer --lock-timeout.",
            str(self.path),
        )
        exc.waited_seconds = waited
        return exc


def _holder_description(fd: int) -> str:
    """' (pid N: command)' for the process holding the flock, from /proc/locks; '' if unknown.

    Best effort and Linux only: it just makes the timeout message say what to wait for.
    """
    try:
        st = os.fstat(fd)
        want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; blocked waiters are marked "->".
        if len(parts) < 6 or parts[1] != "FLOCK" or "->" in parts:
            continue
        try:
            pid = int(parts[4])
            major, minor, inode = parts[5].split(":")
            found = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if found != want or pid <= 0:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                # Whitespace collapsed: an argument may hold newlines (`python -c "..."`),
                # and the message this goes into is one line.
                cmd = " ".join(f.read().replace(b"\0", b" ").decode(errors="replace").split())
        except OSError:
            cmd = ""
        if len(cmd) > 120:
            cmd = cmd[:117] + "..."
        return f" (pid {pid}: {cmd})" if cmd else f" (pid {pid})"
    return ""
