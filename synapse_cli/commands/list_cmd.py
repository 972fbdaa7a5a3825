"""`synapse list`: the memories, newest first, filtered like recall, a page at a time."""
from __future__ import annotations

from typing import List, Optional

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, check_tags, complete, parse_time_option, store_path
from .exits import USAGE, UserError

TYPES = ("episodic", "semantic", "working", "procedural")


def register(app: typer.Typer) -> None:
    app.command("list")(list_memories)


def _table(page: dict):
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False, expand=False)
    for col in ("id", "time", "type", "who", "memory", "flags"):
        t.add_column(col, overflow="fold", no_wrap=col in ("id", "time"))
    for m in page["memories"]:
        if m["type"] == "semantic":
            n = m.get("episodes", 0)
            what = f"{m['name']} ({m['etype']}), {n} episode{'' if n == 1 else 's'}"
        else:
            what = m["text"] if len(m["text"]) <= 160 else m["text"][:157] + "..."
        flags = [f for f in ("pinned", "in_trash") if m[f]] + ([] if m["resolved"] else
                                                               ["unresolved"])
        t.add_row(str(m["id"]), m["time"].replace("T", " ").rstrip("Z"), m["type"],
                  output.shown(m.get("speaker") or ""), output.shown(what), " ".join(flags))
    return t


def list_memories(
    memory_type: List[str] = typer.Option([], "--type", metavar="TYPE",
                                          autocompletion=complete(*TYPES),
                                          help="Only this memory type (repeatable): episodic, "
                                               "semantic, working, procedural."),
    since: Optional[str] = typer.Option(None, "--since", metavar="TIME",
                                        help="Only memories at or after TIME (ISO 8601 / "
                                             "epoch ms)."),
    until: Optional[str] = typer.Option(None, "--until", metavar="TIME",
                                        help="Only memories at or before TIME (a bare date: "
                                             "the end of that day, UTC)."),
    tag: List[str] = typer.Option([], "--tag", metavar="TAG",
                                  help="Only memories carrying TAG (repeatable; speaker:NAME, "
                                       "session:ID work too)."),
    trashed: bool = typer.Option(False, "--trashed",
                                 help="List the trash (pruned, not yet compacted) instead."),
    limit: int = typer.Option(50, "--limit", "-n", min=1, help="Memories per page."),
    after: Optional[int] = typer.Option(None, "--after", metavar="ID", min=1, max=2**64 - 1,
                                        help="The next page: memories listed after record ID "
                                             "(the last id of the previous page)."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """List memories, newest first, filtered like recall, a page at a time.

    One JSON line per memory in a pipe or with --json, a table on a terminal. A semantic node
    shows its name, type and how many episodes it links. --after takes the last id of a page.

    Example: synapse list --tag speaker:Ana --since 2026-01-01 --limit 20
    """
    from .. import api

    for t in memory_type:
        if t not in TYPES:
            raise UserError(f"--type {t!r}: expected one of {', '.join(TYPES)}", code=USAGE)
    check_tags(tag)
    try:
        page = api.list_memories(store_path(), types=memory_type, tags=tag,
                                 since_ms=parse_time_option(since, "--since", start=True),
                                 until_ms=parse_time_option(until, "--until", end_of_day=True),
                                 trashed=trashed, limit=limit, after=after)
    except api.InputError as exc:
        raise UserError(f"--after {after}: no record with this id in the store", hint="ids "
                        "are in the output of list, ingest and recall") from exc
    if output.Out.want_table():
        console = output.stdout_console()
        if not page["memories"]:
            console.print("no memories" + (" in the trash" if trashed else "")
                          + (" match" if (memory_type or tag or since or until) else ""))
            return
        console.print(_table(page))
        more = f"; next page: --after {page['next_after']}" if page["next_after"] else ""
        console.print(f"{len(page['memories'])} of {page['total']}{more}", style="dim")
        return
    output.emit_all(page["memories"])
    if page["next_after"]:
        output.info(f"more: synapse list --after {page['next_after']}")
