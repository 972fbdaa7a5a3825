"""Typed errors for everything read from or written to a store.

Each error carries the file and byte offset it is about, so `inspect verify` and the CLI can say
exactly where a store is damaged. The CLI maps these classes to exit codes.
"""
from __future__ import annotations


class StoreError(Exception):
    """Base class: something is wrong with a store or with access to it."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.offset = offset
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = f"{self.path}"
            if self.offset is not None:
                where += f" at offset {self.offset}"
            where += ": "
        return f"{where}{self.message}"


class CorruptStore(StoreError):
    """Bytes on disk contradict the format (base for the specific corruption kinds)."""


class BadMagic(CorruptStore):
    """A file does not start with the magic number its kind requires (foreign file)."""


class UnsupportedVersion(CorruptStore):
    """A format or header version this code does not read."""


class ChecksumMismatch(CorruptStore):
    """A CRC32C does not match the bytes it protects."""


class Truncated(CorruptStore):
    """A file is shorter than its committed length or than a structure inside it needs."""


class InvalidRecord(CorruptStore):
    """A record, entry or field fails validation (ranges, ids, pointers, counts)."""


class StoreNotFound(StoreError):
    """No store at the given path."""


class NotAStoreDirectory(StoreNotFound):
    """The store path is a file or a dangling or looping symlink, not a directory."""


class UnsafeStore(StoreError):
    """A store that must not be used: symlinks planted inside, wrong owner, foreign files."""


class LockTimeout(StoreError):
    """Another writer held the store lock for longer than the lock timeout."""


class StoreIOError(StoreError):
    """The operating system refused a read or write (disk full, permissions, ...)."""
