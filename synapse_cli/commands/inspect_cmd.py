"""`synapse inspect`: summary, `record ID`, `verify`."""
from __future__ import annotations

import typer

from . import output
from .common import JSON_OPTION, QUIET_OPTION, no_record, store_path

inspect_app = typer.Typer(help="Look inside a store: summary, one record, or a full verify.\n\n"
                               "Example: synapse inspect --json | jq .records",
                          invoke_without_command=True, no_args_is_help=False)


def register(app: typer.Typer) -> None:
    app.add_typer(inspect_app, name="inspect")


@inspect_app.callback(invoke_without_command=True)
def summary(ctx: typer.Context, json: bool = JSON_OPTION, quiet: bool = QUIET_OPTION) -> None:
    """Records by memory type and flag, segments, header version, edges by type, bytes on disk.

    Example: synapse inspect --json | jq .records
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..engine.maintenance.inspect import summary as build
    from ..engine.store import read_retrying

    info = read_retrying(store_path(), build)
    if output.Out.want_table() and not json:
        _print_summary(info)
    else:
        output.emit(info)


@inspect_app.command("record")
def record(record_id: int = typer.Argument(..., metavar="ID", help="Record id."),
           json: bool = JSON_OPTION, quiet: bool = QUIET_OPTION) -> None:
    """Every header field decoded, the payload, and the record's edges.

    Example: synapse inspect record 42 --json | jq .header
    """
    from ..engine.maintenance.inspect import record as build
    from ..engine.store import read_retrying

    try:
        info = read_retrying(store_path(), lambda store: build(store, record_id))
    except KeyError:
        raise no_record(record_id, "record ids are in the output of ingest and recall; "
                                   "`synapse inspect` shows how many records the store "
                                   "holds") from None
    if output.Out.want_table() and not json:
        # through output.dumps, which handles records nested deeper than orjson allows
        output.stdout_console().print_json(output.dumps(info).decode("utf-8"))
    else:
        output.emit(info)


@inspect_app.command("verify")
def verify(json: bool = JSON_OPTION, quiet: bool = QUIET_OPTION) -> int:
    """Walk every checksum and invariant; exit 0 when healthy, 1 with file and offset otherwise.

    Example: synapse inspect verify || echo damaged
    """
    from ..engine.maintenance.verify import verify as run

    report = run(store_path())
    if json or not output.Out.stdout_is_tty():
        output.emit(report.as_dict())
    else:
        status = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        output.stdout_console().print(f"{report.store}: {status} {report.checked}")
    for p in report.problems:
        where = p.file + (f" at offset {p.offset}" if p.offset is not None else "")
        output.error(f"{where}: {p.kind}: {p.message}")
    return 0 if report.ok else 1


def _print_summary(info: dict) -> None:
    from rich.table import Table

    t = Table(title=f"synapse store {info['store']}", show_header=False)
    t.add_row("records", str(info["records"]["total"]))
    for k, v in info["records"]["by_type"].items():
        t.add_row(f"  {k}", str(v))
    for k, v in info["records"]["by_flag"].items():
        t.add_row(f"  {k}", str(v))
    t.add_row("header version", f"v{info['header_version']} ({info['header_bytes']} B)")
    if info["bm25_tokenizer"] is not None:
        t.add_row("BM25 tokenizer", f"v{info['bm25_tokenizer']}")
    t.add_row("segments", str(len(info["segments"])))
    t.add_row("edges", str(info["edges"]["total"]))
    for k, v in info["edges"]["by_type"].items():
        t.add_row(f"  {k}", str(v))
    t.add_row("bytes on disk", str(info["bytes"]["total"]))
    output.stdout_console().print(t)
