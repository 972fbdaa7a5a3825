"""Record flag byte (header offset 31), docs/FORMAT.md section 4.1.

The predicates use only `&`, `>>` and `!=`, so they work on a Python int and, element-wise,
on a uint8 array of flags (e.g. `reader.headers["flags"]`).
"""
from __future__ import annotations

from enum import IntEnum

TOMBSTONE = 1 << 0
MEMORY_TYPE_SHIFT = 1
MEMORY_TYPE_MASK = 0b11 << MEMORY_TYPE_SHIFT
TYPE_SHIFT, TYPE_MASK = MEMORY_TYPE_SHIFT, MEMORY_TYPE_MASK  # short aliases (engine/scoring.py)
CONSOLIDATED = 1 << 3
PINNED = 1 << 4
RESOLVED = 1 << 5  # 0 = unresolved (Zeigarnik: decay bucket clamped to 0), 1 = normal decay
RESERVED_MASK = 0b1100_0000  # bits 6-7, must be 0


class MemoryType(IntEnum):
    WORKING = 0
    EPISODIC = 1
    SEMANTIC = 2
    PROCEDURAL = 3


def make_flags(*, tombstone: bool = False, memory_type: int = MemoryType.WORKING,
               consolidated: bool = False, pinned: bool = False, resolved: bool = False) -> int:
    """Compose a flag byte; reserved bits are always 0."""
    return (
        (TOMBSTONE if tombstone else 0)
        | (MemoryType(memory_type) << MEMORY_TYPE_SHIFT)
        | (CONSOLIDATED if consolidated else 0)
        | (PINNED if pinned else 0)
        | (RESOLVED if resolved else 0)
    )


def decode_flags(flags: int) -> dict:
    """The named fields of a flag byte (for display and tests)."""
    return {
        "tombstone": is_tombstone(flags),
        "memory_type": memory_type(flags),
        "consolidated": is_consolidated(flags),
        "pinned": is_pinned(flags),
        "resolved": is_resolved(flags),
    }


def memory_type(flags: int) -> MemoryType:
    return MemoryType((int(flags) & MEMORY_TYPE_MASK) >> MEMORY_TYPE_SHIFT)


def memory_type_code(flags):
    """Memory type as a plain int / uint8 array (vectorised form of `memory_type`)."""
    return (flags & MEMORY_TYPE_MASK) >> MEMORY_TYPE_SHIFT


def with_memory_type(flags: int, mtype: int) -> int:
    return (int(flags) & ~MEMORY_TYPE_MASK & 0xFF) | (MemoryType(mtype) << MEMORY_TYPE_SHIFT)


def set_flag(flags: int, bit: int, on: bool = True) -> int:
    """Set or clear one of TOMBSTONE, CONSOLIDATED, PINNED, RESOLVED."""
    if bit not in (TOMBSTONE, CONSOLIDATED, PINNED, RESOLVED):
        raise ValueError(f"not a single-bit flag: {bit:#x}")
    return (int(flags) | bit) if on else (int(flags) & ~bit & 0xFF)


def is_tombstone(flags):
    return (flags & TOMBSTONE) != 0


def is_consolidated(flags):
    return (flags & CONSOLIDATED) != 0


def is_pinned(flags):
    return (flags & PINNED) != 0


def is_resolved(flags):
    return (flags & RESOLVED) != 0


def reserved_ok(flags):
    """True where bits 6-7 are zero (section 4 validation)."""
    return (flags & RESERVED_MASK) == 0
