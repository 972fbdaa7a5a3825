"""Where output goes: data to stdout (NDJSON via orjson, or a rich table on a terminal),
everything else to stderr. Nothing here decides *what* to print, only how.
"""
from __future__ import annotations

import io
import os
import sys
from typing import Any, Iterable

import orjson


class Out:
    """Output settings for one invocation (set by the top-level callback)."""

    quiet: bool = False
    json: bool = False

    @staticmethod
    def stdout_is_tty() -> bool:
        return sys.stdout.isatty()

    @staticmethod
    def stderr_is_tty() -> bool:
        return sys.stderr.isatty()

    @classmethod
    def want_table(cls) -> bool:
        """A rich table only for a person at a terminal who did not ask for JSON."""
        return not cls.json and cls.stdout_is_tty()


def _no_color() -> bool:
    return "NO_COLOR" in os.environ


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, no_color=_no_color(), highlight=False)


def stdout_console():
    from rich.console import Console

    return Console(no_color=_no_color(), highlight=False)


class StdoutClosed(Exception):
    """The reader of stdout went away (`synapse ... | head`): not an error, exit 0.

    Raised instead of BrokenPipeError because click turns an EPIPE OSError into exit 1."""


class StdoutFailed(Exception):
    """Writing stdout failed (`> /dev/full`): exit 74, saying that only the output is lost
    (every command commits its change to the store before it prints anything on stdout)."""


_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7f, 0xa0)] if chr(c) not in "\n\t"}


def shown(text: str) -> str:
    """`text` for a terminal: control characters as \\xNN (a stored ESC sequence would
    otherwise drive the reader's terminal: clear it, recolour it) and rich markup escaped
    ("[red]" is text, an unbalanced "[/]" no error). Memories come from anyone."""
    from rich.markup import escape

    return escape(text.translate(_CONTROL))


def _write(data: bytes) -> None:
    """`data` on stdout, all of it or an error: through the file descriptor, since the
    buffered writer drops the error of a write that a full disk cut short (its flush
    returns, the output is truncated, the exit would be 0)."""
    try:
        try:
            fd = sys.stdout.fileno()
        except (AttributeError, ValueError, io.UnsupportedOperation):  # captured (tests)
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            return
        sys.stdout.flush()  # what went through the buffered layers comes first
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError as exc:
        devnull = os.open(os.devnull, os.O_WRONLY)  # so the flush at exit cannot fail again
        os.dup2(devnull, sys.stdout.fileno())
        if isinstance(exc, BrokenPipeError):
            raise StdoutClosed() from None
        raise StdoutFailed(f"writing stdout: {exc.strerror or exc}") from None


def emit(obj: Any) -> None:
    """One JSON object on one line of stdout."""
    _write(dumps(obj) + b"\n")


def dumps(obj: Any) -> bytes:
    """`obj` as compact JSON (orjson; numpy values allowed)."""
    try:
        data = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY)
    except orjson.JSONEncodeError as exc:
        if "surrogates" in str(exc):  # a file name that is not UTF-8: escaped, "\udcff"
            import json

            return json.dumps(obj, separators=(",", ":"), default=_plain).encode("ascii")
        if "ecursion" not in str(exc):
            raise
        # orjson stops at 254 levels; records stored before ingest limited `meta` to 32
        # levels (engine/inputs.py) can be deeper, and must still be shown.
        # The payload's stdlib JSON wrote them, up to Python's recursion limit; the output
        # adds a level or two around the body.
        import json

        sys.setrecursionlimit(max(sys.getrecursionlimit(), 3000))
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return data


def _plain(value: Any) -> Any:
    """numpy scalars and arrays for the stdlib encoder (what orjson's numpy option takes)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def text(data: str) -> None:
    """Plain text on stdout (scripts, paths)."""
    _write(data.encode("utf-8", "surrogateescape"))  # a path that is not UTF-8: its bytes


def emit_all(objs: Iterable[Any]) -> None:
    for obj in objs:
        emit(obj)


def info(message: str) -> None:
    """A progress/summary message on stderr; silent with --quiet or when not on a terminal
    unless the caller says it matters (use `warn` for that)."""
    if not Out.quiet and Out.stderr_is_tty():
        stderr_console().print(message)


def warn(message: str) -> None:
    """Something the user must see even from cron (stderr, unless --quiet)."""
    if not Out.quiet:
        print(message, file=sys.stderr, flush=True)


def error(message: str, hint: str | None = None) -> None:
    print(f"synapse: error: {message}", file=sys.stderr, flush=True)
    if hint:
        print(f"hint: {hint}", file=sys.stderr, flush=True)
