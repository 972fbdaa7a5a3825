"""`synapse export`: the whole store as portable JSON lines (docs/FORMAT.md section 17)."""
from __future__ import annotations

from typing import Optional

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, store_path


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE",
                                      help="Write to FILE (atomically: complete or absent) "
                                           "instead of stdout."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Write the whole store as portable JSON lines, to stdout or a file.

    A header (format version, embedder, counts), then every record with its text, metadata,
    flags and counts (semantic nodes included), then every graph edge. No vectors: `synapse
    import` embeds again with the new store's model (docs/FORMAT.md 17).

    Example: synapse export --out memory.jsonl
    """
    from .. import api

    counts = api.export(out if out not in (None, "-") else None, store_path())
    if out not in (None, "-"):
        summary = {"out": out, **counts}
        if json:
            output.emit(summary)
        else:
            output.info(f"exported {counts['records']} records ({counts['nodes']} nodes) and "
                        f"{counts['edges']} edges to {out}")
