"""`synapse config`: the effective settings and where each one came from."""
from __future__ import annotations

import typer

from . import output
from .common import QUIET_OPTION
from .exits import USAGE, UserError


def register(app: typer.Typer) -> None:
    app.command("config")(config)


def config(
    json: bool = typer.Option(False, "--json", help="One JSON object on stdout (the default "
                                                    "when stdout is not a terminal)."),
    template: bool = typer.Option(False, "--template",
                                  help="Print a config.toml with every setting commented out "
                                       "at its default, to start a config file from."),
    path: bool = typer.Option(False, "--path", help="Print the config file's path and exit."),
    quiet: bool = QUIET_OPTION,
) -> None:
    """Show every setting's effective value and its source: default, file, env or flag.

    Settings come from command-line flags, then SYNAPSE_* environment variables, then
    $XDG_CONFIG_HOME/synapse/config.toml (else ~/.config/synapse/config.toml), then the
    defaults. Flags apply to one command, so here the sources are default, file and env. A
    table on a terminal, JSON otherwise; an invalid file exits 78 naming the line and key.

    Example: synapse config --template > ~/.config/synapse/config.toml
    """
    from ..engine import config as cf
    from ..engine.paths import config_file

    if sum((path, template, json)) > 1:
        raise UserError("--path, --template and --json each print something else: give one",
                        code=USAGE)
    if path:
        output.text(f"{config_file()}\n")
        return
    if template:
        output.text(cf.template())
        return
    settings = cf.resolve()
    output.Out.json = output.Out.json or json
    if not output.Out.want_table():
        output.emit(settings.as_dict())
        return
    from rich.table import Table

    exists = "" if settings.file.is_file() else " (not found)"
    table = Table(title=f"config file: {settings.file}{exists}", title_justify="left")
    for col in ("setting", "value", "source", "environment"):
        table.add_column(col)
    for s in cf.SETTINGS:
        value, source = settings.values[s.name], settings.sources[s.name]
        shown = "-" if value is None else str(value).lower() if s.type is bool else str(value)
        table.add_row(s.name, shown, source if source == "default" else f"[bold]{source}[/]",
                      s.env)
    output.stdout_console().print(table)
