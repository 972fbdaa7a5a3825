"""`synapse migrate --header v1|v2|v3`: change the record header layout (seed 004's layouts)."""
from __future__ import annotations

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, complete, confirm_destructive, lock_timeout
from .common import store_path
from .exits import USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("migrate")(migrate)


def migrate(
    header: str = typer.Option(..., "--header", metavar="v1|v2|v3",
                               autocompletion=complete("v1", "v2", "v3"),
                               help="Target header layout: v1 (32 B), v2 (48 B), v3 (64 B)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would change; change nothing."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Confirm a lossy downgrade."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Rewrite every segment in another header layout, atomically.

    Upgrades are lossless; a downgrade that drops values records hold (to v1: arousal,
    storage strength) needs --yes off a terminal. Each segment goes to *.migrating, is verified, the original is kept as *.bak.

    Example: synapse migrate --header v1 --dry-run
    """
    from store_format import migration
    from ..engine.store import Store, StoreWriter

    try:
        version = {"v1": 1, "v2": 2, "v3": 3, "1": 1, "2": 2, "3": 3}[header.lower()]
    except KeyError:
        raise UserError(f"--header {header!r}: expected v1, v2 or v3", code=USAGE) from None
    # a dry run only reads: no writer lock, so it works on a read-only store
    opened = Store.open(store_path()) if dry_run else \
        StoreWriter.open(store_path(), lock_timeout=lock_timeout())
    with opened as w:
        plan = migration.plan(w.path, w.manifest, version)
        report = plan.as_dict() | {"dry_run": dry_run}
        if not dry_run:
            if plan.lossy:
                lost = ", ".join(f"{k} on {n} records" for k, n in plan.loses.items())
                confirm_destructive(f"downgrading to v{version} loses {lost}", yes)
            migration.migrate(w.path, w.manifest, version)
    if json or not output.Out.stdout_is_tty():
        output.emit(report)
    else:
        verb = "would migrate" if dry_run else "migrated"
        output.stdout_console().print(
            f"{verb} {plan.records} records in {plan.segments} segments from "
            f"v{'/v'.join(map(str, plan.from_versions)) or '-'} to v{version}"
            f" ({plan.bytes_before} -> {plan.bytes_after} bytes)"
            + (" [lossy]" if plan.lossy else ""))
