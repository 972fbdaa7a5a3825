"""`synapse ingest`: store what happened as episodic memories."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from . import output, render
from .common import JSON_OPTION, QUIET_OPTION, complete, lock_timeout, store_path
from .exits import DATAERR, NOINPUT, USAGE, UserError

FORMATS = ("json", "text", "doc")


def register(app: typer.Typer) -> None:
    app.command("ingest")(ingest)


def _read_inputs(files: list[str], fmt: str, skip_invalid: bool) -> list:
    """Every Item and InputError of the input, in input order."""
    from ..engine import inputs

    parsed_all = []
    for name in files or ["-"]:
        if name == "-":
            data = sys.stdin.buffer.read()
        else:
            try:  # any readable file: also a FIFO or a process substitution (/dev/fd/N)
                data = Path(name).read_bytes()
            except OSError as exc:  # sysexits: an input file missing or unreadable is 66
                reason = "no such file" if isinstance(exc, FileNotFoundError) else \
                    (exc.strerror or str(exc)).lower()
                raise UserError(f"{name}: {reason}", code=NOINPUT) from None
        if fmt == "json":
            parsed = inputs.parse_ndjson(data.splitlines(), name)
        elif fmt == "text":
            parsed = inputs.parse_text(data.splitlines(), name)
        else:
            parsed = inputs.parse_document(data, name)
        for x in parsed:
            if isinstance(x, inputs.InputError) and not skip_invalid:
                raise UserError(str(x), code=DATAERR,
                                hint="nothing was stored; fix the line or pass --skip-invalid")
            parsed_all.append(x)
    return parsed_all


def ingest(
    files: Optional[List[str]] = typer.Argument(None, metavar="[FILE]...",
                                                help="Input files; none or '-' reads stdin."),
    fmt: str = typer.Option("json", "--format", "-f", metavar="json|text|doc",
                            autocompletion=complete(*FORMATS),
                            help="json: NDJSON objects; text: one memory per line; "
                                 "doc: 1,200-character chunks with 200 overlap."),
    goal: Optional[str] = typer.Option(None, "--goal", metavar="TEXT",
                                       help="Drop input whose similarity to this goal is below "
                                            "--goal-threshold (reported as gated). Config: "
                                            "gating.goal."),
    goal_threshold: Optional[float] = typer.Option(None, "--goal-threshold",
                                                   help="Cosine similarity a memory needs to "
                                                        "pass --goal (default 0.1)."),
    importance: Optional[float] = typer.Option(None, "--importance",
                                               help="Importance (0.05-10) for items that do not "
                                                    "give one (default 1.0)."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid",
                                      help="Store the valid items and report each bad one, "
                                           "instead of rejecting the whole input."),
    json: bool = JSON_OPTION,
    quiet: bool = QUIET_OPTION,
) -> None:
    """Store input as episodic memories: embeddings, BM25 postings, temporal edges.

    NDJSON fields: text (required), timestamp (ISO 8601 or epoch ms), speaker, session,
    source, importance (0.05-10), valence (-1..1), arousal (0..1), tags (list), pinned,
    resolved, type (episodic|working|procedural), dia_id, meta (object). The whole input is
    one transaction: a malformed line exits 65 naming it and stores nothing. Prints one JSON
    line per input item; on a terminal, a progress bar and a summary instead.

    Example: echo '{"text": "Met Ana at the climbing gym", "speaker": "me"}' | synapse ingest
    """
    from .. import api

    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}", code=USAGE)
    settings = api.settings(goal=goal, goal_threshold=goal_threshold,
                            default_importance=importance)  # a bad config fails before input
    from ..engine.inputs import InputError

    parsed = _read_inputs(files or [], fmt, skip_invalid)
    items = [x for x in parsed if not isinstance(x, InputError)]
    errors = [x for x in parsed if isinstance(x, InputError)]
    for e in errors:
        output.warn(f"synapse: skipped {e}")
    result = None
    if items:
        with render.IngestProgress() as progress:
            from ..models.embedder import get_embedder

            result = api.ingest_items(items, store_path(), lock_timeout=lock_timeout(),
                                      resolved=settings, embedder=progress.wrap(get_embedder()))
    # stdout only after the commit: a failed stdout then never hides whether input was stored;
    # one line per input item, in input order (an outcome per item, in item order)
    outcomes = iter(result.outcomes if result is not None else [])
    rows = [{"id": None, "status": "invalid", "where": x.where, "error": x.reason}
            if isinstance(x, InputError) else next(outcomes).as_dict() for x in parsed]
    if output.Out.want_table():
        output.stdout_console().print(render.ingest_summary(
            rows, result.seconds if result is not None else 0.0, store_path()))
        return
    output.emit_all(rows)
    if result is None:
        output.info("nothing to ingest")
        return
    c = result.counts()
    output.info(f"stored {c['stored']}, duplicate {c['duplicate']}, gated {c['gated']}, "
                f"invalid {len(errors)} in {result.seconds:.2f}s")
