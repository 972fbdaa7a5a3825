"""`synapse import`: read an export into a new or empty store, embedding with its model."""
from __future__ import annotations

from typing import Optional

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, confirm_destructive, lock_timeout, store_path
from .exits import NOINPUT, UserError, code_for


def register(app: typer.Typer) -> None:
    app.command("import")(import_)


class _Progress:
    """A bar on stderr (terminal only), told (done, total) as records are embedded."""

    def __init__(self):
        self.bar = None
        if output.Out.quiet or not output.Out.stderr_is_tty():
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.bar = Progress("importing", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=output.stderr_console(), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("", total=None)

    def __call__(self, done: int, total: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done, total=total)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def import_(
    file: str = typer.Argument("-", metavar="FILE|-", help="The export; '-' reads stdin."),
    embedder: Optional[str] = typer.Option(
        None, "--embedder", metavar="DIR",
        help="Embedding model directory (sentence-transformers layout) for the new store "
             "(default: $SYNAPSE_EMBED_MODEL_DIR, else the packaged all-MiniLM-L6-v2)."),
    header_version: int = typer.Option(3, "--header-version", min=1, max=3, metavar="1|2|3",
                                       help="Record header layout of the new store (1, 2, 3)."),
    yes: bool = typer.Option(False, "--yes", "-y",
                             help="Confirm a header version that drops fields the export "
                                  "holds (v1: arousal, storage strength), as migrate asks."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Read an export into a new or empty store, embedding with the store's model.

    Records and semantic nodes are embedded again; ids, flags, counts and graph edges are kept
    exactly. The whole export is checked first: a malformed or truncated one exits 65 naming
    the line and writes nothing. Prints a JSON summary.

    Example: synapse --store ~/new-memory import --embedder ~/models/all-mpnet-base-v2 memory.jsonl
    """
    from .. import api

    progress = _Progress()
    try:
        result = api.import_store(file, store_path(), embedder_dir=embedder,
                                  header_version=header_version, lock_timeout=lock_timeout(),
                                  progress=progress,
                                  confirm=lambda what: (progress.stop(),
                                                        confirm_destructive(what, yes)))
    except FileNotFoundError as exc:  # the export, or --embedder DIR
        where = f"{file}: no such file" if exc.filename == file else str(exc)
        raise UserError(where, code=NOINPUT) from None
    except api.InputError as exc:
        raise UserError(str(exc), code=code_for(exc),
                        hint=getattr(exc, "hint", None) or "nothing was imported") from None
    finally:
        progress.stop()
    if not output.Out.want_table():
        output.emit(result)
    else:
        output.stdout_console().print(
            f"imported {result['records']} records ({result['nodes']} nodes) and "
            f"{result['edges']} edges into {result['store']} with {result['embedder']} "
            f"in {result['seconds']:.1f}s")
