"""The 16-byte file header every log and index of the store starts with (docs/FORMAT.md s. 1).

    magic (8 bytes ASCII) | format version u16 | reserved u16 = 0 | CRC32C of bytes 0..12, u32

Checked in this order: length, magic, CRC, version, reserved. The CRC comes before the version
so that a damaged version field reads as damage (reported at offset 0, the header as a whole,
as for segment headers), and only an intact header with a newer version as "unsupported".
"""
from __future__ import annotations

import struct

from .crc32c import crc32c
from .errors import BadMagic, ChecksumMismatch, InvalidRecord, Truncated, UnsupportedVersion

SIZE = 16


def pack(magic: bytes, version: int = 1) -> bytes:
    head = struct.pack("<8sHH", magic, version, 0)
    return head + struct.pack("<I", crc32c(head))


def check(buf: bytes, magic: bytes, path, what: str, version: int = 1) -> None:
    """Raise a typed error naming `path` and the offset when `buf` is not a valid header."""
    path = str(path)
    if len(buf) < SIZE:
        raise Truncated(f"{what}: {len(buf)} bytes, shorter than its 16-byte file header",
                        path, len(buf))
    m, ver, reserved, stored = struct.unpack_from("<8sHHI", buf)
    if m != magic:
        raise BadMagic(f"not a {what} (magic {m!r}, expected {magic!r})", path, 0)
    if crc32c(bytes(buf[:12])) != stored:
        raise ChecksumMismatch(f"{what}: file header CRC32C does not match", path, 0)
    if ver != version:
        raise UnsupportedVersion(f"{what}: format version {ver}, this code reads {version}",
                                 path, 8)
    if reserved:
        raise InvalidRecord(f"{what}: file header reserved field is not zero", path, 10)
