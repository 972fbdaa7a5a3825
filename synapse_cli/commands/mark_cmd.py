"""`synapse mark`: pin / unpin and resolve / unresolve records (flag bits, FORMAT.md 4.1), and
bring dormant semantic nodes back into the active graph (FORMAT.md 16)."""
from __future__ import annotations

from typing import List

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, lock_timeout, no_record, store_path
from .exits import DATAERR, USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("mark")(mark)


def mark(
    ids: List[int] = typer.Argument(..., metavar="ID...", min=1, max=2**64 - 1,
                                    help="Record ids to mark."),
    pin: bool = typer.Option(False, "--pin",
                             help="Pinned records never decay and are never pruned."),
    unpin: bool = typer.Option(False, "--unpin", help="Undo --pin."),
    resolve: bool = typer.Option(False, "--resolve", help="Undo --unresolve."),
    unresolve: bool = typer.Option(
        False, "--unresolve",
        help="Unresolved records (open tasks) do not decay and are pruned only by id."),
    restore_dormant: bool = typer.Option(
        False, "--restore-dormant",
        help="Bring semantic nodes that consolidation archived as dormant back into the active "
             "graph (recall and PageRank see them again)."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Pin or unpin, resolve or unresolve records, restore dormant nodes; prints each record's
    flags (and whether it is dormant) as NDJSON.

    Every id is checked before anything changes; an unknown id exits 65 and changes nothing.

    Example: synapse mark 12 40 --pin --unresolve
    """
    from ..engine.maintenance import prune as pr
    from ..engine.store import StoreWriter

    # two flags, not a --pin/--unpin pair: with a pair the last one given silently won
    for yes, no, name in ((pin, unpin, "pin"), (resolve, unresolve, "resolve")):
        if yes and no:
            raise UserError(f"--{name} and --un{name} contradict each other: give one",
                            code=USAGE)
    pin = True if pin else False if unpin else None
    resolve = True if resolve else False if unresolve else None
    if pin is None and resolve is None and not restore_dormant:
        raise UserError("nothing to mark: give --pin/--unpin, --resolve/--unresolve or "
                        "--restore-dormant", code=USAGE)
    with StoreWriter.open(store_path(), lock_timeout=lock_timeout()) as w:
        try:
            rows = pr.mark(w, ids, pin=pin, resolve=resolve, restore_dormant=restore_dormant)
        except KeyError as exc:
            raise no_record(exc.args[0]) from None
        except pr.InTrash as exc:
            raise UserError(f"record {exc.args[0]} is in the trash; a pin would not keep it "
                            "from --compact", code=DATAERR,
                            hint=f"synapse prune --restore {exc.args[0]} first") from None
    if json or not output.Out.stdout_is_tty():
        output.emit_all(rows)
    else:
        for r in rows:
            output.stdout_console().print(
                f"{r['id']}: pinned={r['pinned']} resolved={r['resolved']}"
                + (" dormant" if r["dormant"] else "") + (" (in trash)" if r["in_trash"] else ""))
