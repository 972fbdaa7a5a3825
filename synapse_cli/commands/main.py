"""The `synapse` command: global options, subcommand registration, error -> exit code.

Each subcommand lives in its own module and only parses, calls one engine function and renders.
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Optional

import typer

from .. import __version__
from . import common, exits, helpfmt, output

app = typer.Typer(
    name="synapse",
    help="Local episodic-semantic memory for LLM agents: ingest, consolidate, recall.\n\n"
         "Example: synapse --store ~/notes-memory inspect verify",
    add_completion=False,  # typer's --install-completion edits shell rc files: `completion` prints
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"synapse {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    store: Optional[str] = typer.Option(
        None, "--store", "-s", metavar="DIR",
        help="Store directory (default: $SYNAPSE_HOME, else $XDG_DATA_HOME/synapse).",
    ),
    lock_timeout: Optional[str] = typer.Option(
        None, "--lock-timeout", metavar="SECONDS", show_default=False,
        help="How long a writer waits for another writer before exiting 75 "
             "(default 30, or $SYNAPSE_LOCK_TIMEOUT).",
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No messages on stderr except "
                                                            "errors (also after the command)."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    common.Globals.store = store
    common.Globals.lock_timeout = None if lock_timeout is None else \
        common.seconds(lock_timeout, "--lock-timeout", usage=True)
    output.Out.quiet = quiet
    output.Out.json = False  # a command's --json sets it (common.JSON_OPTION)
    from ..engine.config import env_typos

    for name, known in env_typos():
        output.warn(f"synapse: ${name} is not a synapse variable (ignored); did you mean "
                    f"${known}?")


def _register() -> None:
    from . import (completion_cmd, config_cmd, consolidate_cmd, ingest_cmd, inspect_cmd, mark_cmd,
                   mcp_cmd, migrate_cmd, prune_cmd, recall_cmd)

    for module in (ingest_cmd, consolidate_cmd, recall_cmd, inspect_cmd, migrate_cmd, prune_cmd,
                   mark_cmd, mcp_cmd, config_cmd, completion_cmd):
        module.register(app)
    from . import export_cmd, import_cmd, list_cmd  # data in and out (issue 22)
    for module in (list_cmd, export_cmd, import_cmd):
        module.register(app)


_register()
helpfmt.tidy(app)


def _click_exception_types() -> tuple[tuple, tuple, tuple]:
    """(Exit, Abort, ClickException) classes as this typer raises them.

    typer >= 0.2x vendors its own click (`typer.Exit`, `typer.Abort`, and click exceptions
    derived from `typer.TyperException`), older typer raises the `click` package's classes:
    catch both, or a usage error would surface as an internal error with a traceback.
    """
    exit_types, abort_types, click_types = [typer.Exit], [typer.Abort], []
    if hasattr(typer, "TyperException"):
        click_types.append(typer.TyperException)
    try:
        import click
    except ImportError:
        pass
    else:
        exit_types.append(click.exceptions.Exit)
        abort_types.append(click.exceptions.Abort)
        click_types.append(click.ClickException)
    return tuple(exit_types), tuple(abort_types), tuple(click_types)


def _skip_numba_blas_probe() -> None:
    """numba imports scipy.linalg at import time (~0.3 s) only to see whether BLAS exists for
    np.dot in jitted code. No synapse kernel calls BLAS, and a shell tool's start-up budget is
    1 s, so the CLI process declines that import (never when scipy is already loaded)."""
    if "scipy" not in sys.modules:
        sys.modules.setdefault("scipy.linalg", None)


def completion_cmd_init() -> None:
    """A shell asking for completions (the script `synapse completion SHELL` prints sets
    _SYNAPSE_COMPLETE) is answered by typer's completion classes, which need registering."""
    if "_SYNAPSE_COMPLETE" in os.environ:
        from typer.completion import completion_init

        completion_init()


def _fill_closed_std_fds() -> None:
    """A standard stream closed by the shell (`synapse ... >&-`) becomes /dev/null: otherwise
    the next file synapse opens takes its descriptor, and a message meant for stderr would be
    written into that file; and Python's `print` sends text for a missing stderr to stdout."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: `fd` itself
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            if getattr(sys, name) is None:
                setattr(sys, name, open(fd, mode, closefd=False))


def _print_help(exc) -> None:
    """rich help is printed while the error is built, leaving it no message; plain click
    help is the message."""
    message = exc.format_message() if hasattr(exc, "format_message") else ""
    if message.strip():
        print(message, file=sys.stderr)


def _not_utf8(argv: list[str]) -> str | None:
    """The first argument with bytes that are not UTF-8 (Python holds them as lone surrogates,
    which no tokenizer, tag or JSON output accepts), shown with those bytes escaped; an
    existing file's path may have them. None when every argument is fine."""
    for arg in argv:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            value = arg.partition("=")[2] if arg.startswith("--") else arg  # --store=PATH
            if not os.path.lexists(value):
                return arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def _command_of(where: str, args: list[str]) -> str:
    """The command whose usage a click error is about: `where` (the context click gives), or
    `synapse COMMAND` when click blames the group for a subcommand's option (`synapse recall
    "-k"`: "Option '-k' requires an argument" came with the hint `synapse --help`)."""
    if where != "synapse":
        return where
    names = {c.name for c in app.registered_commands} | {g.name for g in app.registered_groups}
    return next((f"synapse {a}" for a in args if a in names), where)


def run(argv: list[str] | None = None) -> None:
    """Entry point: run the app and turn every outcome into an exit code."""
    _fill_closed_std_fds()
    _skip_numba_blas_probe()
    completion_cmd_init()
    bad = _not_utf8(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        output.error(f"argument \"{bad}\" is not valid UTF-8",
                     "pass text as UTF-8; a file name that is not UTF-8 works only as the path "
                     "of an existing file")
        sys.exit(exits.USAGE)
    exit_types, abort_types, click_types = _click_exception_types()
    try:
        rv = app(args=argv, standalone_mode=False, prog_name="synapse")
    except exit_types as exc:
        sys.exit(exc.exit_code)
    except abort_types:
        output.error("aborted")
        sys.exit(exits.INTERRUPTED)
    except click_types as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `synapse`: the help, exit 2
            _print_help(exc)
            sys.exit(exits.USAGE)
        # One line like every other error (README, Exit codes), not click's usage block.
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "synapse"
        where = _command_of(where, sys.argv[1:] if argv is None else argv)
        output.error(" ".join(message.split()), f"`{where} --help` shows the usage")
        code = getattr(exc, "exit_code", exits.USAGE)  # a UsageError's is 2 (exits.USAGE)
        sys.exit(code if isinstance(code, int) and code > 0 else exits.USAGE)
    except KeyboardInterrupt:
        output.error("interrupted")
        sys.exit(exits.INTERRUPTED)
    except (BrokenPipeError, output.StdoutClosed):
        sys.exit(0)  # `synapse recall ... | head` is not an error
    except output.StdoutFailed as exc:
        output.error(str(exc), "only the output was lost: commands write it after they commit, "
                               "so what they changed is in the store (`synapse inspect`)")
        sys.exit(exits.IOERR)
    except Exception as exc:  # noqa: BLE001 - the one place every error is classified
        code = exits.code_for(exc)
        if code == exits.INTERNAL:
            traceback.print_exc()
            output.error("internal error (a bug in synapse); please report it with the traceback above")
        elif code == exits.OSERR:
            output.error(f"out of memory{': ' + str(exc) if str(exc) else ''}",
                         exits.hint_for(exc))
        else:
            output.error(exits.message_for(exc), exits.hint_for(exc))
        sys.exit(code)
    sys.exit(rv if isinstance(rv, int) else 0)
