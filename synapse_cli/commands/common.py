"""Options and helpers shared by the subcommand modules."""
from __future__ import annotations

import sys

import typer

from ..engine.paths import resolve_store
from .exits import USAGE, UserError

JSON_OPTION = typer.Option(False, "--json", help="NDJSON on stdout (one object per line).")


def store_path():
    from .main import Globals

    return resolve_store(Globals.store)


def lock_timeout() -> float:
    from .main import Globals

    return Globals.lock_timeout


def confirm_destructive(what: str, yes: bool) -> None:
    """Destructive operations need --yes off a terminal; on a terminal we ask."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError(f"{what} is destructive and stdin is not a terminal", code=USAGE,
                        hint="pass --yes to confirm, or --dry-run to see what would change")
    if not typer.confirm(f"{what}. Continue?", default=False, err=True):
        raise typer.Exit(1)


def parse_time_option(value: str | None, flag: str) -> int | None:
    """A --since/--before style option: ISO 8601 or epoch ms -> epoch ms (usage error if bad)."""
    if value is None:
        return None
    from ..engine.inputs import InputError, parse_timestamp

    try:
        return parse_timestamp(int(value) if value.isdigit() else value, flag)
    except InputError as exc:
        raise UserError(str(exc), code=USAGE) from None
