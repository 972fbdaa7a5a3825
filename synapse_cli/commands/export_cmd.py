"""`synapse export`: the whole store as portable JSON lines (docs/FORMAT.md section 17)."""
from __future__ import annotations

import os
from typing import Optional

import orjson
import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, store_path
from .exits import UserError


def register(app: typer.Typer) -> None:
    app.command("export")(export)


def export(
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="FILE",
                                      help="Write to FILE (atomically: complete or absent) "
                                           "instead of stdout."),
    skip_damaged: bool = typer.Option(False, "--skip-damaged",
                                      help="Leave out records that fail their checksum (and "
                                           "the edges that touch them), naming each on stderr: "
                                           "rescue what is intact, then import it."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Write the whole store as portable JSON lines, to stdout or a file.

    A header (format version, embedder, counts), then every record with its text, metadata,
    flags and counts (semantic nodes included), then every graph edge. No vectors: `synapse
    import` embeds again with the new store's model (docs/FORMAT.md 17).

    A damaged store (`synapse inspect verify` exits 1) is exported with --skip-damaged:
    every record that passes its checks, and the ids of those that did not; a lost index is
    not needed, a lost graph, spike log or dormancy file is left out and named.

    Example: synapse export --out memory.jsonl
    """
    from store_format.errors import CorruptStore

    from .. import api

    try:
        counts = api.export(out if out not in (None, "-") else _Stdout(), store_path(),
                            skip_damaged=skip_damaged)
    except CorruptStore as exc:
        if skip_damaged:  # the rescue itself failed: what it cannot read is the MANIFEST
            raise UserError(str(exc), hint="the MANIFEST says which files hold the records; "
                                           "restore it (or the store) from a backup") from None
        raise UserError(str(exc), hint="`synapse export --skip-damaged` exports every intact "
                                       "record; `synapse import` makes a new store of them")
    skipped = counts.pop("skipped", [])
    for s in skipped:
        output.warn(f"skipped a damaged record (id {s['id']} as read): {s['problem']}")
    lost = counts.pop("lost", [])
    for x in lost:
        output.warn(f"left out the {x['what']}: {x['problem']}")
    if crc := counts.pop("manifest_crc", None):
        output.warn(f"read a MANIFEST that fails its CRC ({crc}); every record written "
                    "passed its own checks")
    if out not in (None, "-"):
        rescue = {"skipped": [s["id"] for s in skipped], "lost": [x["what"] for x in lost]}
        summary = {"out": out, **counts, **(rescue if skip_damaged else {})}
        if json and _is_stdout(out):  # `--out /dev/stdout --json`: not into the export
            output.warn(orjson.dumps(summary).decode())
        elif json:
            output.emit(summary)
        else:
            output.info(f"exported {counts['records']} records ({counts['nodes']} nodes) and "
                        f"{counts['edges']} edges to {out}")


def _is_stdout(out: str) -> bool:
    """`out` is the file stdout writes to (/dev/stdout, /proc/self/fd/1, the same pipe)."""
    try:
        return os.path.samestat(os.stat(out), os.fstat(1))
    except OSError:
        return False


class _Stdout:
    """stdout for the export stream, through output._write: `synapse export | head` ends
    quietly with exit 0 like every other command, not exit 1 on a broken pipe."""

    def write(self, data: bytes) -> int:
        output._write(data)
        return len(data)
