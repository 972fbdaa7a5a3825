"""Checks of the Python API's arguments (the CLI's flags are typed by typer): a wrong type or
value is a `ConfigError` naming the argument, never coerced (`ids=[1.9]` is not record 1,
`match="ALL"` is not "any", `pin="no"` does not pin) and never a TypeError from deep inside."""
from __future__ import annotations

import math
import numbers
from typing import Iterable

from .config import ConfigError
from .inputs import MAX_TIMESTAMP_MS


def _bad(name: str, value, expected: str) -> ConfigError:
    return ConfigError(f"{name}={value!r}: expected {expected}", usage=True)


def record_id(value, name: str = "id") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise _bad(name, value, "a record id (an integer >= 1)")
    return int(value)


def integer(value, name: str, lo: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or (lo is not None and value < lo):
        raise _bad(name, value, "an integer" + (f" >= {lo}" if lo is not None else ""))
    return int(value)


def record_ids(value, name: str = "ids") -> list[int]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise _bad(name, value, "a list of record ids")
    return [record_id(v, name) for v in value]


def strings(value, name: str) -> tuple[str, ...]:
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Iterable):
        raise _bad(name, value, "a list of strings")
    out = tuple(value)
    if not all(isinstance(v, str) for v in out):
        raise _bad(name, value, "a list of strings")
    return out


def tags(value, name: str = "tags") -> tuple[str, ...]:
    """A tag filter: a list of non-empty tags of valid text (inputs._text: no NUL, no lone
    surrogate), none a bare "speaker:", "session:" or "source:" nor longer than any record's
    tag can be (inputs.MAX_TAG, plus the prefix for those): such a filter would match nothing."""
    from store_format.tags import normalize_tag

    from .inputs import MAX_TAG, RESERVED_TAG_PREFIXES, InputError, _text, invisible_char

    out = strings(value, name)
    for t in out:
        try:
            _text(t, name, name)
        except InputError as exc:
            raise ConfigError(f"{name} {t!r}: {exc.reason}", usage=True) from None
        if bad := invisible_char(t):  # ingest refuses such a tag: it would match nothing
            raise ConfigError(f"{name} {t!r}: holds an invisible character ({bad})", usage=True)
        norm = normalize_tag(t)
        if not norm:
            raise ConfigError(f"{name}: empty tag", usage=True)
        if norm in RESERVED_TAG_PREFIXES:
            raise ConfigError(f"{name} {t!r}: no name after the colon", usage=True)
        prefix = next((p for p in RESERVED_TAG_PREFIXES if norm.startswith(p)), "")
        if len(t) > MAX_TAG + len(prefix):
            raise ConfigError(f"{name}: a tag of {len(t)} characters (at most "
                              f"{MAX_TAG + len(prefix)}: no record carries a longer one)",
                              usage=True)
    return out


def seconds(value, name: str) -> float:
    """A wait in seconds: a number >= 0, infinity included (wait for ever)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0:
        raise _bad(name, value, "seconds >= 0")
    return float(value)


def flag(value, name: str, optional: bool = False) -> bool | None:
    if (value is None and optional) or isinstance(value, bool):
        return value
    raise _bad(name, value, "True or False" + (" or None" if optional else ""))


def real(value, name: str, lo: float | None = None, hi: float | None = None,
         optional: bool = True) -> float | None:
    """A finite number within [lo, hi], or None when `optional`."""
    if value is None and optional:
        return None
    if value is None or isinstance(value, bool) or not isinstance(value, numbers.Real) \
            or not math.isfinite(value) or (lo is not None and value < lo) \
            or (hi is not None and value > hi):
        bounds = (f" from {lo:g} to {hi:g}" if lo is not None and hi is not None
                  else f" >= {lo:g}" if lo is not None else f" <= {hi:g}" if hi is not None
                  else "")
        raise _bad(name, value, "a finite number" + bounds)
    return float(value)


def epoch_ms(value, name: str) -> int | None:
    """None, or a time as integer epoch milliseconds (1970 .. 9999)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
            or not 0 <= value <= MAX_TIMESTAMP_MS:
        raise _bad(name, value, "epoch milliseconds, an integer from 0 to year 9999 "
                                "(engine.inputs.parse_timestamp reads ISO 8601 text)")
    return int(value)


def choice(value, name: str, options: tuple[str, ...]) -> str:
    if value not in options:
        raise _bad(name, value, " or ".join(repr(o) for o in options))
    return value
