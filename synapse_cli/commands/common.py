"""Options and helpers shared by the subcommand modules."""
from __future__ import annotations

import math
import os
import sys
from typing import Optional

import typer

from ..engine.paths import resolve_store
from . import output
from .exits import DATAERR, USAGE, UserError


def _json(value: bool) -> bool:
    if value:
        output.Out.json = True
    return value  # click passes what a callback returns to the command


def _quiet(value: bool) -> bool:
    if value:  # never unset: `synapse -q CMD` said it before the command
        output.Out.quiet = True
    return value


# Every command takes these; their callbacks set `output.Out`, which decides what is printed.
JSON_OPTION = typer.Option(False, "--json", callback=_json,
                           help="JSON on stdout, one object per line, also on a terminal.")
QUIET_OPTION = typer.Option(False, "--quiet", "-q", callback=_quiet,
                            help="No messages on stderr except errors.")


def complete(*values: str):
    """Tab completion of an option's or argument's values (the script `synapse completion`
    prints asks the command for them)."""
    def values_for(incomplete: str):
        return [v for v in values if v.startswith(incomplete or "")]
    return values_for


def setting_choices(name: str) -> tuple[str, ...]:
    """The values a setting allows (engine/config.py), e.g. recall.mode's modes."""
    from ..engine.config import SETTINGS

    return next(s.choices for s in SETTINGS if s.name == name)


class Globals:
    """The global options (`synapse --store DIR --lock-timeout S CMD`), set by main's callback
    before a command runs."""
    store: Optional[str] = None
    lock_timeout: Optional[float] = None  # the flag; lock_timeout() adds the variable


def store_path():
    return resolve_store(Globals.store)


def seconds(text: str, where: str, usage: bool) -> float:
    """A number of seconds >= 0 (inf: for ever); a bad flag is a usage error (2), a bad
    variable a setting's (78)."""
    from ..engine.config import ConfigError

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0:
        raise ConfigError(f"{where} {text!r}: expected a number of seconds >= 0", usage=usage)
    return value


def lock_timeout() -> float:
    """--lock-timeout (checked when parsed), else $SYNAPSE_LOCK_TIMEOUT, else 30 s. The
    variable is checked here, when a writer needs it, so that `--help`, `config` and readers
    work whatever it holds."""
    if Globals.lock_timeout is not None:
        return Globals.lock_timeout
    env = os.environ.get("SYNAPSE_LOCK_TIMEOUT")
    return 30.0 if env is None else seconds(env, "$SYNAPSE_LOCK_TIMEOUT", usage=False)


def no_record(record_id, hint: str = "ids are in the output of ingest and recall") -> UserError:
    """An id the store does not hold (never, or no longer after --compact), as every command
    words it (exit 65, DATAERR)."""
    return UserError(f"no record with id {record_id} in this store", code=DATAERR, hint=hint)


def check_tags(tags, option: str = "--tag") -> None:
    """An empty --tag, or an empty name in a speaker:/session:/source: tag (a script's unset
    $NAME), would match nothing or everything, silently: refuse it (exit 2)."""
    from ..engine.arguments import tags as check

    check(tags, option)


def confirm_destructive(what: str, yes: bool) -> None:
    """Destructive operations need --yes off a terminal; on a terminal we ask."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise UserError(f"{what}: destructive, and stdin is not a terminal to ask", code=USAGE,
                        hint="pass --yes to confirm, or --dry-run to see what would change")
    if not typer.confirm(f"{what}. Continue?", default=False, err=True):
        raise typer.Exit(1)


def parse_time_option(value: str | None, flag: str, end_of_day: bool = False,
                      start: bool = False) -> int | None:
    """A --since/--before style option: ISO 8601 or epoch ms -> epoch ms (usage error if bad).
    `end_of_day` (--until, --as-of): a bare date is its last millisecond (parse_window_end);
    `start` (--since): a time between two milliseconds is rounded up (parse_window_start)."""
    if value is None:
        return None
    from ..engine.inputs import InputError, parse_timestamp, parse_window_end, parse_window_start

    if value.isdigit() and len(value) <= 8:  # "2024", "20240101": a date, not epoch ms
        raise UserError(f"{flag} {value}: a number of 8 digits or fewer is read as neither a "
                        "date nor epoch milliseconds (a time since 1973 has 12-13 digits): "
                        "write a date as ISO 8601 (2024-01-01) or a time as 1704067200000",
                        code=USAGE)
    try:
        parse = parse_window_end if end_of_day else parse_window_start if start \
            else parse_timestamp
        return parse(int(value) if value.isdigit() else value, flag)
    except InputError as exc:
        raise UserError(str(exc), code=USAGE) from None
